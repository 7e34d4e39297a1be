"""One model-parallel training step (Megatron-LM's layout: data x pipeline x tensor).

Micro-batches run through a pipeline of stages (GPipe or 1F1B, ``harness/sim/pipeline.py``)
whose passes include their tensor-parallel all-reduces (blocking, two per transformer block
each way), activations and gradients sent between stages, then each stage's data-parallel
gradient all-reduce as soon as its last backward ends (and the tied embedding's between first
and last stage). Apart from the data-parallel step: the two share only the result record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from harness.sim.calibration import Calibration, compute_seconds
from harness.sim.collectives import grouped_ring_allreduce, point_to_point
from harness.sim.engine import CollectiveResult, run_collective
from harness.sim.layered import LayeredModel, Layout, check_layout, stage_layers
from harness.sim.pipeline import run_pipeline, stage_order
from harness.sim.profile import WorkloadProfile
from harness.sim.schedule import Schedule
from harness.sim.spec import SpecError
from harness.sim.step_result import StepResult
from harness.sim.topology import Topology, n_devices


class _PlacedCollectives:
    """Collective times per (schedule, size, devices), computed once each, and what a step
    spends on them counted as often as it runs them."""

    def __init__(self, topology: Topology, mode: str):
        self.topology, self.mode = topology, mode
        self.cache: dict[tuple[str, int, float, tuple[int, ...]], CollectiveResult] = {}
        self.time_s = self.bytes_sent = 0.0
        self.count = self.events = 0

    def time(self, schedule: Schedule, nbytes: float, devices: Sequence[int],
             times: int = 1) -> float:
        key = (schedule.name, schedule.world, float(nbytes), tuple(devices))
        if key not in self.cache:
            self.cache[key] = run_collective(schedule, self.topology, nbytes, mode=self.mode,
                                             devices=list(devices))
            self.events += self.cache[key].events
        result = self.cache[key]
        self.time_s += result.time_s * times
        self.bytes_sent += result.bytes_sent * times
        self.count += times
        return result.time_s


def model_parallel_step(topology: Topology, model: LayeredModel, layout: Layout,
                        global_batch: int, calibration: Calibration | None = None, *,
                        step_compute_s: float | None = None, optimizer_s: float = 0.0,
                        recompute: bool = False, mode: str = "fast",
                        cores: float | None = None, pass_overhead_s: float = 0.0
                        ) -> StepResult:
    """One step of ``layout`` (data x pipeline x tensor) training ``model`` on ``global_batch``
    samples. ``step_compute_s``: forward + backward of the whole model on one device for its
    ``model.batch_size`` samples, when measured; else FLOPs over the calibration's device.

    Symmetry keeps it fast: every data-parallel replica runs the same pipeline, and every
    tensor rank of a stage the same passes, so one pipeline is scheduled; the collectives are
    simulated with all their concurrent groups, so shared hosts and links count.
    ``cores``: where all devices are processes of one thread on a machine with this many
    cores (emulated hosts), the computing ones share them (harness/sim/pipeline.py).
    ``pass_overhead_s``: a runtime's own work per forward or backward pass of a micro-batch
    (scheduling, messages, small-batch kernels), measured on loopback where it matters.
    """
    started = time.perf_counter()
    check_layout(model, layout, global_batch)
    if layout.devices > n_devices(topology):
        raise SpecError(f"layout {layout.describe()} needs {layout.devices} devices; the "
                        f"topology has {n_devices(topology)}")
    D, P, T, M = layout.data, layout.stages, layout.tensor, layout.microbatches
    micro = global_batch // (D * M)
    scale = micro / model.batch_size
    profile = WorkloadProfile(params=model.params, batch_per_replica=micro,
                              flops_per_sample=model.flops_per_sample,
                              step_compute_s=(step_compute_s * scale
                                              if step_compute_s is not None else None))
    whole, source = compute_seconds(profile, calibration)  # one micro-batch, one device
    colls = _PlacedCollectives(topology, mode)
    stages = stage_layers(model, P)
    forward, backward, forward_comm, backward_comm, compute_only = [], [], [], [], []
    for s, layers in enumerate(stages):
        f = whole * sum(layer.flops_per_sample for layer in layers) / model.flops_per_sample / T
        forward.append(f / 3 + pass_overhead_s)
        backward.append(2 * f / 3 + (f / 3 if recompute else 0.0) + pass_overhead_s)
        compute_only.append((forward[-1] + backward[-1]) * M)
        fwd_comm = bwd_comm = 0.0
        if T > 1:
            devices = [layout.device(d, s, t) for d in range(D) for t in range(T)]
            for layer in layers:
                if layer.tp_allreduces:
                    runs = layer.tp_allreduces * M * (3 if recompute else 2)
                    ar = colls.time(grouped_ring_allreduce(D, T),
                                    layer.output_bytes_per_sample * micro, devices, runs)
                    fwd_comm += layer.tp_allreduces * ar
                    bwd_comm += layer.tp_allreduces * ar * (2 if recompute else 1)
        forward_comm.append(fwd_comm)
        backward_comm.append(bwd_comm)
    sends = []
    for s in range(P - 1):
        nbytes = stages[s][-1].output_bytes_per_sample * micro / T
        src = [layout.device(d, s, t) for d in range(D) for t in range(T)]
        dst = [layout.device(d, s + 1, t) for d in range(D) for t in range(T)]
        there = colls.time(point_to_point(D * T), nbytes, src + dst, M)
        back = colls.time(point_to_point(D * T), nbytes, dst + src, M)
        sends.append((there, back))
    timing = run_pipeline(stage_order(layout.schedule, P, M), forward, backward,
                          [t for t, _ in sends], [b for _, b in sends],
                          cores / (D * T) if cores is not None else None,
                          forward_comm, backward_comm)
    ends = []
    for s, layers in enumerate(stages):
        params = sum(layer.params for layer in layers)
        end = timing.ends_s[s]
        if D > 1:
            groups = [layout.device(d, s, t) for t in range(T) for d in range(D)]
            end += colls.time(grouped_ring_allreduce(T, D),
                              params * model.bytes_per_element / T, groups)
        if P > 1 and model.tied_head_params and s in (0, P - 1):
            pair = [layout.device(d, r, t) for d in range(D) for t in range(T)
                    for r in (0, P - 1)]
            end += colls.time(grouped_ring_allreduce(D * T, 2),
                              model.tied_head_params * model.bytes_per_element / T, pair,
                              1 if s == 0 else 0)
        ends.append(end + optimizer_s * params / model.params / T)
    step_time = max(ends)
    slowest = max(compute_only)
    return StepResult(
        strategy=_layout_name(layout), workers=layout.devices, step_time_s=step_time,
        compute_s=slowest, optimizer_s=optimizer_s / (P * T), comm_s=colls.time_s,
        exposed_comm_s=max(0.0, step_time - slowest - optimizer_s / (P * T)),
        bytes_per_step=colls.bytes_sent, throughput_samples_s=global_batch / step_time,
        collectives=colls.count, events=colls.events, mode=mode,
        wall_s=time.perf_counter() - started, compute_source=source,
        layout=layout.describe(), bubble=timing.bubble,
        notes=(f"{layout.describe()}: {micro} sample{'s' if micro != 1 else ''} per "
               f"micro-batch, bubble "
               f"{timing.bubble:.1%}" + (", activations recomputed" if recompute else ""),))


def _layout_name(layout: Layout) -> str:
    parallel = [name for name, degree in (("data", layout.data), ("pipeline", layout.stages),
                                          ("tensor", layout.tensor)) if degree > 1]
    if not parallel:
        return "single_device"
    if parallel in (["pipeline"], ["tensor"]):
        return "pipeline" if parallel == ["pipeline"] else "tensor_parallel"
    return "+".join(parallel)
