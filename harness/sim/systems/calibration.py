"""Calibration: the numbers the simulator runs on, each saying where it came from.

Alpha (latency per message, s) and beta (s per byte) per link class, and how long a step's
compute and its optimizer's update take, either measured (``stratbench comm`` / ``run``
results, fitted by ``harness/calibrate/fits.py``), stated by a profile (``stating``), or
taken from a preset or the topology spec. The simulator takes a
:class:`Calibration`; it never fits one. How a run computes (its precision, framework,
attention, memory format) is no fit: it comes beside it, as ``workloads.execution.Execution``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import overload

from harness.core.errors import SpecError
from harness.sim.model.memory import optimizer_slots
from harness.sim.network.topology import Topology, link_classes, with_classes
from harness.sim.systems.device_model import (
    FP32_BYTES,
    DeviceRate,
    DeviceStep,
    accumulation_seconds,
    assumed_efficiency_note,
    device_rate,
    training_precision,
)
from harness.sim.systems.device_model import device_step as _device_step
from harness.sim.systems.preset import Device, load_preset
from harness.sim.systems.spec import parse_topology
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.precision import precision
from workloads.profile import Stated
from workloads.spec import WorkloadSpec

SOURCES = ("measured", "preset", "spec", "profile")


@dataclass(frozen=True)
class LinkCalibration:
    """alpha + n * beta for an n-byte message over one link class."""

    alpha_s: float
    beta_s_per_byte: float
    source: str = "measured"
    note: str = ""

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and self.beta_s_per_byte > 0):
            raise SpecError(f"calibration alpha={self.alpha_s} must be >= 0 and "
                            f"beta={self.beta_s_per_byte} > 0")

    @property
    def bandwidth(self) -> float:
        return 1.0 / self.beta_s_per_byte


@dataclass(frozen=True)
class Calibration:
    """Per-class link costs and per-step compute; any part may be missing.

    ``compute_s_per_step``: forward + backward seconds of one replica's step, measured or
    stated (``compute_source`` says which: "profile" where a profile states it or a local
    run's time is scaled to the batch, ``stating``); ``optimizer_s``: the optimizer's
    seconds per step, stated by a profile or timed by the device model
    (``with_device_update``); None: not known (no update time)."""

    links: dict[str, LinkCalibration] = field(default_factory=dict)
    compute_s_per_step: float | None = None  # forward + backward, per replica
    optimizer_s: float | None = None  # the optimizer's update, per step
    device_flops: float | None = None  # achieved FLOP/s per device
    compute_source: str = "preset"
    name: str = ""
    price_per_device_hour: float | None = None
    # the device, where a system names one: model-parallel steps time each layer on it
    # (harness/sim/systems/compute.py), at ``efficiency`` of its matmul peak where one was fitted
    device: Device | None = None
    efficiency: float | None = None

    def sources(self) -> dict[str, str]:
        """Where each number came from, for the report: {'inter': 'measured', ...}."""
        out = {f"link:{k}": v.source for k, v in self.links.items()}
        if self.compute_s_per_step is not None or self.device_flops is not None:
            out["compute"] = self.compute_source
        return out


def from_topology(topology: Topology, source: str = "spec") -> Calibration:
    """The link costs a topology already carries (its spec's bandwidths and latencies)."""
    return Calibration({c.name: LinkCalibration(c.latency, 1.0 / c.bandwidth, source)
                        for c in link_classes(topology)})


def from_preset(name: str) -> Calibration:
    """A preset's links and device speed (peak FLOPS times its assumed efficiency)."""
    preset = load_preset(name)
    base = from_topology(parse_topology(f"preset:{name}"), "preset")
    return Calibration(base.links, device_flops=preset.device_flops, compute_source="preset",
                       name=name, price_per_device_hour=(
                           preset.price.usd_per_device_hour if preset.price else None),
                       device=preset.device)


def merge(base: Calibration, override: Calibration) -> Calibration:
    """``override`` where it knows a number, ``base`` elsewhere (e.g. measured links over a
    preset's device speed and price): every field it states (not None, not empty), the links
    class by class, and the compute's source with the compute it names."""
    values = {f.name: getattr(override, f.name) if getattr(override, f.name) not in (None, "")
              else getattr(base, f.name) for f in fields(Calibration)}
    values["links"] = {**base.links, **override.links}
    if override.compute_s_per_step is None and override.device_flops is None:
        values["compute_source"] = base.compute_source
    return Calibration(**values)


def stating(calibration: Calibration | None, compute_s: float | None = None,
            optimizer_s: float | None = None) -> Calibration | None:
    """``calibration`` with a compute time per step (a profile's, or a local run's scaled to
    the batch: source "profile") and an update time stated over whatever it knows: they
    take precedence (``merge``). ``calibration`` as it is where nothing is stated."""
    if compute_s is None and optimizer_s is None:
        return calibration
    said = Calibration(compute_s_per_step=compute_s, compute_source="profile",
                       optimizer_s=optimizer_s)
    return said if calibration is None else merge(calibration, said)


def stated(calibration: Calibration | None, said: Stated) -> Calibration | None:
    """``calibration`` with the step's costs a profile states (``workloads.profile.Stated``)."""
    return stating(calibration, said.step_compute_s, said.optimizer_s)


def optimizer_seconds(calibration: Calibration | None) -> float:
    """The optimizer's seconds per step: stated or timed, else none."""
    return (calibration.optimizer_s or 0.0) if calibration is not None else 0.0


def apply(topology: Topology, calibration: Calibration | None) -> Topology:
    """The topology with every class the calibration knows replaced by its alpha and beta."""
    if calibration is None or not calibration.links:
        return topology
    return with_classes(topology, {k: (v.bandwidth, v.alpha_s)
                                   for k, v in calibration.links.items()})


def device_step(profile: WorkloadSpec, calibration: Calibration | None,
                execution: Execution = DEFAULT_EXECUTION) -> DeviceStep | None:
    """The profile's step on the calibration's device by the device model, run as
    ``execution`` says, where nothing measured says otherwise and the workload's operators
    are known; None else."""
    if not _device_times(profile, calibration):
        return None
    assert calibration is not None and calibration.device is not None
    name = execution.precision or training_precision(calibration.device)
    rate = _rate(calibration, execution, name)
    updated = profile.updated_values(profile.batch_size, rate.framework)
    step = _device_step(profile.ops, profile.batch_size, updated, rate,
                        precision(name), optimizer_slots(profile.optimizer))
    if execution.precision is None:
        note = f"{name} (no --precision given: the device's training precision)"
        if assumed := assumed_efficiency_note(rate):
            note = f"{note}; {assumed}"
        step = replace(step, precision_note=note)
    return step


def _device_times(profile: WorkloadSpec, calibration: Calibration | None) -> bool:
    """Whether the device model times the profile's step: nothing stated or measured, a
    device, and the workload's operators."""
    return (calibration is not None and calibration.compute_s_per_step is None
            and calibration.device is not None and bool(profile.ops))


def _rate(calibration: Calibration, execution: Execution, name: str) -> DeviceRate:
    assert calibration.device is not None
    return device_rate(calibration.device, name, calibration.efficiency,
                       efficiency_source(calibration), execution.framework,
                       execution.fused_attention, execution.channels_last)


def accumulation_add_seconds(profile: WorkloadSpec, calibration: Calibration | None,
                             execution: Execution = DEFAULT_EXECUTION) -> float:
    """One more micro-batch's dense gradients added into the accumulated ones on the
    calibration's device, where the device model times the step: torch keeps fp32 gradients
    (fp32 weights, autocast over them) and adds them after each backward
    (``device_model.accumulation_seconds``). 0 where the compute is measured or stated: a
    measured step is one micro-batch's, on a machine whose bandwidth is not known."""
    if not _device_times(profile, calibration):
        return 0.0
    assert calibration is not None and calibration.device is not None
    rate = _rate(calibration, execution,
                 execution.precision or training_precision(calibration.device))
    return accumulation_seconds(profile.params * profile.dense_fraction, FP32_BYTES, rate)


@overload
def with_device_update(profile: WorkloadSpec, calibration: Calibration,
                       execution: Execution = ...) -> Calibration: ...
@overload
def with_device_update(profile: WorkloadSpec, calibration: Calibration | None,
                       execution: Execution = ...) -> Calibration | None: ...
def with_device_update(profile: WorkloadSpec, calibration: Calibration | None,
                       execution: Execution = DEFAULT_EXECUTION) -> Calibration | None:
    """The calibration with the profile's optimizer update timed on its device, where the
    device model times the step and no update time is stated: every strategy and the
    one-device baseline then pay the same update."""
    step = device_step(profile, calibration, execution)
    if step is None or calibration is None or calibration.optimizer_s:
        return calibration
    return replace(calibration, optimizer_s=step.optimizer_s)


def efficiency_source(calibration: Calibration) -> str:
    """Where the device's efficiency came from, as answers name it."""
    if calibration.efficiency is not None:
        return f"fitted: {calibration.compute_source}"
    return "the system file's"


def compute_seconds(profile: WorkloadSpec, calibration: Calibration | None,
                    execution: Execution = DEFAULT_EXECUTION) -> tuple[float, str]:
    """Forward + backward seconds per step per replica, and where the number came from.

    Precedence: a time the calibration holds (a profile's stated one over a measured one:
    ``stating``); the workload's operators timed on the calibration's device
    (harness/sim/systems/device_model.py, with the framework's own per-step work); the
    profile's FLOPs over the calibration's device speed.
    """
    if calibration is not None and calibration.compute_s_per_step is not None:
        return calibration.compute_s_per_step, calibration.compute_source
    step = device_step(profile, calibration, execution)
    if step is not None:
        assert calibration is not None and calibration.device is not None
        again = step.forward_s if execution.recomputed else 0.0
        return (step.passes_s + again + step.overhead_s,
                f"device model: {calibration.device.name}, {step.bound}, "
                f"{step.precision_note}")
    if (profile.flops_per_sample is not None and calibration is not None
            and calibration.device_flops):
        return (profile.flops_per_sample * profile.batch_size / calibration.device_flops,
                calibration.compute_source)
    raise SpecError("cannot tell the compute time: give the profile step_compute=, or "
                    "flops_per_sample= with a calibration that knows the device "
                    "(e.g. --calibration dgx_h100_ib)")
