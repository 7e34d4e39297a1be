"""One model-parallel training step (Megatron-LM's layout: data x pipeline x tensor).

Micro-batches run through a pipeline of stages (GPipe or 1F1B,
``harness/sim/schedules/pipeline.py``) whose passes include their tensor-parallel all-reduces
(blocking, two per transformer block each way; with ``tp_overlap`` only what outlasts the
chunk's compute), activations and gradients sent between stages, then each stage's data-parallel
gradient all-reduce as soon as its last backward ends (and the tied embedding's between first
and last stage). Apart from the data-parallel step: the two share only the result record.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from harness.sim.model.layered import (
    Layer,
    LayeredModel,
    Layout,
    check_layout,
    held_params,
    recompute_mode,
    recomputed,
    stage_layers,
)
from harness.sim.network.engine import CollectiveResult, run_collective
from harness.sim.network.topology import Hierarchy, Topology, n_devices
from harness.sim.schedules.collectives import (
    all_to_all,
    channel_orders,
    grouped_ring_allreduce,
    point_to_point,
)
from harness.sim.schedules.pipeline import PipelineTiming, run_pipeline, schedule_order
from harness.sim.schedules.schedule import parallel
from harness.sim.step.fsdp import UnitPass, exposed_s
from harness.sim.step.result import StepResult
from harness.sim.systems.calibration import (
    Calibration,
    compute_seconds,
    efficiency_source,
    stating,
)
from harness.sim.systems.compute import (
    ComputeSplit,
    DeviceRate,
    device_rate,
    layer_split,
    layers_split,
    optimizer_seconds,
)
from harness.sim.systems.device_model import gradient_copy_seconds
from harness.sim.systems.spec import SpecError
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.precision import FP32, Precision
from workloads.spec import WorkloadSpec


@functools.lru_cache(maxsize=8192)
def _timed(kind: str, groups: int, size: int, topology: Topology, nbytes: float,
           devices: tuple[int, ...], mode: str) -> CollectiveResult:
    """One placed collective, simulated once per process: the layouts a recommender weighs
    share most of their tensor-parallel groups and sends."""
    if kind == "allreduce":
        channels = [grouped_ring_allreduce(groups, size, order)
                    for order in _rail_channels(topology, groups, size, devices)]
        schedule = channels[0] if len(channels) == 1 else parallel(channels[0].name, *channels)
    else:
        schedule = all_to_all(size) if kind == "alltoall" else point_to_point(groups)
    return run_collective(schedule, topology, nbytes, mode=mode, devices=list(devices))


def _rail_channels(topology: Topology, groups: int, size: int, devices: Sequence[int]
                   ) -> list[np.ndarray | None]:
    """NCCL's one ring per NIC for groups that hold k > 1 devices on each of their hosts
    (a data-parallel group under TP < 8 on DGX-style hosts, one NIC per GPU): k channels,
    channel c entering each host at the group's c-th device there, so every NIC the group
    owns carries a ring (as harness/sim/strategies.rail_orders does for whole hosts). One
    plain ring anywhere else."""
    if not (isinstance(topology, Hierarchy) and topology.nic == "per_device" and size > 1):
        return [None]
    hosts = np.asarray(devices, dtype=np.int64).reshape(groups, size) // topology.per_host
    k = size // len(set(hosts[0].tolist()))
    if k < 2 or k == size or size % k:
        return [None]
    runs = hosts.reshape(groups, size // k, k)
    whole_runs = bool((runs == runs[:, :, :1]).all())
    distinct = all(len(set(row.tolist())) == size // k for row in runs[:, :, 0])
    if not (whole_runs and distinct):
        return [None]  # not equal runs of one host each, in ring order
    return [np.tile(order, (groups, 1)) for order in channel_orders(size // k, k)]


class _PlacedCollectives:
    """Collective times per (kind, groups, size, bytes, devices), and what a step spends on
    them counted as often as it runs them."""

    def __init__(self, topology: Topology, mode: str):
        self.topology, self.mode = topology, mode
        self.seen: set[tuple[object, ...]] = set()
        self.time_s = self.bytes_sent = 0.0
        self.count = self.events = 0
        # a step places the same device lists once per layer: renumbered once each, and
        # a list handed in again (a stage's, built once) found by identity, not rehashed
        self.canonical: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.placed: dict[tuple[str, int, int, int],
                          tuple[Sequence[int], int, tuple[int, ...]]] = {}

    def allreduce(self, groups: int, size: int, nbytes: float, devices: Sequence[int],
                  times: int = 1, share: float = 1.0) -> float:
        """``groups`` concurrent ring all-reduces of ``size`` ranks each; ``share`` 0.5: its
        reduce-scatter or its all-gather half (a ring all-reduce is the one, then the
        other: the same bytes in as many steps each)."""
        return self._time("allreduce", groups, size, nbytes, devices, times, share)

    def alltoall(self, size: int, nbytes: float, devices: Sequence[int], times: int = 1
                 ) -> float:
        """One all-to-all of ``size`` ranks, ``nbytes`` per rank (the other groups of the
        layout run theirs at once, on their own devices' links)."""
        return self._time("alltoall", 1, size, nbytes, devices, times)

    def send(self, pairs: int, nbytes: float, devices: Sequence[int], times: int = 1) -> float:
        """``pairs`` concurrent point-to-point sends (sources then destinations)."""
        return self._time("send", pairs, 2, nbytes, devices, times)

    def _time(self, kind: str, groups: int, size: int, nbytes: float,
              devices: Sequence[int], times: int, share: float = 1.0) -> float:
        handle = (kind, groups, size, id(devices))
        known = self.placed.get(handle)
        if known is not None and known[0] is devices:
            groups, canonical = known[1], known[2]
        else:
            given = devices
            groups, devices = _alone(self.topology, kind, groups, size, devices)
            placed = tuple(devices)
            found = self.canonical.get(placed)
            if found is None:
                found = self.canonical[placed] = _canonical(self.topology, placed)
            canonical = found
            self.placed[handle] = (given, groups, canonical)
        key = (kind, groups, size, self.topology, float(nbytes), canonical, self.mode)
        result = _timed(*key)
        if key not in self.seen:
            self.seen.add(key)
            self.events += result.events
        self.time_s += result.time_s * share * times
        self.bytes_sent += result.bytes_sent * share * times
        self.count += times
        return result.time_s * share


def _alone(topology: Topology, kind: str, groups: int, size: int, devices: Sequence[int]
           ) -> tuple[int, Sequence[int]]:
    """All-reduce groups that each sit inside one host of per-device switch ports share no
    link: one of them takes as long as all, so one is simulated."""
    if (kind == "allreduce" and groups > 1 and isinstance(topology, Hierarchy)
            and topology.per_host % size == 0
            and all(devices[g * size] % size == 0
                    and devices[g * size + size - 1] == devices[g * size] + size - 1
                    for g in range(groups))):
        return 1, devices[:size]
    return groups, devices


def _canonical(topology: Topology, devices: Sequence[int]) -> tuple[int, ...]:
    """The devices with their hosts renumbered in order of appearance: on hosts all alike
    under one switch, a collective takes as long wherever it is placed, so placements that
    differ only by which hosts share one simulation."""
    if not (isinstance(topology, Hierarchy) and not topology.hosts_per_leaf
            and not topology.leaf_hosts
            and not topology.slow and not topology.servers):
        return tuple(devices)
    per_host = topology.per_host
    if len(devices) < 64:  # short lists: plain Python is quicker than numpy's setup
        hosts: dict[int, int] = {}
        out = []
        for d in devices:
            host, local = divmod(d, per_host)
            out.append(hosts.setdefault(host, len(hosts)) * per_host + local)
        return tuple(out)
    host_of, local_of = np.divmod(np.asarray(devices, dtype=np.int64), per_host)
    _, first, inverse = np.unique(host_of, return_index=True, return_inverse=True)
    renumbered = np.empty_like(first)
    renumbered[np.argsort(first)] = np.arange(len(first))  # by first appearance
    return tuple((renumbered[inverse.reshape(-1)] * per_host + local_of).tolist())


def model_parallel_step(topology: Topology, model: LayeredModel, layout: Layout,
                        global_batch: int, calibration: Calibration | None = None, *,
                        step_compute_s: float | None = None, optimizer_s: float = 0.0,
                        recompute: str | bool = False, mode: str = "fast",
                        cores: float | None = None, pass_overhead_s: float = 0.0,
                        precision: Precision | None = None, optimizer_slots: int = 2,
                        execution: Execution = DEFAULT_EXECUTION) -> StepResult:
    """One step of ``layout`` (data x pipeline x tensor) training ``model`` on ``global_batch``
    samples. Compute, in order of precedence: ``step_compute_s`` (forward + backward of the
    whole model on one device for its ``model.batch_size`` samples, measured), shared among
    layers by their FLOPs; else each layer timed on the calibration's device
    (``harness/sim/systems/compute.py``: matmuls at the precision's peak, element-wise work at
    memory bandwidth, the optimizer's update); else FLOPs over the calibration's device speed.

    Symmetry keeps it fast: every data-parallel replica runs the same pipeline, and every
    tensor rank of a stage the same passes, so one pipeline is scheduled; the collectives are
    simulated with all their concurrent groups, so shared hosts and links count.
    ``cores``: where all devices are processes of one thread on a machine with this many
    cores (emulated hosts), the computing ones share them (harness/sim/schedules/pipeline.py).
    ``pass_overhead_s``: a runtime's own work per forward or backward pass of a micro-batch
    (scheduling, messages, small-batch kernels), measured on loopback where it matters.
    ``execution``: under whose defaults the device computes (the framework's, attention
    fused or not); ``precision`` is what it computes in.
    """
    started = time.perf_counter()
    check_layout(model, layout, global_batch)
    if layout.devices > n_devices(topology):
        raise SpecError(f"layout {layout.describe()} needs {layout.devices} devices; the "
                        f"topology has {n_devices(topology)}")
    how = recompute_mode(recompute)
    if layout.ep_overlap and layout.expert > 1 and how == "full":
        raise SpecError("the all-to-all overlap (Megatron-Core's combined 1F1B) does not run "
                        "with full recomputation: recompute selectively or not at all")
    D, P, T, M, V = layout.data, layout.stages, layout.tensor, layout.microbatches, layout.virtual
    C = layout.context
    micro = global_batch // (D * M)
    rate = _device_rate(calibration, execution, step_compute_s, precision)
    stages = stage_layers(model, P * V, layout.stage_blocks)
    again = recomputed(model, how)
    splits, source = chunk_compute(model, layout, global_batch, calibration,
                                   step_compute_s=step_compute_s, recompute=how,
                                   precision=precision, execution=execution)
    forward = [c.forward_s + pass_overhead_s for c in splits]
    backward = [c.backward_s + c.recompute_s + pass_overhead_s for c in splits]
    if layout.grad_accumulation == "fp32_copy" and rate is not None and precision is not None:
        for q, layers in enumerate(stages):  # each backward adds its gradients to the copy
            backward[q] += gradient_copy_seconds(
                sum(held_params(layer, layout.expert) for layer in layers) / T, precision,
                rate)
    colls = _PlacedCollectives(topology, mode)
    on = _StagePlacement(layout)
    exchanges = [_chunk_exchange(layout, colls, layers, q, splits[q], on, micro, rate, again)
                 for q, layers in enumerate(stages)]
    sends = _stage_sends(layout, colls, stages, on, micro)
    timing = run_pipeline(schedule_order(layout.schedule, P, M, V), forward, backward,
                          [t for t, _ in sends], [b for _, b in sends],
                          cores / (D * T * C) if cores is not None else None,
                          [f for f, _ in exchanges], [b for _, b in exchanges],
                          blocking=layout.p2p == "blocking", keep_spans=False)
    ends, optimizer_each = [], []
    for s in range(P):
        end, update = _stage_end(s, model, layout, colls, stages, forward, backward, timing,
                                 rate, precision, optimizer_s, optimizer_slots)
        optimizer_each.append(update)
        ends.append(end + update)
    step_time = max(ends)
    slowest = max(timing.busy_s)
    update = max(optimizer_each)
    notes = (f"{layout.describe()}: {micro} sample{'s' if micro != 1 else ''} per "
             f"micro-batch, bubble {timing.bubble:.1%}"
             + ("" if how == "none" else f", {how} recomputation")
             + ("" if precision in (None, FP32) else f", {precision.name} mixed precision"))
    return StepResult(
        strategy=layout_name(layout), workers=layout.devices, step_time_s=step_time,
        compute_s=slowest, optimizer_s=update, comm_s=colls.time_s,
        exposed_comm_s=max(0.0, step_time - slowest - update),
        bytes_per_step=colls.bytes_sent, throughput_samples_s=global_batch / step_time,
        collectives=colls.count, events=colls.events, mode=mode,
        wall_s=time.perf_counter() - started, compute_source=source,
        layout=layout.describe(), bubble=timing.bubble, notes=(notes,))


class _StagePlacement:
    """A stage's devices, data then context then tensor: a chunk's, whichever chunk of that
    stage (built once: V chunks per stage share them)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.placed: dict[int, list[int]] = {}

    def __call__(self, stage: int) -> list[int]:
        if stage not in self.placed:
            self.placed[stage] = list(self.layout.ranks(stage, "dct"))
        return self.placed[stage]


def _chunk_exchange(layout: Layout, colls: _PlacedCollectives, layers: Sequence[Layer],
                    q: int, split: ComputeSplit, on: _StagePlacement, micro: int,
                    rate: DeviceRate | None, again: Callable[[Layer], str]
                    ) -> tuple[float, float]:
    """A chunk's own exchanges in each pass, per micro-batch: its tensor-parallel
    all-reduces, context parallelism's K/V and expert parallelism's all-to-alls, each less
    what its overlap hides."""
    D, P, T, M, C = layout.data, layout.stages, layout.tensor, layout.microbatches, \
        layout.context
    fwd_comm = bwd_comm = 0.0
    if T > 1:
        devices = on(q % P)
        for layer in layers:
            if layer.tp_allreduces:
                full = again(layer) == "full"
                runs = layer.tp_allreduces * M * (3 if full else 2)
                ar = colls.allreduce(D * C, T, layer.output_bytes_per_sample * micro / C,
                                     devices, runs)
                fwd_comm += layer.tp_allreduces * ar
                bwd_comm += layer.tp_allreduces * ar * (2 if full else 1)
        if layout.tp_overlap:  # only what outlasts the chunk's own compute shows
            fwd_comm = max(0.0, fwd_comm - split.forward_s)
            bwd_comm = max(0.0, bwd_comm - split.backward_s - split.recompute_s)
    if C > 1:
        fwd, bwd = _context_exchange(layout, colls, layers, q % P, micro, rate, again)
        fwd_comm += fwd
        bwd_comm += bwd
    if layout.expert > 1:
        fwd, bwd = _expert_exchange(layout, colls, layers, q % P, micro, again)
        if layout.ep_overlap:  # Megatron-Core's combined 1F1B: one micro-batch's
            # dispatch and combine run under the adjacent one's backward (forward's
            # all-to-alls) or forward (backward's); only what outlasts it shows
            fwd = max(0.0, fwd - split.backward_s - split.recompute_s)
            bwd = max(0.0, bwd - split.forward_s)
        fwd_comm += fwd
        bwd_comm += bwd
    return fwd_comm, bwd_comm


def _stage_sends(layout: Layout, colls: _PlacedCollectives, stages: Sequence[Sequence[Layer]],
                 on: _StagePlacement, micro: int) -> list[tuple[float, float]]:
    """Each chunk's activations to the next and their gradients back, per micro-batch."""
    D, P, T, M, C = layout.data, layout.stages, layout.tensor, layout.microbatches, \
        layout.context
    sends = []
    for q in range(len(stages) - 1):
        nbytes = stages[q][-1].output_bytes_per_sample * micro / T / C
        src, dst = on(q % P), on((q + 1) % P)
        there = colls.send(D * T * C, nbytes, src + dst, M)
        back = colls.send(D * T * C, nbytes, dst + src, M)
        sends.append((there, back))
    return sends


def _stage_end(s: int, model: LayeredModel, layout: Layout, colls: _PlacedCollectives,
               stages: Sequence[Sequence[Layer]], forward: list[float], backward: list[float],
               timing: PipelineTiming, rate: DeviceRate | None, precision: Precision | None,
               optimizer_s: float, optimizer_slots: int) -> tuple[float, float]:
    """When stage ``s``'s step ends before its update (its gradients reduced over data x
    context as its stack overlaps them, the tied embedding's), and its update's time."""
    D, P, T, C = layout.data, layout.stages, layout.tensor, layout.context
    copies_fp32 = layout.grad_accumulation == "fp32_copy"
    mine = range(s, len(stages), P)  # the device's chunks
    params = sum(held_params(layer, layout.expert) for q in mine for layer in stages[q])
    experts = (sum(layer.expert_params for q in mine for layer in stages[q])
               / layout.expert if layout.expert > 1 else 0.0)
    blocks = max(1, sum(len(stages[q]) for q in mine))
    last = timing.last_pass_s[s]
    end = timing.ends_s[s]
    if D * C > 1:  # gradients reduce over data x context: every rank saw other tokens
        grad_bytes = FP32.value_bytes if copies_fp32 else model.bytes_per_element
        reduce_s = (0.0 if layout.zero == 3 else
                    _gradient_reduce(colls, layout, s, (params - experts) * grad_bytes / T,
                                     experts * grad_bytes / T, 1))
        if layout.zero == 3:  # every micro-batch gathers and reduce-scatters each unit
            end += _sharded_exposed(colls, layout, s,
                                    [(stages[q], forward[q], backward[q]) for q in mine],
                                    model.bytes_per_element, grad_bytes)
        elif layout.grad_reduce == "after_backward":  # Megatron-LM 2021's local DDP
            end += reduce_s
        elif layout.zero == 1 and layout.param_gather_overlap:
            # the reduce-scatter half ends this step; the all-gather half runs under the
            # next step's first forward, and shows only where it outlasts that
            first_forward = sum(forward[q] for q in mine)
            end = (overlapped_end(last[0], end, reduce_s / 2, blocks)
                   + max(0.0, reduce_s / 2 - first_forward))
        else:  # buckets reduce as the last backward frees them (Megatron, DDP)
            end = overlapped_end(last[0], end, reduce_s, blocks)
    if P > 1 and model.tied_head_params and s in (0, P - 1):
        pair = [layout.device(d, r, t, c) for d in range(D) for c in range(C)
                for t in range(T) for r in (0, P - 1)]
        end += colls.allreduce(D * T * C, 2, model.tied_head_params * model.bytes_per_element
                               / T, pair, 1 if s == 0 else 0)
    shards = D * C if layout.zero else 1
    if rate is not None:
        update = optimizer_seconds(params / T / shards, precision or FP32,
                                   optimizer_slots, rate)
    else:
        update = optimizer_s * params / model.params / T / shards
    return end, update


def chunk_compute(model: LayeredModel, layout: Layout, global_batch: int,
                  calibration: Calibration | None = None, *,
                  step_compute_s: float | None = None, recompute: str | bool = False,
                  precision: Precision | None = None,
                  execution: Execution = DEFAULT_EXECUTION) -> tuple[list[ComputeSplit], str]:
    """Each pipeline chunk's compute for one micro-batch on one of its ranks, and where the
    figures came from: what ``model_parallel_step`` schedules, and what bounds it below."""
    how = recompute_mode(recompute)
    T, C = layout.tensor, layout.context
    micro = global_batch // (layout.data * layout.microbatches)
    rate = _device_rate(calibration, execution, step_compute_s, precision)
    stages = stage_layers(model, layout.stages * layout.virtual, layout.stage_blocks)
    if rate is not None:
        again = recomputed(model, how)
        splits = [layers_split(layers, rate, micro, T, layout.sequence_parallel, again,
                               layout.expert) for layers in stages]
        source = (f"{rate.device.name} at {rate.gemm_peak(False)[1]:.1%} of its "
                  f"{rate.precision or 'training'} peak ({rate.source})")
    else:
        splits, source = _shared_splits(model, stages, micro, T, how, calibration,
                                        execution, step_compute_s)
    if C > 1:  # each context rank computes 1/C of the sequence (causal load balanced)
        splits = [ComputeSplit(c.forward_s / C, c.backward_s / C, c.recompute_s / C)
                  for c in splits]
    return splits, source


def step_lower_bound(model: LayeredModel, layout: Layout, global_batch: int,
                     calibration: Calibration | None = None, *,
                     step_compute_s: float | None = None, recompute: str | bool = False,
                     precision: Precision | None = None,
                     execution: Execution = DEFAULT_EXECUTION) -> float:
    """No step of ``layout`` is shorter than this, computed without scheduling it: device s
    can start nothing before the first micro-batch's forward has crossed the chunks before
    its first (chunk s), it must then run all its chunks' passes for every micro-batch, and
    each of them ends before the last chunk-s backward, which the backward of the chunks
    before s must still follow. So the step is at least the largest, over devices, of
    (chunks before s, forward and backward) + M x (its chunks, forward and backward): with
    equal stages, (M + S - 1) passes, 1F1B's bubble. ``model_parallel_step`` adds the
    transfers, the exposed collectives and the update to that, never takes from it. Cheap:
    the recommender skips simulating a layout this already shows slower than one it has."""
    splits, _ = chunk_compute(model, layout, global_batch, calibration,
                              step_compute_s=step_compute_s, recompute=recompute,
                              precision=precision, execution=execution)
    passes = [c.forward_s + c.backward_s + c.recompute_s for c in splits]
    P = layout.stages
    return max(sum(passes[:s]) + layout.microbatches * sum(passes[s::P]) for s in range(P))


def _gradient_reduce(colls: _PlacedCollectives, layout: Layout, stage: int,
                     dense_bytes: float, expert_bytes: float, times: int,
                     share: float = 1.0) -> float:
    """A stage's gradients all-reduced over data x context (every replica saw other
    tokens), a rank's routed experts only among the ranks that hold the same experts:
    Megatron-Core's expert-data-parallel group, the data ranks d with d mod EP alike (EP
    groups are adjacent data ranks, ``_expert_exchange``), D / EP of them x context. Summed
    over every data rank, the experts' gradients would add different experts together."""
    D, T, C, EP = layout.data, layout.tensor, layout.context, layout.expert
    groups = layout.ranks(stage, "tdc")
    took = colls.allreduce(T, D * C, dense_bytes, groups, times, share)
    if expert_bytes > 0 and D * C // EP > 1:
        peers = [layout.device(d, stage, t, c) for t in range(T) for e in range(EP)
                 for d in range(e, D, EP) for c in range(C)]
        took += colls.allreduce(T * EP, D * C // EP, expert_bytes, peers, times, share)
    return took


def _sharded_exposed(colls: _PlacedCollectives, layout: Layout, stage: int,
                     chunks: Sequence[tuple[Sequence[Layer], float, float]],
                     param_bytes: float, grad_bytes: float) -> float:
    """What FSDP over data x context (``zero=3``) adds to a device's passes: each of its
    layers one unit (torchtitan wraps each block, the embedding, and the norm with the
    head) on FSDP's one timeline (``harness/sim/fsdp``), its chunks' (layers, forward s,
    backward s) one micro-batch in a row, a unit's compute its share of its chunk's FLOPs.
    Parameters are gathered in the precision they compute in and gradients reduce-scattered
    in ``grad_bytes``, each half of a ring all-reduce over the data x context ranks (the
    routed experts' over their expert-data-parallel group). Between pipeline stages the
    device's bubbles could hide more: beyond one stage this is an upper bound."""
    T, M, EP = layout.tensor, layout.microbatches, layout.expert
    known: dict[tuple[float, float], UnitPass] = {}
    units = []
    for layers, forward_s, backward_s in chunks:
        flops = sum(layer.flops_per_sample for layer in layers)
        for layer in layers:
            routed = layer.expert_params / EP if EP > 1 else 0.0
            dense = held_params(layer, EP) - routed
            collectives = known.get((dense, routed))
            if collectives is None:
                collectives = known[(dense, routed)] = UnitPass(
                    0.0, 0.0,
                    _gradient_reduce(colls, layout, stage, dense * param_bytes / T,
                                     routed * param_bytes / T, 2 * M, share=0.5),
                    _gradient_reduce(colls, layout, stage, dense * grad_bytes / T,
                                     routed * grad_bytes / T, M, share=0.5))
            part = layer.flops_per_sample / flops if flops else 1 / len(layers)
            units.append(replace(collectives, forward_s=forward_s * part,
                                 backward_s=backward_s * part))
    return exposed_s(units, M)


def _expert_exchange(layout: Layout, colls: _PlacedCollectives, layers: Sequence[Layer],
                     stage: int, micro: int, again: Callable[[Layer], str]
                     ) -> tuple[float, float]:
    """One chunk's expert-parallel all-to-alls, forward and backward, exposed whole: each
    MoE layer dispatches its token rows to the ranks holding their experts and combines
    them back (two all-to-alls forward, two backward, two more when recomputed), over the
    EP ranks of one data-parallel group (Megatron's order: adjacent data ranks), on their
    real placement. A rank's rows go to every rank alike, the busiest receiving
    ``expert_load`` x its share (1: balanced routing): the all-to-all waits for it."""
    EP, T = layout.expert, layout.tensor
    group = [layout.device(d, stage, 0) for d in range(EP)]
    fwd = bwd = 0.0
    for layer in layers:
        if not layer.routed_bytes_per_sample:
            continue
        rows = layer.routed_bytes_per_sample * layer.expert_load * micro / T / layout.context
        one = colls.alltoall(EP, rows, group, 4 * layout.microbatches)
        full = again(layer) == "full"
        fwd += 2 * one
        bwd += 2 * one + (2 * one if full else 0.0)
    return fwd, bwd


def _context_exchange(layout: Layout, colls: _PlacedCollectives, layers: Sequence[Layer],
                      stage: int, micro: int, rate: DeviceRate | None,
                      again: Callable[[Layer], str]) -> tuple[float, float]:
    """The exposed time of one chunk's context-parallel K/V exchange, forward and backward.

    ring (Megatron-Core's p2p, ring attention): C - 1 steps, each sending a K/V block of
    S/C tokens to the next rank while the attention of the block in hand runs (a 1/C^2
    share of the sequence's attention on each rank); what a step's send takes beyond that
    attention is exposed. Backward sends K/V and their gradients: twice the bytes against
    twice the attention. all_gather (Llama 3's): K/V gathered before the attention, their
    gradients reduce-scattered after it, nothing overlapped; each costs half an all-reduce
    of the whole K/V (a ring moves (C-1)/C of it either way)."""
    D, T, C = layout.data, layout.tensor, layout.context
    fwd = bwd = 0.0
    ranks = layout.ranks(stage, "dtc")
    # each rank and the next of its ring: one list for every layer (placed once)
    pairs = ranks + layout.ranks(stage, "dtc", next_context=True)
    for layer in layers:
        if not layer.kv_bytes_per_sample:
            continue
        kv = layer.kv_bytes_per_sample * micro / T  # the rank's heads, the whole sequence
        if layout.context_comm == "all_gather":
            gather = colls.allreduce(D * T, C, kv, ranks, layout.microbatches) / 2
            fwd += gather
            bwd += gather * (2 if again(layer) == "full" else 1)
            continue
        step = colls.send(D * T * C, kv / C, pairs, 3 * (C - 1) * layout.microbatches)
        attention = (layer_split(layer, rate, micro, T, layout.sequence_parallel,
                                 "selective").recompute_s if rate is not None
                     else 0.0) / (C * C)
        fwd += (C - 1) * max(0.0, step - attention)
        bwd += (C - 1) * max(0.0, 2 * step - 2 * attention)
    return fwd, bwd


def overlapped_end(last_backward_start: float, backward_end: float, reduce_s: float,
                   buckets: int) -> float:
    """When a gradient reduction bucketed over ``buckets`` equal layers ends, started bucket
    by bucket as the last backward frees them (Megatron-LM's overlap_grad_reduce, DDP's
    buckets): the first bucket is ready 1/buckets into that backward; the reduction then
    runs at the link's pace, but the last bucket cannot leave before the backward ends."""
    window = backward_end - last_backward_start
    return max(backward_end + reduce_s / buckets,
               last_backward_start + window / buckets + reduce_s)


def _device_rate(calibration: Calibration | None, execution: Execution,
                 step_compute_s: float | None, precision: Precision | None
                 ) -> DeviceRate | None:
    """The device to time layers on: only where no measured time says otherwise."""
    if (step_compute_s is not None or calibration is None or calibration.device is None
            or calibration.compute_s_per_step is not None):
        return None
    return device_rate(calibration.device, precision, calibration.efficiency,
                       efficiency_source(calibration), execution.framework,
                       execution.fused_attention)


def _shared_splits(model: LayeredModel, stages: list[tuple[Layer, ...]], micro: int,
                   tensor: int, how: str, calibration: Calibration | None,
                   execution: Execution, step_compute_s: float | None
                   ) -> tuple[list[ComputeSplit], str]:
    """A whole step's compute (measured, or FLOPs over a device speed) shared by FLOPs."""
    scale = micro / model.batch_size
    profile = WorkloadSpec(params=model.params, batch_size=micro,
                           flops_per_sample=model.flops_per_sample)
    whole, source = compute_seconds(profile, stating(
        calibration, step_compute_s * scale if step_compute_s is not None else None),
        execution)  # one micro-batch
    of = recomputed(model, how)
    out = []
    for layers in stages:
        flops = sum(layer.flops_per_sample for layer in layers)
        f = whole * flops / model.flops_per_sample / tensor
        repeated = sum(layer.flops_per_sample for layer in layers if of(layer) == "full")
        again = whole * repeated / model.flops_per_sample / tensor / 3
        if how == "selective":
            attention = sum(layer.attention_flops_per_sample for layer in layers)
            again = whole * attention / model.flops_per_sample / tensor
        out.append(ComputeSplit(f / 3, 2 * f / 3, again))
    return out, source
def layout_name(layout: Layout) -> str:
    """The simulator's name of a layout's kind of split (data+pipeline+tensor, ...)."""
    parallel = [name for name, degree in (("data", layout.data), ("pipeline", layout.stages),
                                          ("tensor", layout.tensor),
                                          ("context", layout.context),
                                          ("expert", layout.expert)) if degree > 1]
    if not parallel:
        return "single_device"
    if parallel in (["pipeline"], ["tensor"]):
        return "pipeline" if parallel == ["pipeline"] else "tensor_parallel"
    return "+".join(parallel)
