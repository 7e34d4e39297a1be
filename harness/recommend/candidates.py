"""Every configuration a target offers, with its step time and where that number came from.

Three sources, one record (``records.Candidate``), so the decision rule never asks where a
number came from; the candidate says it (``source``, ``validation_error``):
- measured: the latest ok rows of this cluster in the results store;
- predicted: an emulated cluster never run, each real strategy predicted by
  ``harness.predict.step`` from this machine's calibration (the rules `validate` scores);
- simulated: a topology, each simulated strategy at each device count of the sweep.
Pure functions over DataFrames: no framework, no run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from harness.calibrate.links import MeasuredLinks, links_of_cluster
from harness.calibrate.workload import (
    MeasuredCompute,
    emulated_compute,
    estimated_compute,
    measured_compute,
    no_compute_message,
    row_names,
    scaled_compute,
)
from harness.core.errors import InputError
from harness.core.layout import largest_divisor
from harness.predict.emulated import emulated_strategies, predict_emulated
from harness.recommend.records import Candidate, MeasuredRun
from harness.recommend.targets import Target, device_counts, device_kind
from harness.sim.api import activations_on_device
from harness.sim.rows import LayoutRow, Scalar, SimulatedRow
from harness.sim.systems.calibration import Calibration
from workloads.execution import Execution
from workloads.profile import NOTHING_STATED, Stated
from workloads.spec import WorkloadSpec

if TYPE_CHECKING:
    from harness.validate.devices import PublishedCheck

NAN = float("nan")
# The price of a device like this machine when the user names none: one replica here is a
# process on 2 x86 cores with a few GB of memory, the shape of AWS's m6i.large (2 vCPU,
# 8 GiB), $0.096 per hour on demand in us-east-1 (https://aws.amazon.com/ec2/pricing/
# on-demand/, list price as of 2026; re-check before relying on it). Shown as assumed.
HERE_PRICE_PER_HOUR = 0.096
HERE_PRICE_BASIS = "assumed: a 2-vCPU cloud instance like this machine (AWS m6i.large on demand)"


@dataclass
class Context:
    """What every target's candidates are computed from (the results store, read once)."""

    measured: pd.DataFrame
    simulated: pd.DataFrame = field(default_factory=pd.DataFrame)
    errors: dict[str, float] = field(default_factory=dict)
    ram_bytes: float | None = None
    fits: pd.DataFrame = field(default_factory=pd.DataFrame)  # `comm` calibration table
    sweeps: pd.DataFrame = field(default_factory=pd.DataFrame)  # `comm` points (link shares)
    networks: list[dict[str, Any]] = field(default_factory=list)  # probes of emulated runs
    price: float | None = None  # the user's price per device-hour
    device: str | None = None  # a preset whose device the target's devices are
    optimizer_slots: int = 2  # optimizer state per parameter: the workload's optimizer's
    precision: str | None = None  # what a described device computes in (None: its training
    # precision for compute, fp32 bytes for the exchange)
    runtimes: dict[tuple[str, str, str], float] = field(default_factory=dict)  # computed once
    # samples per optimizer step over all devices (described clusters only); None: each
    # replica takes the workload's batch per step, so the step grows with the devices
    global_batch: int | None = None
    # the stack's mechanisms every model-parallel candidate runs with (harness.core.layout.
    # MECHANISMS, as stated; the rest Layout's defaults)
    mechanisms: dict[str, bool | str] = field(default_factory=dict)
    # what the workload's profile states beside its model (its step's compute and update,
    # its bytes and bucket: ``workloads.profile.Stated``); set per workload
    stated: Stated = NOTHING_STATED

    @property
    def execution(self) -> Execution:
        """How every simulated candidate runs: in ``precision``, deployed as stated."""
        return self.stated.deployed(Execution(precision=self.precision))


