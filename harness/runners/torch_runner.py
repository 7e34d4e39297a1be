"""PyTorch strategies, child side: single_device, ddp, fsdp (the others: their own modules).

Imported only inside a worker process of a torch case (DESIGN.md: `import torch` lives in
torch-specific modules). Each worker builds the same model from the same seed, trains on its
shard of the same global batch, times its own steps, and rank 0 saves its final weights so
the parent can compare them with one device trained on the global batch.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.core.case import (
    LEARNING_RATE,
    LOCAL_REPLICAS,
    REFERENCE_ROLES,
    Case,
    ServerReport,
    WorkerReport,
    reference_threads,
)
from harness.measure import memory
from harness.measure.stats import OVERLAP_ROUNDS
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter
from harness.runners import torch_workload as tw


def _threads(case: Case) -> int:
    """One 'device' is this machine's cores split evenly among the local replicas, the
    same for the baseline and the distributed cases, so efficiency compares like with like."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // LOCAL_REPLICAS)


def _init_group(case: Case, rank: int, world: int) -> None:
    """gloo over the interface the layout chose, meeting through the rendezvous file."""
    store = dist.FileStore(os.environ["STRATBENCH_RENDEZVOUS"], world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=max(30.0, case.timeout_s)))


def _wrap(case: Case, model: torch.nn.Module) -> torch.nn.Module:
    if case.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        bucket_mb = float(case.options.get("bucket_mb", 25))
        return DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    if case.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in tw.shard_units(model):
            fully_shard(module)
        fully_shard(model)
        return model
    return model


def _full_weights(case: Case, model: torch.nn.Module) -> dict[str, np.ndarray]:
    if case.strategy == "fsdp":
        from torch.distributed.tensor import DTensor

        out = {}
        for name, p in model.named_parameters():
            full = p.full_tensor() if isinstance(p, DTensor) else p
            out[name] = full.detach().cpu().numpy().copy()
        return out
    inner = model.module if hasattr(model, "module") else model
    return {n: p.detach().cpu().numpy().copy() for n, p in inner.named_parameters()}



