"""The device model's two GEMM kernel constants, fitted on a published per-shape table.

A GEMM's efficiency depends on its shape beyond tile and wave quantization: every kernel
takes some device time to fill and drain the SMs whatever its size, and each output tile
pays a prologue and an epilogue that a short reduction amortises over fewer steps. OpenXLA
publishes what its bf16 dots measure on an H100 at 375 shapes (``published/
xla_gemm_sm90.json``, its source beside it); this command fits the device model's own
formula (``device_model.gemm_time``) to it (a large GEMM's efficiency, ``gemm_fixed``
and ``gemm_k_overhead``) and prints how close the formula comes with and without the two
constants. The efficiency it finds is XLA's, not a training step's: only the two constants
go into the system file; a training step's efficiency stays fitted on a training run.

    python -m harness.validate.gemm_table
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from statistics import median

import numpy as np
from scipy.optimize import least_squares

from harness.sim.systems.device_model import MEMORY_EFFICIENCY, gemm_time
from harness.sim.systems.preset import Device, load_preset, preset_names

TABLE = "xla_gemm_sm90.json"
#: the system file whose device the table was measured on
SYSTEM = "dgx_h100_ib"
BF16_BYTES = 2


@dataclass(frozen=True)
class Shape:
    b: int
    m: int
    n: int
    k: int
    flops_per_s: float  # as published

    @property
    def seconds(self) -> float:
        return 2.0 * self.b * self.m * self.n * self.k / self.flops_per_s


@dataclass(frozen=True)
class GemmFit:
    efficiency: float  # of the bf16 peak, XLA's large GEMM
    fixed_s: float
    k_overhead: float
    errors: tuple[float, ...]  # model over table - 1, per shape
    errors_without: tuple[float, ...]  # the same, both constants 0 (efficiency refitted)

    @staticmethod
    def summary(errors: tuple[float, ...]) -> str:
        size = sorted(abs(e) for e in errors)
        return (f"median |error| {median(size):.1%}, 90th percentile "
                f"{size[int(0.9 * (len(size) - 1))]:.1%}, worst {size[-1]:.1%}")


def table() -> list[Shape]:
    data = json.loads(resources.files("harness.validate.published").joinpath(TABLE)
                      .read_text())
    return [Shape(*entry) for entry in data["entries"]]


def model_seconds(shape: Shape, device: Device, efficiency: float, fixed_s: float,
                  k_overhead: float) -> float:
    return gemm_time(shape.m, shape.n, shape.k, shape.b,
                     flops_per_s=device.peak("bf16") * efficiency, sms=device.sms,
                     k_overhead=k_overhead, fixed_s=fixed_s, operand_bytes=BF16_BYTES,
                     result_bytes=BF16_BYTES,
                     bytes_per_s=device.memory_bandwidth * MEMORY_EFFICIENCY)


def _fit(shapes: list[Shape], device: Device, free: bool) -> tuple[np.ndarray, tuple]:
    """Least squares on the log of model over table (every shape weighs alike, small or
    large); ``free``: the two constants fitted (microseconds and elements), else 0."""
    def residuals(x: np.ndarray) -> list[float]:
        fixed, k_overhead = (x[1] * 1e-6, x[2]) if free else (0.0, 0.0)
        return [math.log(model_seconds(s, device, x[0], fixed, k_overhead) / s.seconds)
                for s in shapes]
    start = np.array([0.8, 5.0, 100.0] if free else [0.8])
    bounds = ([0.05, 0.0, 0.0], [1.0, 100.0, 4096.0]) if free else ([0.05], [1.0])
    x = least_squares(residuals, start, bounds=bounds).x
    return x, tuple(math.expm1(r) for r in residuals(x))


def fit(system: str = SYSTEM) -> GemmFit:
    device = load_preset(system).device
    shapes = table()
    x, errors = _fit(shapes, device, free=True)
    _, without = _fit(shapes, device, free=False)
    return GemmFit(float(x[0]), float(x[1]) * 1e-6, float(x[2]), errors, without)


def format_fit(result: GemmFit, system: str = SYSTEM) -> str:
    lines = [
        f"{len(result.errors)} bf16 GEMM shapes of OpenXLA's sm_90 table against the device "
        f"model on {system}'s device:",
        f"  fitted: gemm_fixed {result.fixed_s * 1e6:.1f} us, gemm_k_overhead "
        f"{result.k_overhead:.0f}, a large GEMM at {result.efficiency:.1%} of the peak "
        f"(XLA's; not a training step's)",
        f"  with the two constants:  {GemmFit.summary(result.errors)}",
        f"  without (tiles and waves only, efficiency refitted): "
        f"{GemmFit.summary(result.errors_without)}",
        "system files carrying the constants (gemm_fixed, gemm_k_overhead):"]
    for name in preset_names():
        device = load_preset(name).device
        if device.gemm_fixed_s or device.gemm_k_overhead:
            lines.append(f"  {name:<16}{device.gemm_fixed_s * 1e6:.1f} us, "
                         f"{device.gemm_k_overhead:.0f}")
    return "\n".join(lines)


def report() -> str:
    """What ``python -m harness.validate.gemm_table`` prints."""
    return format_fit(fit())


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