def runs_as(model: str, device: str, hosts: int = 1, zero: int = 0,
            framework: str | None = None) -> str:
    """The framework strategies a user would run for the simulator's ``model`` on
    ``device``s (cpu, gpu, tpu) of ``hosts`` hosts: those that train there and do what was
    simulated. ``zero``: how the layout's data axis holds model state (3: sharded, so its
    data-parallel part is FSDP, not DDP). ``framework``: a user's model is code in one
    framework, so only its strategies run it (no other stack)."""
    from harness.core.stacks import needs_stack, stacks_running
    from harness.core.strategies import TPU, running

    if framework is not None:
        return " or ".join(s.label for s in running(model, device, hosts)
                           if s.framework == framework)
    if device == TPU and (model == "fsdp" or model in ("pipeline", "tensor_parallel")
                          or "+" in model):
        # a sharded model on TPUs: no runner here splits one there (TPUStrategy replicates)
        return stacks_running(model.split("+"), device)[0]
    if needs_stack(model.split("+")):
        # context and expert parallelism: run by other stacks (Megatron-Core, torchtitan),
        # not by a runner here
        return stacks_running(model.split("+"), device)[0]
    if model in ("pipeline", "tensor_parallel") or "+" in model:
        parts = {"data": "fsdp" if zero == 3 else "ddp", "pipeline": "pipeline",
                 "tensor": "tensor_parallel"}
        dims = model.split("+") if "+" in model else [
            "pipeline" if model == "pipeline" else "tensor"]
        return "torch " + " + ".join(parts[d] for d in dims if d in parts) \
            if device != "tpu" else ""
    return " or ".join(s.label for s in running(model, device, hosts))


def device_memory(target: Target, ctx: Context, replicas: int) -> float:
    """Memory a model can use on one device: the named system's device (its file states
    its capacity and the runtime's reserve), or this machine's RAM shared by the replicas
    that run on it."""
    name = ctx.device or target.preset_name
    if name is not None:
        from harness.sim.systems.preset import load_preset

        return load_preset(name).device.usable_memory_bytes
    if ctx.ram_bytes is None or not ctx.ram_bytes > 0:
        return NAN
    on_this_machine = replicas if target.kind in ("measured", "emulated") else 1
    return float(ctx.ram_bytes) / max(1, on_this_machine)


def _point(facts: WorkloadSpec, **fields: Any) -> Candidate:
    """A candidate with the workload's sizes (what its memory is counted from)."""
    return Candidate(params=facts.params, sparsity=facts.sparsity,
                     dense_fraction=facts.dense_fraction,
                     table_gradient_bytes=facts.table_gradient_bytes,
                     activation_bytes_per_sample=facts.activation_bytes_per_sample, **fields)


