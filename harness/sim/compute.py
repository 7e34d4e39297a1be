"""How long a device computes: matmuls at the tensor-core rate, element-wise work at memory
bandwidth, and the record of a step's compute split.

One efficiency (the fraction of the precision's matmul peak a training step reaches) is the
device's only free number: fitted once on one measured or published step
(:func:`fit_efficiency`), then used for every other model and layout on that device. Element-wise
work (norms, softmax, activations, dropout, residual adds, the optimizer's update) is bound by
memory bandwidth, reached at ``MEMORY_EFFICIENCY``; it is what makes small models reach a
smaller share of the peak than large ones (its share of a transformer block falls as
1 / hidden).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.sim.layered import Layer
from harness.sim.preset import Device
from workloads.precision import Precision

#: Fraction of the datasheet memory bandwidth that streaming kernels reach: STREAM-like
#: benchmarks (BabelStream, https://github.com/UoB-HPC/BabelStream) reach roughly 80-90% of
#: HBM's datasheet rate on A100 and H100; the lower end, as fused element-wise kernels also
#: launch and reduce. Fixed, not fitted: docs/SIMULATOR.md shows what it does to the
#: Megatron-LM comparison.
MEMORY_EFFICIENCY = 0.8


@dataclass(frozen=True)
class ComputeSplit:
    """One pass's or one step's compute, split where strategies differ: forward, backward,
    the forward recomputation repeats, the optimizer's update on the device, and a parameter
    server's apply of pushed gradients. Shared by the model-parallel step here and the
    parameter-server model, which fills ``optimizer_s`` and ``apply_s`` from the runners'
    probes (dense rows or touched rows)."""

    forward_s: float
    backward_s: float
    recompute_s: float = 0.0
    optimizer_s: float = 0.0
    apply_s: float = 0.0

    @property
    def passes_s(self) -> float:
        """Forward, recomputation and backward: what a pipeline schedules."""
        return self.forward_s + self.recompute_s + self.backward_s

    @property
    def total_s(self) -> float:
        return self.passes_s + self.optimizer_s + self.apply_s

    def __add__(self, other: ComputeSplit) -> ComputeSplit:
        return ComputeSplit(self.forward_s + other.forward_s, self.backward_s + other.backward_s,
                            self.recompute_s + other.recompute_s,
                            self.optimizer_s + other.optimizer_s, self.apply_s + other.apply_s)


ZERO = ComputeSplit(0.0, 0.0)


@dataclass(frozen=True)
class DeviceRate:
    """A device as a step sees it: achieved matmul FLOP/s and element-wise bytes/s."""

    device: Device
    precision: str | None  # which peak: fp32, bf16, fp16, ...; None: the training peak
    efficiency: float
    source: str  # where the efficiency came from

    @property
    def matmul_flops(self) -> float:
        return self.device.peak(self.precision) * self.efficiency

    @property
    def bytes_per_s(self) -> float:
        bandwidth = self.device.memory_bandwidth
        if not math.isfinite(bandwidth):
            raise SpecError(f"{self.device.name} states no memory_bandwidth: the element-wise "
                            f"work of a step needs it")
        return bandwidth * MEMORY_EFFICIENCY


def device_rate(device: Device, precision: Precision | None, efficiency: float | None = None,
                source: str = "") -> DeviceRate:
    """The device computing at ``precision`` (fp32 weights use the fp32 peak; mixed bf16 and
    fp16 their tensor-core peak; None: the device's training peak, bf16 or fp16)."""
    eff = device.assumed_efficiency if efficiency is None else efficiency
    return DeviceRate(device, precision.name if precision else None, eff,
                      source or ("assumed" if efficiency is None else "calibrated"))


def layer_split(layer: Layer, rate: DeviceRate, samples: int, tensor: int = 1,
                sequence_parallel: bool = False, recompute: str = "none") -> ComputeSplit:
    """One layer's passes for ``samples`` samples on one of ``tensor`` ranks. Backward does
    twice the forward's matmuls (gradients of inputs and of weights) and, as a rule, twice
    its element-wise traffic; full recomputation repeats the forward, selective only the
    attention scores (Korthikanti et al. 2022, arXiv:2205.05198, section 5)."""
    matmul = layer.flops_per_sample / 3 * samples / tensor / rate.matmul_flops
    whole = layer.replicated_elementwise_bytes_per_sample
    split = layer.elementwise_bytes_per_sample
    traffic = (split / tensor + whole / (tensor if sequence_parallel else 1)) * samples
    memory = traffic / rate.bytes_per_s
    forward = matmul + memory
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = samples / tensor * (layer.attention_flops_per_sample / rate.matmul_flops
                                    + layer.attention_elementwise_bytes_per_sample
                                    / rate.bytes_per_s)
    else:
        again = 0.0
    return ComputeSplit(forward, 2 * forward, again)


def optimizer_seconds(params: float, precision: Precision, slots: int, rate: DeviceRate
                      ) -> float:
    """An element-wise update of ``params`` parameters (Adam: ``slots`` = 2): read the
    gradient, read and write the fp32 weights (the master copy under mixed precision, then
    write the compute copy) and every optimizer slot."""
    per_param = (precision.value_bytes + 8 + 8 * slots
                 + (precision.value_bytes if precision.master_bytes else 0))
    return params * per_param / rate.bytes_per_s


def fit_efficiency(step_seconds: Callable[[float], float], target_s: float) -> float:
    """The efficiency at which ``step_seconds(efficiency)`` equals ``target_s``: bisection,
    as a step's time falls as the efficiency rises. SpecError when no efficiency in (0, 1]
    reaches it (the step is slower than any matmul could make it, or faster than the peak)."""
    lo, hi = 1e-3, 1.0
    if step_seconds(hi) > target_s:
        raise SpecError(f"even at 100% of the peak the step takes {step_seconds(hi):.4g} s, "
                        f"more than the {target_s:.4g} s to fit")
    if step_seconds(lo) < target_s:
        raise SpecError(f"the step to fit ({target_s:.4g} s) is slower than 0.1% of the peak")
    for _ in range(60):
        mid = (lo + hi) / 2
        if step_seconds(mid) > target_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
