"""A framework's training step on emulated hosts, predicted from calibration alone.

One function for the two questions that need it: `stratbench validate` predicts each
measured emulated run and stores the error; `stratbench recommend` predicts an emulated
cluster that was never run (same rules, this machine's calibration), so that a ranking of
real strategies exists before any run and its error is the validated one. Keeping the rules
here, not in either caller, is what keeps validate and recommend from importing each other.

The rules, measured on this machine (docs/SIMULATOR.md):
- the links as the link probe measured them (bandwidth, RTT/2 per one-way crossing);
- the library's own cost per message (alpha) and, for libraries whose work leaves the link
  idle (TF's collectives), per byte (beta): the loopback all-reduce fit at the run's rank
  count (the nearest swept);
- gloo's rendezvous costs a round trip per ring step (CommLibrary.latency_trips);
- compute is the one-replica step of the same framework on one core (its CPU time), split
  as each strategy computes it (a parameter server's workers forward and backward, its
  servers the update; DDP the dense tables' step: calibrate.workload.worker_compute), slowed
  where the emulated hosts' processes oversell the machine's cores;
- each synchronous strategy's own time per step beyond the model, from its local runs;
- parameter servers as the run or the runners lay them out (shards, which workers' hosts
  the servers share).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from harness.calibrate.links import MeasuredLinks, emulated_topology
from harness.calibrate.sweep_selection import software_costs
from harness.calibrate.workload import worker_compute
from harness.core.strategies import MODEL_PARALLEL, library
from harness.core.strategies import strategy as find_strategy
from harness.sim.model.sparse_traffic import torch_ps_traffic
from harness.sim.rows import LayoutRow, Scalar, SimulatedRow
from harness.sim.systems.compute import ComputeSplit
from workloads.execution import Execution, PsDeployment


def simulated_as(framework: str, strategy: str) -> str | None:
    """The simulator's strategy for a real one as our runners run it; None for baselines and
    names no framework has."""
    record = find_strategy(framework, strategy)
    return record.timed_as if record else None


def uses_collectives(framework: str, strategy: str) -> bool:
    """Whether the strategy exchanges through its library's collectives (Strategy's)."""
    record = find_strategy(framework, strategy)
    return record is not None and record.uses_collectives


@dataclass(frozen=True, kw_only=True)
class PredictedRow:
    """The simulator's row for a framework's strategy on emulated hosts: ``row`` as the
    simulator answered it (under the simulator's strategy, ``model``), on ``topology`` (the
    hosts as links, the library's costs added), and the share of the links it was given."""

    row: SimulatedRow
    topology: str
    model: str  # the simulator's strategy
    framework: str
    strategy: str  # the framework's
    link_share: float = 1.0  # of the links the library's collectives reach
    exchange_share: float | None = None  # of them its all-to-alls reach, where swept
    link_share_source: str | None = None  # where the share was read (predict_emulated)

    def to_row(self) -> dict[str, Scalar]:
        """The simulator's flat row with the prediction's columns (framework and strategy
        the real ones)."""
        out = self.row.to_row() | {
            "topology": self.topology, "model": self.model, "framework": self.framework,
            "strategy": self.strategy, "link_share": self.link_share,
            "exchange_share": self.exchange_share}
        if self.link_share_source is not None:
            out["link_share_source"] = self.link_share_source
        return out


@dataclass(frozen=True)
class PredictedLayout:
    """The simulator's row for a pipeline / tensor-parallel run of torch's runners on
    emulated hosts, and the ``topology`` it was simulated on."""

    row: LayoutRow
    topology: str

    @property
    def model(self) -> str:
        """The simulator's strategy (pipeline, tensor_parallel, ...)."""
        return self.row.strategy


def machine_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2


@dataclass(frozen=True)
class PsLayout:
    """A parameter server as a run laid it out on emulated hosts (one worker per host)."""

    shard_bytes: list[float]  # per server, in task order (ps0, ps1, ...)
    colocated: bool  # every server shares its host with a worker
    # colocated: the worker (counted in host order) each server sits beside; across racks
    # it decides which pushes cross an uplink
    beside: tuple[int, ...] | None = None


def placed_ps_layout(shard_bytes: list[float], host_of: dict[str, int]) -> PsLayout | None:
    """The layout of servers ``ps0..`` and workers ``worker0..`` on the hosts ``host_of``
    names; None where the simulator does not model it (two workers or two servers behind one
    host's link, or servers some beside workers and some not)."""
    def hosts(job: str) -> list[int]:
        tasks = sorted((t for t in host_of if t.startswith(job)),
                       key=lambda t: int(t[len(job):] or 0))
        return [host_of[t] for t in tasks]

    workers, servers = hosts("worker"), hosts("ps")
    if len(set(workers)) != len(workers) or len(set(servers)) != len(servers):
        return None
    shared = set(workers) & set(servers)
    if shared and len(shared) != len(servers):
        return None
    if not shared:
        return PsLayout(shard_bytes, False)
    rank = {h: i for i, h in enumerate(sorted(workers))}
    return PsLayout(shard_bytes, True, tuple(rank[h] for h in servers))


def runner_ps_layout(replicas: int, hosts: int, shards: int) -> PsLayout | None:
    """A parameter server as harness/runners lay it out on emulated hosts: task j (servers
    first, then workers, then TF's chief) on host j mod N, shards balanced by bytes."""
    tasks = [f"ps{k}" for k in range(shards)] + [f"worker{i}" for i in range(replicas)]
    return placed_ps_layout([1.0] * shards, {t: j % hosts for j, t in enumerate(tasks)})


def predict_step(framework: str, strategy: str, profile: Any, links: MeasuredLinks,
                 replicas: int, one_replica: float | ComputeSplit, *, fits: pd.DataFrame,
                 cores: int | None = None,
                 ps: PsLayout | None = None,
                 runtime_s: float = 0.0,
                 link_share: float = 1.0,
                 exchange_share: float | None = None) -> PredictedRow | None:
    """The simulator's row for `framework/strategy` with `replicas` workers on `links`
    (one per host), or None where the simulator has no model for it. ``profile``: a
    harness.sim WorkloadSpec (its compute time is replaced by what a worker computes,
    ``one_replica`` (seconds on one core, or its split: `worker_compute`), slowed by oversold
    cores; a parameter server's ``apply_s`` is its servers' update); ``ps``: the shard
    weights and placement of a parameter server;
    ``runtime_s``: the runtime's own time per step (`runtime_overhead`; for a strategy whose
    runtime works in lockstep, a rank's with a core of its own, stretched here as compute
    is by oversold cores); ``link_share``:
    the share of the links the library's collectives reach (harness.calibrate.link_share; the
    parameter servers' transports are not collectives and keep the probed rate);
    ``exchange_share``: the share its all-to-alls reach, where swept (else ``link_share``)."""
    from harness.sim import simulate
    from harness.sim.systems.calibration import stating

    model = simulated_as(framework, strategy)
    if model is None:
        return None
    record = find_strategy(framework, strategy)
    alpha, beta = software_costs(fits, framework, replicas)
    collective = uses_collectives(framework, strategy)
    lib = library(framework)
    serial_beta = beta if lib.serial_software and collective else 0.0
    if collective and link_share != 1.0:
        links = dataclasses.replace(links, bandwidth_bytes_s=links.bandwidth_bytes_s * link_share,
                                    uplink_bytes_s=links.uplink_bytes_s * link_share)
    topology = emulated_topology(links, (alpha, serial_beta),
                               lib.trips(model))
    processes = replicas
    deployment = PsDeployment(pull=lib.ps_pull)
    if model.startswith("parameter_server"):
        if ps is None:
            return None
        deployment = PsDeployment(shard_weights=tuple(ps.shard_bytes),
                                  colocated=ps.colocated, beside=ps.beside, pull=lib.ps_pull)
        processes += len(ps.shard_bytes) + (record.extra_processes if record else 0)
        if framework == "torch" and model == "parameter_server":
            deployment = dataclasses.replace(deployment, traffic=torch_ps_traffic(
                profile.name, profile.batch_size, replicas,
                len(ps.shard_bytes)))
    split = (one_replica if isinstance(one_replica, ComputeSplit)
             else ComputeSplit(one_replica, 0.0))
    # the emulated hosts share the machine's cores: compute slows when they are oversold
    oversold = max(1.0, processes / (cores or machine_cores()))
    compute = (split.total_s - split.apply_s) * oversold
    if record is not None and record.runtime_in_lockstep:  # runtime_overhead: a core per rank
        runtime_s *= oversold
    stated = stating(None, compute_s=compute,
                     optimizer_s=split.apply_s * oversold if split.apply_s else None)
    (row,) = simulate(topology, replicas, model, profile, stated, library="gloo",
        execution=Execution(ps=deployment), runtime_s=runtime_s,
        exchange_share=exchange_share / link_share if collective and exchange_share else 1.0,
        oneway_share=1.0 / link_share if collective else 1.0)
    return PredictedRow(row=row, topology=topology, model=model, framework=framework,
                        strategy=strategy, link_share=link_share if collective else 1.0,
                        exchange_share=exchange_share if collective and exchange_share
                        else None)


# Model-parallel strategies as the torch runners run them (harness/runners): gloo's ring for
# the tensor all-reduces (a rendezvous round trip per ring step, as for DDP) and its
# point-to-point sends between stages.
MODEL_PARALLEL_STRATEGIES = MODEL_PARALLEL


def predict_layout(workload: str, layout: Any, links: MeasuredLinks, batch: int,
                   one_replica_s: float, one_replica_batch: int, *, fits: pd.DataFrame,
                   cores: int | None = None, pass_overhead_s: float = 0.0) -> PredictedLayout:
    """The simulator's row for a pipeline / tensor-parallel run of ``workload`` on emulated
    hosts (one stage or tensor rank per host): compute from the run's one-replica step
    (``one_replica_s`` for ``one_replica_batch`` samples, the whole model on one process),
    shared among the hosts' processes by the machine's cores; the links as probed; gloo's
    per-message cost and round trips."""
    from harness.sim import simulate_layout
    from harness.sim.model.structure import layered

    # as harness/runners run it: the embeddings stay whole on every tensor rank (Megatron-LM
    # splits them by vocabulary, at one more all-reduce per micro-batch)
    model = layered(workload)
    model = dataclasses.replace(model, pre=tuple(dataclasses.replace(layer, tp_allreduces=0)
                                                 for layer in model.pre))
    alpha, _ = software_costs(fits, "torch")
    topology = emulated_topology(links, (alpha, 0.0), library("torch").trips("allreduce_ring"))
    compute = one_replica_s * model.batch_size / one_replica_batch
    row = simulate_layout(topology, model, layout, batch, None, step_compute_s=compute,
                          optimizer="sgd", cores=cores or machine_cores(),
                          pass_overhead_s=pass_overhead_s)
    return PredictedLayout(row=row, topology=topology)


def layout_of(row: dict[str, Any]) -> Any:
    """The model-parallel layout a run recorded (harness.core.layout's columns, else its
    `extra`); None if it recorded none."""
    from harness.core.layout import Layout

    return Layout.from_columns(row)


def local_runs(measured: pd.DataFrame, workload: str, framework: str, strategy: str
                ) -> list[tuple[dict[str, Any], Any]]:
    """(row, its run's one-replica row) of every ok local run of ``strategy`` on
    ``workload``: runs on one machine with no emulated links, whose time beyond the model
    is the runtime's own."""
    if measured.empty or "strategy" not in measured:
        return []
    family, _, size = workload.partition(":")
    ok = measured[(measured["status"] == "ok") & (measured["cluster"] == "local")
                  & (measured["workload"] == family) & (measured["size"] == size)
                  & (measured["framework"] == framework)]
    pairs = []
    for r in ok[ok["strategy"] == strategy].to_dict("records"):
        base = ok[(ok["run_id"] == r["run_id"]) & (ok["replicas"] == 1)]
        if not base.empty:
            pairs.append(({str(k): v for k, v in r.items()}, base.iloc[0]))
    return pairs


def loopback_links(fits: pd.DataFrame, framework: str, hosts: int) -> MeasuredLinks:
    """One machine's processes as links: the library's loopback rate, no wire latency."""
    beta = software_costs(fits, framework)[1]
    return MeasuredLinks(hosts, 1.0 / beta if beta > 0 else 10e9, 0.0, 0.0, source="loopback")


def pass_overhead(measured: pd.DataFrame, fits: pd.DataFrame, workload: str,
                  cores: int | None = None) -> float:
    """The pipeline runtime's own time per forward or backward pass, from loopback: what the
    local (one machine, no emulated links) pipeline runs of ``workload`` took beyond the
    model with none, per pass on their critical path (2 (M + S - 1)); 0 without such runs.
    The floor of a pipeline, as the loopback sweeps are the floor of a collective."""
    from statistics import median as _median

    samples = []
    for r, base in local_runs(measured, workload, "torch", "pipeline"):
        layout = layout_of(r)
        if layout is None:
            continue
        predicted = predict_layout(workload, layout, loopback_links(fits, "torch", layout.stages),
                                   int(r["global_batch"]), float(base["step_time_median_s"]),
                                   int(base["global_batch"]), fits=fits, cores=cores)
        passes = 2 * (layout.microbatches + layout.stages - 1)
        samples.append((float(r["step_time_median_s"]) - predicted.row.step_time_median_s)
                       / passes)
    return max(0.0, _median(samples)) if samples else 0.0


class RecordedShards(TypedDict, total=False):
    """What a parameter-server run's ``extra`` (results/schema.py) records of its shards,
    the part of it ``shard_bytes`` reads."""

    ps_shard_bytes: list[float]  # torch: bytes per server (harness/run/execute.py)
    # TF: each variable's pieces, (ps device, shape) (harness/runners/tf_ps.py)
    variable_shards: dict[str, list[tuple[str, list[int]]]]


def shard_bytes(extra: RecordedShards) -> list[float]:
    """Bytes per parameter-server shard as the run recorded them (torch: per server; TF:
    the variables' pieces per ps device); [] where it did not."""
    shards = [float(b) for b in extra.get("ps_shard_bytes", [])]
    if not shards and extra.get("variable_shards"):
        per_device: dict[str, float] = {}
        for pieces in extra["variable_shards"].values():
            for device, shape in pieces:
                per_device[device] = per_device.get(device, 0.0) + 4.0 * math.prod(shape)
        shards = [per_device[d] for d in sorted(per_device)]
    return shards


def runtime_overhead(measured: pd.DataFrame, fits: pd.DataFrame, framework: str,
                     strategy: str, facts: Any, cores: int | None = None) -> float:
    """A synchronous strategy's own time per step, from loopback: what the local runs of
    ``framework``'s ``strategy`` on ``facts``'s workload took beyond the model with no
    links; 0 without such runs. The comm sweeps time one collective of one tensor; a step
    also pays what no sweep times: the parameter servers' RPC (torch's TensorPipe, TF's gRPC
    variable reads) and Python bookkeeping, TF's per-step collective launches of many
    tensors and IndexedSlices. recsys:S's local torch PS step took 9.4 ms where its compute
    and bytes explain about 3, TF multi_worker_mirrored's 23 ms. 0 for a strategy whose
    steps do not wait for every worker (its runtime's time is not the step's)."""
    from statistics import median as _median

    record = find_strategy(framework, strategy)
    if record is None or not record.waits_every_step:
        return 0.0
    samples = []
    for r, base in local_runs(measured, facts.name, framework, strategy):
        workers = int(r["replicas"])
        ps = None
        if strategy == "parameter_server":
            shards = shard_bytes(r["extra"])
            if not shards:
                continue
            ps = PsLayout(shards, False)
        hosts = workers + (len(ps.shard_bytes) if ps else 0)
        profile = facts.at(batch=int(r["global_batch"]) // workers)
        predicted = predict_step(framework, strategy, profile,
                                 loopback_links(fits, framework, hosts), workers,
                                 worker_compute(base, framework, strategy), fits=fits,
                                 cores=cores, ps=ps)
        if predicted is not None and predicted.row.ok:
            own = float(r["step_time_median_s"]) - predicted.row.step_time_median_s
            if record.runtime_in_lockstep:  # per rank with a core each, as predict_step scales
                own /= max(1.0, hosts / (cores or machine_cores()))
            samples.append(own)
    return max(0.0, _median(samples)) if samples else 0.0