def _latest(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["framework", "strategy", "workload", "size", "cluster", "replicas"]
    return frame.sort_values("run_id").groupby(keys, dropna=False, sort=False).tail(1)


def measured_points(ctx: Context, facts: WorkloadSpec, target: Target) -> list[Candidate]:
    """The latest measured rows of ``facts.name`` on the target's own cluster."""
    m = ctx.measured
    if m.empty:
        return []
    rows = m[(row_names(m) == facts.name) & (m["cluster"] == target.spec)]
    if rows.empty:
        return []
    rows = _latest(rows)
    price, basis = _price(ctx, target, measured_here=True)
    out = []
    for framework in sorted(set(rows["framework"])):
        if not ((rows["framework"] == framework) & (rows["replicas"] == 1)).any():
            out += _local_baseline(ctx, facts, target, framework, price, basis)
    for r in rows.to_dict("records"):
        base = rows[(rows["framework"] == r["framework"]) & (rows["replicas"] == 1)
                    & (rows["status"] == "ok")]
        local = measured_compute(ctx.measured, facts.name, str(r["framework"]))
        t1 = (float(base["step_time_median_s"].iloc[0]) if not base.empty
              else local.seconds if local is not None else NAN)
        tn = float(r["step_time_median_s"])
        n = int(r["replicas"])
        if base.empty and local is not None and n > 1 and tn > 0:  # against this machine
            r["scaling_efficiency"] = local.seconds / tn * (
                int(r["global_batch"]) / n) / local.batch
        sent = r.get("bytes_sent_per_step")
        out.append(_point(
            facts, framework=r["framework"], strategy=r["strategy"], replicas=n,
            status=r["status"], status_reason=r.get("reason") or "", step_time_s=tn,
            batch=int(r["global_batch"]) // max(1, n),
            throughput_samples_s=float(r["throughput_samples_s"]),
            scaling_efficiency=float(r["scaling_efficiency"]),
            comm_fraction=max(0.0, 1 - t1 / tn) if n > 1 and tn > 0 else NAN,
            bytes_per_worker=float(sent) if sent is not None else NAN, source="measured",
            device_memory_bytes=device_memory(target, ctx, n), price_per_device_hour=price,
            price_basis=basis, measured=MeasuredRun(
                _weights_match(r), _number(r.get("max_weight_diff")),
                _number(r.get("model_memory_bytes")))))
    return out


def _local_baseline(ctx: Context, facts: WorkloadSpec, target: Target, framework: str,
                    price: float, basis: str) -> list[Candidate]:
    """A cluster measured without its one-replica case: one device there is one host like
    this machine, so its baseline is this machine's own one-replica run."""
    local = measured_compute(ctx.measured, facts.name, framework)
    if local is None:
        return []
    from harness.core.strategies import baseline

    return [_point(facts, framework=framework, strategy=baseline(framework).name,
                   replicas=1, step_time_s=local.seconds, batch=local.batch,
                   throughput_samples_s=local.batch / local.seconds, scaling_efficiency=1.0,
                   source="measured", device_memory_bytes=device_memory(target, ctx, 1),
                   price_per_device_hour=price, price_basis=basis, compute_note=local.note)]


def _number(value: Any) -> float:
    """A stored figure as a float; NaN where a run (or an older schema) recorded none."""
    return float(value) if value is not None else NAN


def compute_source(compute: MeasuredCompute) -> str:
    """'measured' only for a run of this workload (its one-device strategy); a step estimated
    from another workload's FLOPs and speed is 'estimated' (its note says from what)."""
    return "estimated" if compute.estimated_from else "measured"


def _weights_match(row: dict[Any, Any]) -> bool | None:
    extra = row.get("extra")
    if isinstance(extra, dict) and "weights_match" in extra:
        return bool(extra["weights_match"])
    return None


def probed_links(ctx: Context, target: Target) -> MeasuredLinks:
    """The target's links as this machine's link probes saw them (calibrate.links)."""
    return links_of_cluster(ctx.networks, target.spec)


def predicted_points(ctx: Context, facts: WorkloadSpec, target: Target) -> list[Candidate]:
    """An emulated cluster that was never run: each real strategy at 2, 4, ... hosts,
    predicted from this machine's calibration; the one-device baseline measured here."""
    from harness.core.strategies import baseline
    from harness.predict.step import simulated_as

    links = probed_links(ctx, target)
    price, basis = _price(ctx, target, measured_here=True)
    out: list[Candidate] = []
    for framework in ("torch", "tf"):
        compute = emulated_compute(ctx.measured, facts, framework)
        if compute is None:
            continue
        batch = compute.batch
        t1 = compute.seconds
        out.append(_point(
            facts, framework=framework, strategy=baseline(framework).name, replicas=1,
            step_time_s=t1, batch=batch, throughput_samples_s=batch / t1, scaling_efficiency=1.0,
            source=compute_source(compute), device_memory_bytes=device_memory(target, ctx, 1),
            price_per_device_hour=price, price_basis=basis, compute_note=compute.note))
        for fw, strategy in [(s.framework, s.name) for s in emulated_strategies(facts,
                                                                                framework)]:
            model = simulated_as(fw, strategy) or ""
            for n in [c for c in device_counts(target) if c > 1]:
                row = predict_emulated(ctx, facts, links, fw, strategy, n, compute,
                                       target.spec)
                if row is None:
                    continue
                out.append(_sim_point(ctx, facts, target, _Step.of(row.row), framework=fw,
                                      strategy=strategy, model=model, shared=_Shared(
                                          batch=batch, single_s=t1, price=price, basis=basis,
                                          source="predicted", compute_note=compute.note
                                          + ", cores shared as run")))
    if not out:
        raise InputError(no_compute_message(facts.name))
    return out


@dataclass(frozen=True, kw_only=True)
class _Step:
    """What a candidate reads of a simulated (or predicted, or stored) step."""

    strategy: str
    replicas: int
    status: str
    reason: str
    step_time_median_s: float = NAN
    throughput_samples_s: float = NAN
    exposed_comm_s: float = NAN
    bytes_per_worker: float = NAN
    compute_s: float = NAN
    optimizer_s: float = NAN

    @classmethod
    def of(cls, row: SimulatedRow) -> _Step:
        return cls(strategy=row.strategy, replicas=row.replicas, status=row.status,
                   reason=row.reason, step_time_median_s=row.step_time_median_s,
                   throughput_samples_s=row.throughput_samples_s,
                   exposed_comm_s=row.exposed_comm_s, bytes_per_worker=row.bytes_per_worker,
                   compute_s=row.compute_s, optimizer_s=row.optimizer_s)

    @classmethod
    def from_row(cls, row: dict[str, Scalar]) -> _Step:
        """A stored results row as a step (NaN for a figure it does not hold)."""
        def number(key: str) -> float:
            value = row.get(key, NAN)
            return float(value) if isinstance(value, int | float) else NAN

        return cls(strategy=str(row["strategy"]), replicas=int(number("replicas")),
                   status=str(row["status"]), reason=cast(str, row.get("reason") or ""),
                   step_time_median_s=number("step_time_median_s"),
                   throughput_samples_s=number("throughput_samples_s"),
                   exposed_comm_s=number("exposed_comm_s"),
                   bytes_per_worker=number("bytes_per_worker"), compute_s=number("compute_s"),
                   optimizer_s=number("optimizer_s"))


@dataclass(frozen=True, kw_only=True)
class _Shared:
    """What every simulated (or predicted) candidate of a target shares: the samples a step,
    the one device's step, the price and where the step came from."""

    batch: int
    single_s: float
    price: float
    basis: str
    source: str
    compute_note: str


def _sim_point(ctx: Context, facts: WorkloadSpec, target: Target, row: _Step, *,
               framework: str, strategy: str, model: str, shared: _Shared) -> Candidate:
    n = int(row.replicas)
    batch, single_s = shared.batch, shared.single_s
    overall = ctx.errors.get("step", ctx.errors.get("collective", NAN))
    step = float(row.step_time_median_s)
    exposed = float(row.exposed_comm_s)
    ok = row.status == "ok"
    tput = float(row.throughput_samples_s) if ok else NAN
    return _point(
        facts, framework=framework, strategy=strategy, replicas=n, status=row.status,
        status_reason=row.reason or "", step_time_s=step, batch=batch,
        throughput_samples_s=tput,
        scaling_efficiency=tput * single_s / (n * batch) if ok else NAN,
        comm_fraction=exposed / step if ok and step > 0 else NAN,
        bytes_per_worker=float(row.bytes_per_worker), source=shared.source,
        validation_error=ctx.errors.get(f"step:{model}", overall),
        device_memory_bytes=device_memory(target, ctx, n), price_per_device_hour=shared.price,
        price_basis=shared.basis, compute_note=shared.compute_note, model=model)


def _price(ctx: Context, target: Target, measured_here: bool) -> tuple[float, str]:
    """(USD per device-hour, where it came from): a preset target's own list price, else
    the user's --price, else the named device's preset price, else, for devices like this
    machine, the assumed price of such a machine."""
    from harness.sim.systems.preset import load_preset

    own = load_preset(target.preset_name).price if target.preset_name else None
    if own is not None:
        return own.usd_per_device_hour, f"preset {target.preset_name}: {own.basis}"
    if ctx.price is not None:
        return ctx.price, "--price"
    named = load_preset(ctx.device).price if ctx.device else None
    if named is not None:
        return named.usd_per_device_hour, f"preset {ctx.device}: {named.basis}"
    if measured_here:
        return HERE_PRICE_PER_HOUR, HERE_PRICE_BASIS
    return NAN, ""


def topology_points(ctx: Context, facts: WorkloadSpec, target: Target) -> list[Candidate]:
    """A topology at each device count of the sweep: stored simulations where they match,
    else simulated now; compute from the named device's speed and the workload's FLOPs, else
    measured here (a device like this machine)."""
    from harness.sim.systems.calibration import (
        accumulation_add_seconds,
        compute_seconds,
        optimizer_seconds,
        stated,
        stating,
        with_device_update,
    )

    device = ctx.device or target.preset_name
    facts, calibration, compute_s, compute_note, checked = _compute_basis(ctx, facts, device)
    price, basis = _price(ctx, target, measured_here=device is None)
    execution = ctx.execution
    # the data-parallel steps' costs: the compute and update stated (or measured here) over
    # the device's, the update timed on the device where none is
    timed = with_device_update(facts, stating(stated(calibration, ctx.stated), compute_s),
                               execution)
    one = _per_replica(facts, timed, ctx.global_batch, 1)
    assert one is not None  # one device takes every sample of a step
    single_facts, single_timed, single_times = one
    single_compute = compute_seconds(single_facts, single_timed, execution)[0]
    add_s = accumulation_add_seconds(facts, timed, execution)
    single_s = (single_times * single_compute + (single_times - 1) * add_s
                + optimizer_seconds(timed))
    batch = ctx.global_batch or facts.batch_size  # the single device's samples a step
    single_batch, single_layout = _accumulation(single_facts, single_times)
    out = [_point(facts, framework="sim", strategy="single_device", replicas=1,
                  step_time_s=single_s, batch=single_batch,
                  throughput_samples_s=batch / single_s, scaling_efficiency=1.0,
                  source="simulated", device_memory_bytes=device_memory(target, ctx, 1),
                  price_per_device_hour=price, price_basis=basis, compute_note=compute_note,
                  layout=single_layout)]
    shared = _Shared(batch=batch, single_s=single_s, price=price, basis=basis,
                     source="simulated", compute_note=compute_note)
    out += _data_parallel_points(ctx, facts, target, calibration, timed, add_s, shared)
    for row in _model_parallel_rows(ctx, facts, target, calibration, compute_s):
        point = _sim_point(ctx, facts, target, _Step.of(row), framework="sim",
                           strategy=row.strategy, model=row.strategy, shared=shared)
        out.append(replace(point, layout=row.layout.describe() + _recomputed(row.recompute),
                           memory_per_device_bytes=row.memory_per_device_bytes,
                           bubble=row.bubble_fraction, zero=int(row.layout.zero or 0)))
    return _annotate(out, ctx, facts, target, calibration, checked)


def _compute_basis(ctx: Context, facts: WorkloadSpec, device: str | None) -> tuple[
        WorkloadSpec, Calibration | None, float | None, str, PublishedCheck | None]:
    """Where a topology's compute comes from: the named device (its model, or FLOPs over its
    speed), a step the profile states, or this machine's measurement; the facts with their
    activations as that device keeps them, and the published check of the device's system."""
    from harness.sim.systems.calibration import from_preset
    from harness.sim.systems.device_model import (
        assumed_efficiency_note,
        device_rate,
        training_precision,
    )
    from harness.validate.devices import published_check

    calibration: Calibration | None = None
    compute_note = ""
    compute_s: float | None = None
    checked: PublishedCheck | None = None
    if device is not None and facts.flops_per_sample:
        preset_cal = from_preset(device)
        calibration = Calibration(device_flops=preset_cal.device_flops,
                                  compute_source=f"preset {device}", name=device,
                                  price_per_device_hour=preset_cal.price_per_device_hour,
                                  device=preset_cal.device)
        compute_note = (f"compute by the device model on the {device} device "
                        f"({ctx.precision or 'its training precision'})" if facts.ops
                        else f"compute from FLOPs on the {device} device")
        if facts.ops and preset_cal.device is not None and (assumed := assumed_efficiency_note(
                device_rate(preset_cal.device, ctx.precision
                            or training_precision(preset_cal.device)))):
            compute_note = f"{compute_note}; {assumed}"
        if facts.ops:
            checked = published_check(device, ctx.precision)
        # activations as the device keeps them: every candidate's memory reads this
        facts = replace(facts, activation_bytes_per_sample=activations_on_device(
            facts, calibration, facts.name, execution=ctx.execution))
    elif ctx.stated.step_compute_s is not None:
        compute_s, compute_note = ctx.stated.step_compute_s, "compute stated by the profile"
    else:
        measured = (measured_compute(ctx.measured, facts.name)
                    or estimated_compute(ctx.measured, facts))
        if measured is None:
            raise InputError(no_compute_message(facts.name))
        compute_s = scaled_compute(measured, facts.batch_size)
        compute_note = measured.note
    return facts, calibration, compute_s, compute_note, checked


def _data_parallel_points(ctx: Context, facts: WorkloadSpec, target: Target,
                          calibration: Calibration | None, timed: Calibration | None,
                          add_s: float, shared: _Shared) -> list[Candidate]:
    """Each data-parallel strategy at each device count of the sweep past one; ``timed``:
    the calibration with the step's compute and update stated, measured or timed."""
    out: list[Candidate] = []
    checkpointed = _checkpointed_activations(facts, calibration, ctx.execution)
    for n in [c for c in device_counts(target) if c > 1]:
        share = _per_replica(facts, timed, ctx.global_batch, n)
        if share is None:  # the global batch does not split over n replicas
            continue
        at_n, timed_n, times = share
        fitting, too_big = _fitting_strategies(ctx, at_n, target, n)
        rows = (None if ctx.global_batch else _stored(ctx, facts, target, n)) or (
            _simulated(target.spec, n, fitting, at_n, times, timed_n, facts.name,
                       ctx.execution)
            if fitting else [])
        rows += too_big
        wrapped = (_checkpointed_fsdp(ctx, at_n, target, n, timed_n, checkpointed)
                   if "fsdp" not in fitting and checkpointed is not None else None)
        for row, need in [*((r, None) for r in rows), *([wrapped] if wrapped else [])]:
            row = _accumulated(row, times, at_n.batch_size * n * times, add_s)
            point = _sim_point(ctx, facts, target, row, framework="sim",
                               strategy=row.strategy, model=row.strategy,
                               shared=shared)
            micro, layout = _accumulation(
                at_n, times, None if need is None else "every layer checkpointed")
            out.append(replace(point, batch=micro, layout=layout,
                               memory_per_device_bytes=need))
    return out


def _annotate(out: list[Candidate], ctx: Context, facts: WorkloadSpec, target: Target,
              calibration: Calibration | None, checked: PublishedCheck | None
              ) -> list[Candidate]:
    """Model FLOPs utilisation, the system's published error, and how each pick runs."""
    peak = _dense_peak(calibration)
    needed = model_flops(facts)
    kind = device_kind(target, ctx.device)
    annotated = []
    for i, point in enumerate(out):
        tput = point.throughput_samples_s
        # model FLOPs over the devices' dense peak: what large runs report
        point = replace(point, mfu=(needed * tput / (int(point.replicas) * peak)
                                    if peak and math.isfinite(tput) and needed else NAN))
        if checked is not None:  # the whole step on real clusters of this system: its error
            point = replace(point, validation_error=checked.median_abs_error,
                            validation_basis=checked.describe())
        if i > 0:
            hosts = -(-int(point.replicas) // max(1, target.per_host))
            point = replace(point, device_kind=kind, runs_as=runs_as(
                point.strategy, kind, hosts, int(point.zero or 0), facts.framework))
        annotated.append(point)
    return annotated


def _per_replica(facts: WorkloadSpec, timed: Calibration | None, global_batch: int | None,
                 n: int) -> tuple[WorkloadSpec, Calibration | None, int] | None:
    """What one of ``n`` data-parallel replicas runs per step: (the workload and its costs
    at the micro-batch: a stated or measured compute scaled to it, micro-batches per step).
    Without a global batch, one micro-batch of the workload's batch; with one, its share of
    the samples in micro-batches of the workload's batch, or of the largest smaller one that
    divides the share (gradient accumulation). None where the global batch does not split
    over ``n`` replicas."""
    if global_batch is None:
        return facts, timed, 1
    if global_batch % n:
        return None
    share = global_batch // n
    micro = largest_divisor(share, facts.batch_size)
    if micro == facts.batch_size:
        return facts, timed, share // micro
    return (facts.at(batch=micro), _compute_scaled(timed, micro, facts.batch_size),
            share // micro)


def _compute_scaled(timed: Calibration | None, by: float, per: float) -> Calibration | None:
    """The calibration with its stated or measured compute per step times ``by / per``."""
    if timed is None or timed.compute_s_per_step is None:
        return timed
    return replace(timed, compute_s_per_step=timed.compute_s_per_step * by / per)


def _simulated(spec: str, n: int, strategies: list[str], profile: WorkloadSpec,
               times: int, calibration: Calibration | None, label: str,
               execution: Execution) -> list[_Step]:
    """One micro-batch per replica of each strategy simulated; where replicas accumulate
    ``times`` of them, the strategies that exchange once a step exchange the sum of their
    gradients (``WorkloadSpec.drawing``: a sparse one touches more rows) and, where the
    device model times the update, apply it (torch's sum keeps every micro-batch's rows)."""
    from harness.sim import simulate
    from harness.sim.step.data_parallel import EXCHANGES_EVERY_MICROBATCH
    from harness.sim.systems.calibration import compute_seconds, device_step, stating

    summed = profile.drawing(times)
    if summed is profile:
        return [_Step.of(r) for r in simulate(spec, n, strategies, profile, calibration,
                                              workload=label, execution=execution)]
    timed = device_step(summed, calibration, execution)  # None: measured or stated
    summed_costs = calibration
    if timed is not None:
        assert calibration is not None  # the device model timed it on the calibration's
        summed_costs = replace(calibration, optimizer_s=timed.optimizer_s)
    # its compute stays one micro-batch's, as the device model times the profile
    summed_costs = stating(summed_costs, compute_seconds(profile, calibration, execution)[0])
    each = [s for s in strategies if s in EXCHANGES_EVERY_MICROBATCH]
    once = [s for s in strategies if s not in EXCHANGES_EVERY_MICROBATCH]
    rows = {row.strategy: _Step.of(row)
            for part, at, costs in ((each, profile, calibration),
                                    (once, summed, summed_costs))
            if part for row in simulate(spec, n, part, at, costs,
                                        workload=label, execution=execution)}
    return [rows[s] for s in strategies if s in rows]


def _accumulated(row: _Step, times: int, samples: int, add_s: float) -> _Step:
    """A simulated row of one micro-batch per replica as a step of ``times`` of them
    (``sim.step.data_parallel.accumulated_step``, each micro-batch after the first adding its
    gradients in ``add_s``), ``samples`` over all replicas."""
    if times <= 1 or row.status != "ok":
        return row
    from harness.sim.step.data_parallel import EXCHANGES_EVERY_MICROBATCH, accumulated_step

    strategy = str(row.strategy)
    step = accumulated_step(strategy, float(row.step_time_median_s), float(row.compute_s),
                            float(row.optimizer_s), times, add_s)
    exchanges = times if strategy in EXCHANGES_EVERY_MICROBATCH else 1
    return replace(row, step_time_median_s=step, throughput_samples_s=samples / step,
                   exposed_comm_s=exchanges * float(row.exposed_comm_s))


def _accumulation(facts: WorkloadSpec, times: int, layout: str | None = None
                  ) -> tuple[int, str | None]:
    """A data-parallel candidate's samples in memory at once (its micro-batch), and its
    layout, saying so where it accumulates several per step."""
    if times <= 1:
        return facts.batch_size, layout
    said = f"{times} micro-batches of {facts.batch_size} accumulated"
    return facts.batch_size, f"{layout}, {said}" if layout else said


def model_flops(facts: WorkloadSpec) -> float:
    """Training FLOPs per sample a model needs, MFU's numerator: the catalog's count with a
    causal attention's masked half (and a sliding window's older keys) taken out (the
    catalog counts the full square, as Megatron-LM's formula does; FlashAttention skips the
    masked blocks, so at 131k tokens the full square would put MFU near 100%)."""
    from workloads.operators import ATTENTION

    if not facts.flops_per_sample:
        return 0.0
    masked = sum(op.forward_flops - 4 * op.scored_pairs * op.heads * op.head_dim
                 for op in facts.ops if op.kind == ATTENTION)
    return float(facts.flops_per_sample) - 3 * masked  # forward and backward (2x forward)


def _dense_peak(calibration: Any) -> float:
    """The device's dense bf16 peak (its training peak where it has no bf16), the
    denominator of MFU; 0 where no device is described."""
    device = getattr(calibration, "device", None)
    if device is None:
        return 0.0
    return float(device.peak("bf16") if "bf16" in device.peak_flops else device.peak())


def _recomputed(how: Any) -> str:
    return {"full": ", recomputed", True: ", recomputed", "selective":
            ", selective recomputation"}.get(how, "")


def _fitting_strategies(ctx: Context, facts: WorkloadSpec, target: Target, n: int
                        ) -> tuple[list[str], list[_Step]]:
    """The simulated data-parallel strategies whose replica fits a device at ``n`` devices,
    and an unavailable row, saying by how much, for each that does not: memory is a
    formula, so a strategy that cannot hold the model is not simulated."""
    from harness.core.units import format_bytes
    from harness.sim.model.memory import replica_memory
    from harness.sim.step.strategies import EMBEDDING_SHARDING, expand_strategies

    cap = device_memory(target, ctx, n)
    fitting: list[str] = []
    too_big: list[_Step] = []
    sparse = [EMBEDDING_SHARDING] if facts.embedding_row_bytes else []  # tables to shard
    for name in [*(name for _, name in expand_strategies("all")), *sparse]:
        need = replica_memory(facts, "sim", name, n, ctx.optimizer_slots).total
        if not math.isfinite(cap) or need <= cap:
            fitting.append(name)
            continue
        too_big.append(_Step(strategy=name, replicas=n, status="unavailable",
                             reason=f"does not fit: needs {format_bytes(need)} per device, "
                                    f"the device has {format_bytes(cap)}"))
    return fitting, too_big


def _checkpointed_activations(facts: WorkloadSpec, calibration: Any, execution: Execution
                              ) -> float | None:
    """Bytes one sample keeps under activation checkpointing of every layer: its layers'
    inputs, plus one layer's whole activations during its backward (on a described device,
    as it keeps them: ``activations_on_device``; else in fp32, attention unfused); None for
    a workload without layers here."""
    from harness.sim.model.memory import kept_activations
    from workloads.precision import FP32

    if calibration is not None and calibration.device is not None:
        return activations_on_device(facts, calibration, facts.name, checkpointed=True,
                                     execution=execution)
    return kept_activations(facts.name, None, FP32, False, checkpointed=True)


def _checkpointed_fsdp(ctx: Context, facts: WorkloadSpec, target: Target, n: int,
                       timed: Calibration | None, per_sample: float
                       ) -> tuple[_Step, float] | None:
    """FSDP with every layer checkpointed and wrapped (torchtitan's default for large
    models): the row and its memory per device, or None when even that does not fit. The
    forward runs twice (a stated or measured compute in ``timed`` scaled with it); each
    block is one FSDP unit (the model's ``block_params``)."""
    from harness.sim import simulate
    from harness.sim.model.memory import replica_memory

    cap = device_memory(target, ctx, n)
    need = replica_memory(replace(facts, activation_bytes_per_sample=per_sample), "sim",
                          "fsdp", n, ctx.optimizer_slots).total
    if math.isfinite(cap) and need > cap:
        return None
    again = replace(facts, flops_per_sample=(facts.flops_per_sample * 4 / 3
                                             if facts.flops_per_sample else None))
    row = simulate(target.spec, n, ["fsdp"], again, _compute_scaled(timed, 4, 3),
                   workload=facts.name, execution=replace(ctx.execution, recomputed=True))[0]
    return _Step.of(row), need


def _model_parallel_rows(ctx: Context, facts: WorkloadSpec, target: Target,
                         calibration: Any, compute_s: float | None) -> list[LayoutRow]:
    """Pipeline / tensor / hybrid layouts, when one replica does not fit a device and the
    workload has layers to cut (harness/recommend/model_parallel.py); [] otherwise."""
    from harness.recommend.model_parallel import best_layouts
    from harness.sim.model.memory import OPTIMIZER_SLOTS, replica_memory
    from harness.sim.model.structure import layered
    from workloads import WorkloadError

    cap = device_memory(target, ctx, 1)
    whole = replica_memory(facts, "sim", "single_device", 1, ctx.optimizer_slots).total
    if not (math.isfinite(cap) and whole > cap):
        return []
    from workloads.precision import precision as find_precision

    at = find_precision(ctx.precision) if ctx.precision else None
    try:
        model = layered(facts.name, at) if at else layered(facts.name)
    except WorkloadError:
        return []
    optimizer = next((name for name, slots in OPTIMIZER_SLOTS.items()
                      if slots == ctx.optimizer_slots), "adam")
    from harness.validate.devices import memory_reach

    described = (ctx.device or target.preset_name) is not None
    return best_layouts(model, target, facts.batch_size, calibration, compute_s, cap,
                        optimizer, at, global_batch=ctx.global_batch,
                        mechanisms=ctx.mechanisms,
                        headroom=memory_reach().fraction if described else 1.0)


def _stored(ctx: Context, facts: WorkloadSpec, target: Target, n: int) -> list[_Step]:
    """Stored `simulate` rows of this exact target, count and workload (the nightly job's),
    so the report and the terminal agree; [] when there are none."""
    s = ctx.simulated
    if s is None or s.empty or not {"cluster", "replicas", "workload"} <= set(s):
        return []
    match = s[(s["cluster"] == target.spec) & (s["replicas"] == n)
              & (s["workload"] == facts.name)]
    if match.empty or ctx.device is not None:
        return []
    if "run_id" in match:
        match = match.sort_values("run_id").groupby("strategy").tail(1)
    return [_Step.from_row({str(k): v for k, v in r.items()})
            for r in match.to_dict("records")]


def bandwidth_bits(ctx: Context, target: Target) -> float:
    """The target's slowest link, bits/s (NaN where unknown): probed for emulated hosts."""
    if target.kind == "emulated":
        from harness.calibrate.links import bottleneck_bits

        return bottleneck_bits(probed_links(ctx, target))
    if target.kind == "topology":
        from harness.sim.systems.calibration import from_topology
        from harness.sim.systems.spec import parse_topology

        links = from_topology(parse_topology(target.spec)).links.values()
        return min(link.bandwidth for link in links) * 8 if links else NAN
    return NAN


