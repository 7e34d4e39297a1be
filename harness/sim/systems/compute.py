"""A step's compute split by layer, and the fit of a device's one free number.

A layer's passes are its operators timed by the device model
(``harness/sim/systems/device_model.py``: GEMMs at the precision's peak times the large-GEMM
efficiency, quantized by tiles and waves, element-wise work at memory bandwidth, attention fused
or not), the same model that times a data-parallel replica's whole step, so every strategy
computes alike. A layer without operators (a hand-made record) is timed from its FLOPs and
element-wise bytes.

One efficiency per device and precision (the fraction of the peak a large GEMM reaches) is
the device's only free number: cited in its system file, or fitted once on one measured or
published step (:func:`fit_efficiency`) and then used for every other model and layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.sim.model.layered import Layer
from harness.sim.systems.device_model import (
    MEMORY_EFFICIENCY,
    DeviceRate,
    device_rate,
    launch_floor,
    optimizer_seconds,
    pass_times,
)
from workloads.operators import ATTENTION

__all__ = ["MEMORY_EFFICIENCY", "ComputeSplit", "DeviceRate", "device_rate", "fit_efficiency",
           "layer_split", "optimizer_seconds"]

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


def layers_split(layers: Iterable[Layer], rate: DeviceRate, samples: int, tensor: int = 1,
                 sequence_parallel: bool = False,
                 recompute: Callable[[Layer], str] = lambda layer: "none",
                 expert: int = 1) -> ComputeSplit:
    """``layer_split`` summed over ``layers``, each distinct layer timed once (layer_split
    remembers: a model's blocks are one layer repeated, 126 of them in Llama 3 405B, and
    they share one tuple of operators)."""
    total = ZERO
    for layer in layers:
        total = total + layer_split(layer, rate, samples, tensor, sequence_parallel,
                                    recompute(layer), expert)
    return total


#: layer_split's answers by what decides them: a layout search times the same blocks on the
#: same device for every candidate (Llama 3 70B on 16 hosts: 9,524 calls, about 100 distinct)
_SPLITS: dict[tuple[object, ...], tuple[ComputeSplit, object, object]] = {}
_SPLITS_MAX = 4096


def layer_split(layer: Layer, rate: DeviceRate, samples: int, tensor: int = 1,
                sequence_parallel: bool = False, recompute: str = "none",
                expert: int = 1) -> ComputeSplit:
    """One layer's passes for ``samples`` samples on one of ``tensor`` ranks: its operators
    on the device (no faster than their kernels issue); full recomputation repeats the
    forward, selective only the attention (Korthikanti et al. 2022, arXiv:2205.05198,
    section 5). Remembered by the layer's operators and the device's identity (held, and
    checked on a hit, so a reused id cannot answer for another object) and every value
    that times it."""
    what = layer.ops or layer
    key = (id(what), id(rate.device), rate.precision, rate.efficiency, rate.framework,
           rate.fused_attention, rate.channels_last, samples, tensor, sequence_parallel,
           recompute, expert)
    hit = _SPLITS.get(key)
    if hit is not None and hit[1] is what and hit[2] is rate.device:
        return hit[0]
    split = _layer_split(layer, rate, samples, tensor, sequence_parallel, recompute, expert)
    if len(_SPLITS) >= _SPLITS_MAX:
        _SPLITS.clear()
    _SPLITS[key] = (split, what, rate.device)
    return split


def _layer_split(layer: Layer, rate: DeviceRate, samples: int, tensor: int,
                 sequence_parallel: bool, recompute: str, expert: int) -> ComputeSplit:
    if layer.ops:
        times = pass_times(layer.ops, samples, rate, tensor, sequence_parallel, expert)
        forward = max(times.forward_s, launch_floor(sum(op.kernels for op in layer.ops), rate))
        backward = max(times.backward_s,
                       launch_floor(sum(op.backward_kernels for op in layer.ops), rate))
        if recompute == "full":
            again = forward
        elif recompute == "selective":
            again = pass_times(tuple(op for op in layer.ops if op.kind == ATTENTION),
                               samples, rate, tensor).forward_s
        else:
            again = 0.0
        return ComputeSplit(forward, backward, again)
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
