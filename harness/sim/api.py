"""What the CLI calls: a topology spec, workers, strategies and a workload in; result rows out.

Rows have the results schema's shape (``source='simulated'``, ``framework='sim'``), one per
strategy; a strategy the topology cannot run (e.g. dedicated servers on a torus) ends as an
``unavailable`` row with the reason, never as a missing row. Bad input (an unparsable spec,
an unknown strategy, more workers than devices) raises SpecError, which the CLI turns into
one line and exit code 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from harness.core.errors import SpecError
from harness.sim.model.layered import LayeredModel, Layout, recompute_mode
from harness.sim.model.memory import (
    kept_activations,
    model_parallel_memory,
    optimizer_slots,
    replica_memory,
)
from harness.sim.network.engine import MODES, run_collective
from harness.sim.network.topology import Hierarchy, Topology, TopologyError, n_devices, with_servers
from harness.sim.rows import UNAVAILABLE, LayoutRow, SimulatedCollective, SimulatedRow
from harness.sim.schedules.closed_forms import busbw
from harness.sim.schedules.collectives import (
    all_to_all,
    binomial_broadcast,
    ring_all_gather,
    ring_reduce_scatter,
    tree_broadcast,
)
from harness.sim.schedules.ps import central_storage, ps_sync
from harness.sim.schedules.schedule import Schedule
from harness.sim.step.data_parallel import simulate_step
from harness.sim.step.model_parallel import model_parallel_step, step_lower_bound
from harness.sim.step.result import StepResult
from harness.sim.step.strategies import (
    ALLREDUCE,
    allreduce_schedule,
    channel_rings,
    expand_strategies,
)
from harness.sim.systems import calibration as cal
from harness.sim.systems.spec import parse_topology
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.precision import FP32, Precision
from workloads.spec import WorkloadSpec

NAN = float("nan")


def _setup(topology_spec: str, workers: int, calibration: cal.Calibration | None
           ) -> tuple[Topology, cal.Calibration]:
    topo = parse_topology(topology_spec)
    kind, _, rest = topology_spec.strip().partition(":")
    base = (cal.from_preset(rest.partition(",")[0].strip()) if kind == "preset"
            else cal.from_topology(topo))
    calibration = base if calibration is None else cal.merge(base, calibration)
    topo = cal.apply(topo, calibration)
    if not isinstance(workers, int) or not 1 <= workers <= n_devices(topo):
        raise SpecError(f"workers={workers} must be from 1 to the {n_devices(topo)} devices "
                        f"of {topology_spec!r}")
    return topo, calibration


def simulate(topology_spec: str, workers: int, strategy: str | Sequence[str] = "all",
             profile: WorkloadSpec | None = None,
             calibration: cal.Calibration | None = None, *, workload: str | None = None,
             stragglers: int = 0, straggler_factor: float = 1.0, mode: str = "fast",
             execution: Execution = DEFAULT_EXECUTION, library: str = "nccl",
             runtime_s: float = 0.0, exchange_share: float = 1.0,
             oneway_share: float = 1.0) -> list[SimulatedRow]:
    """Simulate one training step of each strategy; one results row per strategy.

    ``strategy``: 'all', a simulator name (allreduce_ring, allreduce_tree,
    allreduce_halving_doubling, allreduce_hierarchical, fsdp, parameter_server,
    parameter_server_async, central_storage), a framework's name (ddp, mirrored,
    multi_worker_mirrored, fsdp, 'tf:parameter_server', ...), or a list of those.
    ``calibration``: link and compute costs (e.g. measured ones, or the compute and update
    times a profile states: ``calibration.stating``); whatever it leaves out comes
    from the preset (``preset:NAME``: links, device speed, price) or the spec's own bandwidths
    and latencies. ``library``: nccl (GPUs) or gloo (CPUs, emulated hosts): whose collectives
    the strategies run. ``execution``: how it runs beside the calibration's fits (the
    compute's precision and framework defaults; the parameter servers' shards, placement,
    and what a worker pulls back: "changed" rows or "whole" variables, as TF's
    ParameterServerStrategy). ``runtime_s``: the framework
    runtime's own time per synchronous step, where it was measured (harness/predict/step.py).
    ``exchange_share``: how much of the links an all-to-all reaches against the other
    collectives (embedding sharding's exchange; harness/calibrate/link_share.py), and
    ``oneway_share`` what traffic one way reaches against them (the probed rate, where the
    links carry a library's share of it).
    """
    if profile is None:
        raise SpecError("simulate needs a workload profile (e.g. params=25M,batch=32,"
                        "step_compute=100ms)")
    if mode not in MODES:
        raise SpecError(f"unknown simulation mode {mode!r} (choose from {', '.join(MODES)})")
    topo, calib = _setup(topology_spec, workers, calibration)
    pairs = expand_strategies(strategy)
    calib = cal.with_device_update(profile, calib, execution)
    single = cal.compute_seconds(profile, calib, execution)[0] + cal.optimizer_seconds(calib)
    rows = []
    stem, size = profile.row_names()
    for requested, sim in pairs:
        named = _identity(sim, requested, workload or stem, size, topology_spec, workers,
                          calib)
        try:
            result = simulate_step(sim, topo, workers, profile, calib, stragglers=stragglers,
                                   straggler_factor=straggler_factor, mode=mode,
                                   execution=execution, library=library,
                                   runtime_s=runtime_s,
                                   exchange_share=exchange_share,
                                   oneway_share=oneway_share)
        except TopologyError as exc:
            row = SimulatedRow(**named, status=UNAVAILABLE, reason=str(exc))
        else:
            row = SimulatedRow(**named, **_outcome(result, single, profile.batch_size, calib))
        rows.append(_replica_memory(profile, calib, execution, sim, workers,
                                    workload, row))
    return rows


def _identity(strategy: str, requested: str, workload: str, size: str, cluster: str,
              replicas: int, calib: cal.Calibration) -> _Identity:
    """The columns that name a simulated row, and the calibration's price and sources."""
    price = calib.price_per_device_hour
    return {"strategy": strategy, "requested_strategy": requested, "workload": workload,
            "size": size, "cluster": cluster, "replicas": replicas,
            "case_id": f"sim/{strategy}/{workload}/{cluster}/{replicas}",
            "price_per_device_hour": NAN if price is None else price,
            "calibration_sources": ",".join(f"{k}={v}" for k, v in
                                            sorted(calib.sources().items()))}


class _Identity(TypedDict):
    """``SimulatedRow``'s identity fields, as keywords."""

    strategy: str
    requested_strategy: str
    workload: str
    size: str
    cluster: str
    replicas: int
    case_id: str
    price_per_device_hour: float
    calibration_sources: str


def _replica_memory(profile: WorkloadSpec, calib: cal.Calibration, execution: Execution,
                    strategy: str,
                    workers: int, workload: str | None, row: SimulatedRow) -> SimulatedRow:
    """A data-parallel strategy's memory on a described device, and ``does not fit`` where
    it needs more than the device has: what the recommender judges its candidates by
    (``sim.memory.replica_memory``, activations by ``kept_activations``); the row as it is
    where no device is described."""
    if calib.device is None:
        return row
    per_sample = activations_on_device(profile, calib, workload or profile.row_names()[0],
                                       checkpointed=execution.recomputed, execution=execution)
    kept = replace(profile, activation_bytes_per_sample=per_sample)
    memory = replica_memory(kept, "sim", strategy, workers, optimizer_slots(profile.optimizer))
    fit = memory_fit(memory.total, calib)
    row = replace(row, memory_per_device_bytes=memory.total,
                  memory_activations_bytes=memory.activations,
                  memory_reserved_bytes=fit.reserved, device_memory_bytes=fit.capacity)
    if not fit.fits and row.ok:
        row = replace(row, status="does not fit", reason=fit.reason)
    return row


def simulate_layout(topology_spec: str, model: LayeredModel, layout: Layout,
                    global_batch: int | None = None,
                    calibration: cal.Calibration | None = None, *,
                    step_compute_s: float | None = None, optimizer: str = "adam",
                    recompute: str | bool = False, mode: str = "fast",
                    cores: float | None = None, pass_overhead_s: float = 0.0,
                    precision: Precision | None = None,
                    execution: Execution = DEFAULT_EXECUTION) -> LayoutRow:
    """One step of a data x pipeline x tensor layout as a row (with the memory the
    fullest device needs). ``global_batch`` defaults to the model's batch per replica times
    the data-parallel degree, cut into ``layout.microbatches`` micro-batches per pipeline.
    ``cores``: devices are one-thread processes sharing this many cores (emulated hosts).
    ``precision``: the model's bytes must already be at it (``structure.layered``); here it
    sets the optimizer's state and the device's peak (None: fp32 bytes at the device's
    training peak, as a system's single FLOPS figure always read); ``execution`` under whose
    defaults it computes (attention fused or not)."""
    if mode not in MODES:
        raise SpecError(f"unknown simulation mode {mode!r} (choose from {', '.join(MODES)})")
    topo, calib = _setup(topology_spec, layout.devices, calibration)
    batch = global_batch if global_batch is not None else model.batch_size * layout.data
    slots = optimizer_slots(optimizer)
    result = model_parallel_step(topo, model, layout, batch, calib,
                                 step_compute_s=step_compute_s, recompute=recompute, mode=mode,
                                 cores=cores, pass_overhead_s=pass_overhead_s,
                                 precision=precision, optimizer_slots=slots,
                                 execution=execution)
    micro = batch // (layout.data * layout.microbatches)
    single = _one_device_s(model, micro, calib, step_compute_s, precision)
    fused = fuses_attention(execution)
    memory = model_parallel_memory(model, layout, micro, optimizer, recompute,
                                   precision or FP32, fused_attention=fused)
    fit = memory_fit(memory.total, calib)
    row = LayoutRow(
        **_identity(result.strategy, result.strategy, model.name, "", topology_spec,
                    layout.devices, calib),
        **_outcome(result, single, micro, calib),
        layout=layout, global_batch=batch, bubble_fraction=result.bubble,
        memory_per_device_bytes=memory.total, memory_activations_bytes=memory.activations,
        memory_recompute_bytes=memory.recompute_working, memory_reserved_bytes=fit.reserved,
        device_memory_bytes=fit.capacity, attention="fused" if fused else "unfused",
        recompute=recompute_mode(recompute), precision=precision.name if precision else "fp32")
    return row if fit.fits else replace(row, status="does not fit", reason=fit.reason)


def layout_step_bound(topology_spec: str, model: LayeredModel, layout: Layout,
                      global_batch: int | None = None,
                      calibration: cal.Calibration | None = None, *,
                      step_compute_s: float | None = None, recompute: str | bool = False,
                      precision: Precision | None = None,
                      execution: Execution = DEFAULT_EXECUTION) -> float:
    """What ``simulate_layout`` with the same arguments cannot answer below
    (``model_parallel.step_lower_bound``), without scheduling the pipeline."""
    _, calib = _setup(topology_spec, layout.devices, calibration)
    batch = global_batch if global_batch is not None else model.batch_size * layout.data
    return step_lower_bound(model, layout, batch, calib, step_compute_s=step_compute_s,
                            recompute=recompute, precision=precision, execution=execution)


@dataclass(frozen=True)
class MemoryFit:
    """Whether ``needed`` bytes (plus the runtime's reserve) fit the device."""

    needed: float
    reserved: float
    capacity: float  # NaN: the device states none

    @property
    def fits(self) -> bool:
        return not (math.isfinite(self.capacity) and self.needed + self.reserved > self.capacity)

    @property
    def reason(self) -> str:
        from harness.core.units import format_bytes

        if self.fits:
            return ""
        return (f"does not fit: needs {format_bytes(self.needed + self.reserved)} of "
                f"{format_bytes(self.capacity)} per device ({format_bytes(self.needed)} of "
                f"model state and activations, {format_bytes(self.reserved)} the runtime "
                f"reserves)")


def memory_fit(needed: float, calib: cal.Calibration) -> MemoryFit:
    device = calib.device
    if device is None:
        return MemoryFit(needed, 0.0, NAN)
    return MemoryFit(needed, device.reserved_bytes, device.memory_bytes)


def activations_on_device(profile: WorkloadSpec, calib: cal.Calibration, workload: str,
                          checkpointed: bool = False,
                          execution: Execution = DEFAULT_EXECUTION) -> float | None:
    """Bytes one sample of a whole replica keeps for backward on the calibration's device:
    at the precision ``execution`` computes in (the device's training precision where none
    is given), attention fused as its framework runs it (``sim.memory.kept_activations``)."""
    from harness.sim.systems.device_model import training_precision
    from workloads.precision import precision as find_precision

    assert calib.device is not None
    at = find_precision(execution.precision or training_precision(calib.device))
    return kept_activations(workload, profile.activation_bytes_per_sample, at,
                            fuses_attention(execution), checkpointed)


def fuses_attention(execution: Execution) -> bool:
    """Whether attention runs fused: as ``execution`` says, else as its framework runs it
    (torch's SDPA by default)."""
    from harness.sim.systems.device_model import fuses_attention as fused

    return fused(execution.framework, execution.fused_attention)


def _one_device_s(model: LayeredModel, micro: int, calib: cal.Calibration,
                  step_compute_s: float | None, precision: Precision | None) -> float:
    """One micro-batch's forward and backward on one device: what scaling efficiency is
    counted against (no recomputation, no communication)."""
    if step_compute_s is not None:
        return step_compute_s * micro / model.batch_size
    if calib.device is not None and calib.compute_s_per_step is None:
        from harness.sim.systems.compute import device_rate, layers_split

        rate = device_rate(calib.device, precision, calib.efficiency)
        return layers_split(model.layers, rate, micro).passes_s
    return cal.compute_seconds(WorkloadSpec(params=model.params, batch_size=micro,
                                            flops_per_sample=model.flops_per_sample),
                               calib)[0]


class _Outcome(TypedDict):
    """``SimulatedRow``'s fields a simulated step fills, as keywords."""

    step_time_median_s: float
    throughput_samples_s: float
    scaling_efficiency: float
    exposed_comm_s: float
    comm_s: float
    compute_s: float
    optimizer_s: float
    bytes_per_step: float
    bytes_per_worker: float
    staleness_mean: float
    staleness_max: float
    compute_source: str
    sim_mode: str
    sim_events: int
    sim_wall_s: float
    sim_notes: str
    class_bytes: dict[str, float]
    utilisation: dict[str, float]
    cost_per_million_samples_usd: float


def _outcome(r: StepResult, single_step_s: float, batch: int, calib: cal.Calibration
             ) -> _Outcome:
    price = calib.price_per_device_hour
    return {
        "step_time_median_s": r.step_time_s,
        "throughput_samples_s": r.throughput_samples_s,
        # T1 / (N * TN) in throughput terms: against N replicas that never communicate
        "scaling_efficiency": r.throughput_samples_s * single_step_s / (r.workers * batch),
        "exposed_comm_s": r.exposed_comm_s, "comm_s": r.comm_s, "compute_s": r.compute_s,
        "optimizer_s": r.optimizer_s, "bytes_per_step": r.bytes_per_step,
        "bytes_per_worker": r.bytes_per_worker,
        "staleness_mean": NAN if r.staleness_mean is None else r.staleness_mean,
        "staleness_max": NAN if r.staleness_max is None else r.staleness_max,
        "compute_source": r.compute_source, "sim_mode": r.mode, "sim_events": r.events,
        "sim_wall_s": r.wall_s, "sim_notes": "; ".join(r.notes),
        "class_bytes": dict(r.class_bytes), "utilisation": dict(r.utilisation),
        "cost_per_million_samples_usd": (
            NAN if price is None or not r.throughput_samples_s
            else price * r.workers / 3600 / r.throughput_samples_s * 1e6),
    }


COLLECTIVE_ALGORITHMS = (*ALLREDUCE, "reduce_scatter_ring", "all_gather_ring",
                         "broadcast_tree", "broadcast_binomial", "parameter_server",
                         "central_storage", "all_to_all")


def simulate_collective(topology_spec: str, workers: int, algorithm: str, nbytes: float,
                        calibration: cal.Calibration | None = None, *, mode: str = "fast",
                        ps_shards: int | None = None) -> SimulatedCollective:
    """One collective of ``nbytes`` per rank, in nccl-tests units (time, algbw, busbw): what
    the simulator predicts for a ``stratbench comm`` measurement; ``unavailable`` (with the
    reason) where the topology cannot run it."""
    if algorithm not in COLLECTIVE_ALGORITHMS:
        raise SpecError(f"unknown collective {algorithm!r} (choose from "
                        f"{', '.join(COLLECTIVE_ALGORITHMS)})")
    if not (math.isfinite(nbytes) and nbytes >= 0):
        raise SpecError(f"message size {nbytes} must be >= 0 bytes")
    topo, _ = _setup(topology_spec, workers, calibration)
    devices = None
    schedule: Schedule
    try:
        if algorithm in ALLREDUCE:
            schedule = allreduce_schedule(algorithm, topo, workers, nbytes)
        elif algorithm == "reduce_scatter_ring":
            schedule = channel_rings(ring_reduce_scatter, topo, workers)
        elif algorithm == "all_gather_ring":
            schedule = channel_rings(ring_all_gather, topo, workers)
        elif algorithm == "broadcast_tree":
            schedule = tree_broadcast(workers, 0, max(1, min(64, int(nbytes // 2**20))))
        elif algorithm == "broadcast_binomial":
            schedule = binomial_broadcast(workers)
        elif algorithm == "central_storage":
            schedule = central_storage(workers)
        elif algorithm == "all_to_all":
            schedule = all_to_all(workers)
        else:
            k = ps_shards or max(1, -(-workers // 8))
            schedule = ps_sync(workers, k, colocated=False)
            base = topo
            topo = with_servers(topo, k)
            assert isinstance(base, Hierarchy)
            devices = [*range(workers), *range(base.devices + base.servers,
                                               base.devices + base.servers + k)]
    except TopologyError as exc:
        return SimulatedCollective(collective=algorithm, cluster=topology_spec,
                                   replicas=workers, nbytes=nbytes, status=UNAVAILABLE,
                                   reason=str(exc))
    r = run_collective(schedule, topo, nbytes, mode=mode, devices=devices)
    return SimulatedCollective(
        collective=algorithm, cluster=topology_spec, replicas=workers, nbytes=nbytes,
        time_s=r.time_s, algbw=r.algbw,
        busbw=busbw(schedule.collective, workers, nbytes, r.time_s) if r.time_s else NAN,
        bytes_sent=r.bytes_sent, steps=r.steps, sim_mode=r.mode, sim_events=r.events,
        sim_wall_s=r.wall_s)
