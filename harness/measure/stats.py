"""Honest statistics of step times: median, spread, and a distribution-free 95% CI.

Step times are skewed (a GC pause, a late packet), so the median, not the mean, is the
summary, and its confidence interval comes from order statistics of the binomial
distribution (no normality assumed), as in pyperf and nccl-tests practice.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from harness.core.case import RoundsSummary


@dataclass(frozen=True)
class Summary:
    n: int
    median_s: float
    ci95_low_s: float
    ci95_high_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    stdev_s: float


def median_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval [x_(l), x_(u)] that covers the median with >= confidence."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n < 6:  # too few points for a 95% order-statistic interval: report the range
        return float(x[0]), float(x[-1])
    alpha = 1.0 - confidence
    from scipy import stats  # here: scipy.stats costs every CLI command a second to import

    low = int(stats.binom.ppf(alpha / 2, n, 0.5))
    high = int(stats.binom.isf(alpha / 2, n, 0.5))
    low = max(low - 1, 0)
    high = min(high, n - 1)
    return float(x[low]), float(x[high])


def summarize(step_times_s: np.ndarray | list[float]) -> Summary:
    x = np.asarray(step_times_s, dtype=float)
    if x.size == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan)
    low, high = median_ci(x)
    return Summary(
        n=int(x.size), median_s=float(np.median(x)), ci95_low_s=low, ci95_high_s=high,
        p10_s=float(np.percentile(x, 10)), p90_s=float(np.percentile(x, 90)),
        mean_s=float(x.mean()), stdev_s=float(x.std(ddof=1)) if x.size > 1 else 0.0,
    )


def scaling_efficiency(throughput: float, replicas: int, baseline_throughput: float) -> float:
    """Throughput of N replicas over N times one replica's, at the same per-replica batch."""
    if not (baseline_throughput > 0 and replicas > 0 and throughput > 0):
        return math.nan
    return throughput / (replicas * baseline_throughput)


def summarize_rounds(round_times_s: list[float],
                     round_quartiles_s: list[float] | None = None) -> RoundsSummary:
    """A micro-benchmark point measured in interleaved rounds: the median round (`time_s`),
    the rounds' range relative to it (`spread_rel`: how noisy the machine was), and the
    uncontended time (`fast_s`): the median of the rounds' lower quartiles of single
    iterations where a round timed them one by one, else the rounds' lower quartile.

    Why a second statistic: on this 2-core machine a collective's iterations are bimodal
    (measured on 2 ranks: ~0.45 ms, or ~4 ms when a woken thread waits out a scheduler
    slice, 10-60% of them, varying minute to minute), so a median flips between the modes
    while the lower quartile stays with the fast one; real hosts have cores of their own."""
    x = np.asarray(round_times_s, dtype=float)
    mid = float(np.median(x))
    fast = (float(np.median(round_quartiles_s)) if round_quartiles_s
            else float(np.percentile(x, 25)))
    return {"time_s": mid, "fast_s": fast,
            "spread_rel": float((x.max() - x.min()) / mid) if mid > 0 else 0.0}


#: The least change between two measured figures of one case counted as more than
#: run-to-run noise: the regression rule's floor (reports.history), how far a nightly pick's
#: measured time may move unflagged (harness.recommend.nightly), and how close two measured
#: options are a close call (harness.recommend.decide.sureness). One home, so a report's
#: "close call" and a night's "moved" draw the same line.
MIN_CHANGE = 0.05

# Rounds of every overlap probe (compute alone, exchange alone): each runner times this many
# of each and `overlap` takes their medians.
OVERLAP_ROUNDS = 3


def overlap(compute_s: list[float], exchange_s: list[float], step_s: float) -> dict[str, float]:
    """Compute and exchange timed apart (medians of their rounds) against the step that does
    both: overlap = (compute + exchange - step) / min(compute, exchange), 1 when the shorter
    hides entirely under the longer, 0 when they run one after the other, below 0 when
    together they cost more than apart (both fighting for the same cores)."""
    c, e = statistics.median(compute_s), statistics.median(exchange_s)
    return {"compute_only_s": c, "exchange_only_s": e,
            "measured_overlap": (c + e - step_s) / min(c, e) if min(c, e) > 0 else 0.0}
