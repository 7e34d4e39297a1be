"""Fit latency (alpha) and inverse bandwidth (beta) from collective sweeps.

Each collective's cost on n ranks is alpha x (latency terms) + beta x (bytes terms) x S for
the algorithm it runs (ring and point-to-point forms below, Thakur, Rabenseifner & Gropp
2005). Fitting t = a + b S by non-negative least squares over the sweep and dividing by those
terms gives per-link alpha and beta; the fit's relative residual says how well the model
describes what was measured, and is stored beside the numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

# (latency terms, bandwidth terms per byte of S) for n ranks; S is the per-rank buffer.
TERMS = {
    "all_reduce": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
    "reduce_scatter": lambda n: (n - 1, (n - 1) / n),
    "all_gather": lambda n: (n - 1, (n - 1) / n),
    "broadcast": lambda n: (math.ceil(math.log2(n)), 1.0),
    "ps_push": lambda n: (1, n - 1),  # n-1 workers into one server link
    "ps_pull": lambda n: (1, n - 1),
    "all_to_all": lambda n: (n - 1, (n - 1) / n),  # gloo: a message to every other rank
    "rpc": lambda n: (1, 1.0),  # torch RPC: every rank's buffer to the next, at once
}
# nccl-tests' bus bandwidth factors: busbw = algbw x factor, comparable with link speed.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "ps_push": lambda n: float(n - 1),
    "ps_pull": lambda n: float(n - 1),
    "all_to_all": lambda n: (n - 1) / n,
    "rpc": lambda n: 1.0,
}


@dataclass(frozen=True)
class Fit:
    op: str
    world: int
    link_class: str
    alpha_s: float
    beta_s_per_byte: float
    bandwidth_bytes_s: float
    residual_rel: float  # RMS of (fit - measured) / measured over the sweep
    points: int


def with_bandwidths(points: pd.DataFrame) -> pd.DataFrame:
    """Add algbw = S / t and busbw = algbw x factor (bytes/s), as nccl-tests prints them."""
    out = points.copy()
    out["algbw_bytes_s"] = out["bytes"] / out["time_s"]
    out["busbw_bytes_s"] = [a * BUS_FACTOR[op](n) for a, op, n in
                            zip(out["algbw_bytes_s"], out["op"], out["world"], strict=True)]
    return out


def fit_one(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float, float]:
    """t = a + b S with a, b >= 0, weighted by 1/t so small messages count as much as big."""
    weights = 1.0 / times
    design = np.column_stack([np.ones_like(sizes), sizes]) * weights[:, None]
    from scipy.optimize import nnls  # here: scipy costs every CLI command half a second

    (a, b), _ = nnls(design, times * weights)
    predicted = a + b * sizes
    residual = float(np.sqrt(np.mean(((predicted - times) / times) ** 2)))
    return float(a), float(b), residual


def fit(points: pd.DataFrame, link_class: str = "loopback") -> list[Fit]:
    fits = []
    for op, world in sorted({(str(o), int(w)) for o, w in zip(points["op"], points["world"],
                                                               strict=True)}):
        group = points[(points["op"] == op) & (points["world"] == world)]
        if len(group) < 2 or op not in TERMS:
            continue
        a, b, residual = fit_one(group["bytes"].to_numpy(float), group["time_s"].to_numpy(float))
        lat_terms, bw_terms = TERMS[op](world)
        beta = b / bw_terms if bw_terms else math.nan
        fits.append(Fit(op, world, link_class, a / lat_terms if lat_terms else a,
                        beta, 1.0 / beta if beta > 0 else math.inf, residual, len(group)))
    return fits


def fits_frame(fits: list[Fit]) -> pd.DataFrame:
    return pd.DataFrame([asdict(f) for f in fits])


def comm_table(root: Any, name: str = "calibration") -> pd.DataFrame:
    """A results directory's `stratbench comm` table: ``"comm"`` (the swept points) or
    ``"calibration"`` (their fits); tables from before TF sweeps existed are torch's."""
    from results.store import load_table_safe

    table = load_table_safe(root, name)
    if not table.empty and "framework" not in table:
        table["framework"] = "torch"
    return table
