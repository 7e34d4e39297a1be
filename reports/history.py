"""History across runs per case, and the regression rule.

Rule (documented in the report): for each measured ok case (same ``case_id`` and
``env_fingerprint``, so different machines are never compared), each run is compared with the
runs before it. Let ``base`` be the median of the earlier runs' medians, ``spread`` their
range (max - min; 0 with one earlier run) and ``ci`` the widest 95% CI of the median among the
earlier runs and this one. The run is a **regression** when

    median - base > max(K * spread, ci)   and   median > base * (1 + MIN_REL)

(K = 3, MIN_REL = 5%): the slowdown must exceed both the run-to-run noise seen so far and the
measurement's own uncertainty, and be large enough to matter. An improvement is the mirror.
"""

from __future__ import annotations

import math
import os
from typing import Any, TypedDict

import pandas as pd

from harness.measure.stats import MIN_CHANGE
from harness.sim.rows import Scalar

K = 3.0
MIN_REL = MIN_CHANGE
RULE = (f"a run is flagged when its median step time exceeds the median of the earlier runs "
        f"of the same case (same machine fingerprint) by more than max({K:g} x the earlier "
        f"runs' range of medians, the widest 95% CI width among those runs and this one) and "
        f"by more than {MIN_REL:.0%}")


def _f(v: Any) -> float:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return math.nan
    return out


class Comparison(TypedDict):
    """A run against the runs of its case before it (a history row's last columns)."""

    base_s: float
    threshold_s: float
    change: float
    verdict: str  # first, ok, regression, improvement; '-' where this run has no median


def compare(median: float, ci_width: float, earlier: list[tuple[float, float]]
            ) -> Comparison:
    """``earlier``: (median, ci width) of earlier runs. Returns base, threshold and verdict."""
    meds = [m for m, _ in earlier if math.isfinite(m)]
    if not meds or not math.isfinite(median):
        return Comparison(base_s=math.nan, threshold_s=math.nan, change=math.nan,
                          verdict="first" if not meds else "-")
    base = float(pd.Series(meds).median())
    spread = max(meds) - min(meds) if len(meds) > 1 else 0.0
    widths = [w for _, w in earlier if math.isfinite(w)] + (
        [ci_width] if math.isfinite(ci_width) else [])
    threshold = max(K * spread, max(widths, default=0.0))
    delta = median - base
    verdict = "ok"
    if delta > threshold and median > base * (1 + MIN_REL):
        verdict = "regression"
    elif -delta > threshold and median < base * (1 - MIN_REL):
        verdict = "improvement"
    return Comparison(base_s=base, threshold_s=threshold, change=median / base - 1,
                      verdict=verdict)


def history(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per (case, run) of measured ok rows, oldest first, with the verdict."""
    cols = ["case_id", "env_fingerprint", "run_id", "started_at", "workload", "size",
            "framework", "strategy", "cluster", "replicas", "step_time_median_s",
            "step_time_ci95_low_s", "step_time_ci95_high_s"]
    if measured.empty:
        return pd.DataFrame(columns=[*cols, "base_s", "threshold_s", "change", "verdict"])
    ok = measured[(measured["status"] == "ok") &
                  (measured["source"].fillna("measured") == "measured")]
    rows: list[dict[str, Scalar]] = []
    for _, group in ok.groupby([ok["case_id"], ok["env_fingerprint"].fillna("")], sort=True):
        group = group.sort_values("run_id")
        earlier: list[tuple[float, float]] = []
        for r in group[cols].to_dict("records"):
            med = _f(r["step_time_median_s"])
            width = _f(r["step_time_ci95_high_s"]) - _f(r["step_time_ci95_low_s"])
            c = compare(med, width, earlier)
            rows.append({str(k): v for k, v in r.items()} | {
                "base_s": c["base_s"], "threshold_s": c["threshold_s"], "change": c["change"],
                "verdict": c["verdict"]})
            earlier.append((med, width))
    return pd.DataFrame(rows)


def regressions(hist: pd.DataFrame) -> pd.DataFrame:
    """The latest run of each case, where flagged as a regression."""
    if hist.empty:
        return hist
    latest = hist.groupby(["case_id", "env_fingerprint"]).tail(1)
    return latest[latest["verdict"] == "regression"]


def latest_regressions(root: str | os.PathLike[str]) -> pd.DataFrame:
    """Regressions among the latest runs of the results under ``root``: what the nightly
    job's ``--fail-on-regression`` exits on."""
    from results.store import load

    return regressions(history(load(root)))