def measure_overlap(case: Case, model: torch.nn.Module, spec: tw.Workload, batch: Any,
                    step_s: float) -> dict[str, float]:
    """How much of DDP's gradient all-reduce hides under backward, measured on this case:
    forward + backward alone (``no_sync``: no all-reduce), then the gradient alone
    all-reduced in DDP's bucket sizes, each the median of a few rounds started together;
    overlap = (compute + exchange - step) / min(compute, exchange): 1 when the shorter one
    hides entirely under the longer, 0 when they run one after the other. Weights are left
    as they are (no optimizer step; the all-reduced buffer is a copy)."""
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    flat = torch.cat(grads) if grads else torch.zeros(1)
    bucket = max(1, int(float(case.options.get("bucket_mb", 25)) * 2**20
                        / flat.element_size()))
    compute, exchange = [], []
    for _ in range(OVERLAP_ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        with model.no_sync():
            tw.loss(spec, model, batch).backward()
        compute.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        for chunk in flat.split(bucket):
            dist.all_reduce(chunk)
        exchange.append(time.perf_counter() - start)
    return measured_overlap(compute, exchange, step_s)


def measure_fsdp_overlap(case: Case, model: torch.nn.Module, spec: tw.Workload, batch: Any,
                         step_s: float) -> dict[str, float]:
    """FSDP's overlap, measured on this case: forward + backward of an unsharded copy of the
    model alone, then FSDP2's exchange alone (each unit gathered for forward, gathered again
    for backward, its gradient reduce-scattered, in the units' own sizes), each the median
    of a few rounds started together; overlap as for DDP. The weights stay as they are."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    owned: list[int] = []  # each unit's own parameters (not those of units inside it)
    for unit in units:
        inner = {id(p) for m in unit.modules() if m is not unit and isinstance(m, FSDPModule)
                 for p in m.parameters()}
        owned.append(sum(p.numel() for p in unit.parameters() if id(p) not in inner))
    world = dist.get_world_size()
    grads = [torch.zeros(-(-n // world) * world) for n in owned]
    shards = [torch.zeros(g.numel() // world) for g in grads]
    plain = tw.build(spec, case.seed)
    compute, exchange = [], []
    for _ in range(OVERLAP_ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        plain.zero_grad(set_to_none=True)
        tw.loss(spec, plain, batch).backward()
        compute.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        for unit in units:  # forward
            unit.unshard()
            unit.reshard()
        for unit, grad, shard in zip(reversed(units), reversed(grads), reversed(shards),
                                     strict=True):  # backward
            unit.unshard()
            unit.reshard()
            dist.reduce_scatter_tensor(shard, grad)
        exchange.append(time.perf_counter() - start)
    return measured_overlap(compute, exchange, step_s)


PROBES = {"ddp": measure_overlap, "fsdp": measure_fsdp_overlap}
SPLIT_ROUNDS = 3


def _timed_split(spec: tw.Workload, model: torch.nn.Module, batch: Any) -> dict[str, float]:
    """Forward, backward and the optimizer's update of one step, timed apart (the median of
    a few rounds); the update at learning rate 0 (SGD does the same work), so the weights
    stay as they are."""
    probe = torch.optim.SGD(model.parameters(), lr=0.0)
    parts: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    for _ in range(SPLIT_ROUNDS):
        probe.zero_grad(set_to_none=True)
        start = time.perf_counter()
        value = tw.loss(spec, model, batch)
        forward = time.perf_counter()
        value.backward()
        backward = time.perf_counter()
        probe.step()
        done = time.perf_counter()
        parts["forward_s"].append(forward - start)
        parts["backward_s"].append(backward - forward)
        parts["optimizer_s"].append(done - backward)
    model.zero_grad(set_to_none=True)
    return {k: float(np.median(v)) for k, v in parts.items()}


def measure_split(case: Case, model: torch.nn.Module, spec: tw.Workload, batch: Any,
                  sparse: bool) -> dict[str, str | dict[str, float]]:
    """The one-device step split where strategies differ (harness.sim.systems.compute.ComputeSplit):
    a parameter-server worker computes forward and backward only and its servers apply the
    update; DDP and FSDP update every row on every worker. A sparse baseline also times the
    same model with dense tables, which is what DDP and FSDP compute."""
    out: dict[str, str | dict[str, float]] = {"updates": "sparse rows" if sparse else "dense",
                           "compute_split": _timed_split(spec, model, batch)}
    if sparse:
        out["dense_compute_split"] = _timed_split(spec, tw.build(spec, case.seed), batch)
    return out


def train(case: Case, rank: int, world: int, batch_per_rank: int,
          workdir: Path, save_weights: bool, distributed: bool = True) -> WorkerReport:
    """The timed loop shared by every synchronous torch strategy (and the reference)."""
    spec = tw.spec(case)
    torch.manual_seed(case.seed)
    resident = memory.current()  # what the model costs, not the interpreter
    # one device updates only the rows it touched, as recommender training does; DDP and
    # FSDP all-reduce dense gradients (their timing probes need them dense too)
    baseline = not distributed or case.strategy == "single_device"
    sparse = baseline and tw.sparse_updates(spec)
    model = tw.build(spec, case.seed, sparse_embeddings=sparse)
    if distributed:
        model = _wrap(case, model)
    # the peak from here on: the builder's temporaries (numpy weights copied in, FSDP's
    # full tensors before sharding) are gone, the model's own state is resident
    was_reset = memory.reset_peak()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    global_batch = batch_per_rank * world
    batches = [tw.shard(tw.batch(spec, step, global_batch, case.seed), rank, world)
               for step in range(case.total_steps)]
    meter = WireMeter(active=distributed and rank == 0)
    times, losses, cpu = tw.timed_steps(
        case, rank, batches, lambda batch: tw.timed_step(spec, model, optimizer, batch), meter)
    gained = memory.peak_since(resident, was_reset)  # before the probe's gradient copy
    probe = PROBES.get(case.strategy) if distributed and world > 1 and times else None
    report: WorkerReport = {"step_times_s": times, "losses": losses, "rank": rank,
                            "world": world, "threads": torch.get_num_threads(),
                            "grad_bytes": tw.grad_bytes(model), "model_memory_bytes": gained,
                            **meter.report(len(times)),
                            "details": dict(probe(case, model, spec, batches[-1],
                                                  float(np.median(times))) if probe else {})}
    details = report["details"]  # then the split, the operators and the CPU time
    if times and case.strategy == "single_device" and distributed:  # not the reference's
        details.update(measure_split(case, model, spec, batches[-1], sparse))
        # the model as operators: what a described device's compute is modelled from
        from harness.runners.torch_operators import saved_activation_bytes, trace_operators

        last = batches[-1]
        try:
            details["operators"] = trace_operators(model, lambda: tw.loss(spec, model, last),
                                                   batch_per_rank)
            # and what it keeps for backward: a described device's memory reads it
            details["activation_bytes_per_sample"] = saved_activation_bytes(
                model, lambda: tw.loss(spec, model, last), batch_per_rank)
        except Exception as exc:  # the record is optional; the measured run stands
            details["operators_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    elif tw.sparse_updates(spec):
        details["updates"] = "sparse rows" if sparse else "dense"
    details.update(cpu.report(len(times)))
    # gathering full weights is a collective under FSDP: every rank takes part
    weights = _full_weights(case, model) if distributed else {
        n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters()}
    if save_weights:
        path = workdir / f"weights-{case.strategy}-{rank}.npz"
        np.savez(path, **weights)
        report["weights"] = str(path)
    return report


def run(case: Case, role: str, index: int, workdir: Path
        ) -> WorkerReport | ServerReport:
    if role in REFERENCE_ROLES:  # one device, global batch: the correctness baseline
        torch.set_num_threads(reference_threads(role, _threads(case)))
        return train(case, 0, 1, case.global_batch, workdir, save_weights=True,
                     distributed=False)
    if case.strategy == "single_device":
        torch.set_num_threads(_threads(case))
        return train(case, 0, 1, case.per_replica_batch, workdir, save_weights=True)
    if case.strategy == "comm":
        from harness.runners import torch_comm

        torch.set_num_threads(_threads(case))
        _init_group(case, index, case.replicas)
        report = torch_comm.run(case, index)
        dist.barrier()
        return report
    if case.strategy in ("ddp", "fsdp"):
        torch.set_num_threads(_threads(case))
        _init_group(case, index, case.replicas)
        report = train(case, index, case.replicas, case.per_replica_batch, workdir,
                       save_weights=index == 0)
        # Leave together and skip gloo's teardown: a rank tearing its threads down while a
        # peer still talks aborts ("terminate called without an active exception"); the
        # worker ends with os._exit right after its report, so the OS closes the sockets.
        dist.barrier()
        return report
    if case.strategy == "embedding_sharding":
        from harness.runners import torch_embedding_sharding

        torch.set_num_threads(_threads(case))
        _init_group(case, index, case.replicas)
        return torch_embedding_sharding.run(case, index, workdir)
    if case.strategy == "pipeline":
        from harness.runners import torch_pipeline

        torch.set_num_threads(_threads(case))
        _init_group(case, index, case.replicas)
        return torch_pipeline.run(case, index, workdir)
    if case.strategy == "tensor_parallel":
        from harness.runners import torch_tensor_parallel

        torch.set_num_threads(_threads(case))
        _init_group(case, index, case.replicas)
        return torch_tensor_parallel.run(case, index, workdir)
    if case.strategy in ("parameter_server", "parameter_server_async"):
        from harness.runners import torch_ps

        return torch_ps.run(case, role, index, workdir)
    raise ValueError(f"no torch runner for strategy {case.strategy!r}")
