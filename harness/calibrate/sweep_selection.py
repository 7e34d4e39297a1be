"""Which of a directory's collective sweeps an estimate reads, and a library's own costs.

Every estimate from sweeps (a floor in validate, a library's costs in predict, a link share)
selects them the same way: normal priority first, the nearest rank count swept, the median of
the latest few sweeps; one home for those rules so that they never drift apart.
"""

from __future__ import annotations

import math

import pandas as pd

# Loopback sweeps an estimate is the median of (the latest ones), for a floor (validate) and
# for a library's own costs (software_costs): one sweep is one sample of a machine state that
# moves from minute to minute. Two torch 2-rank sweeps 20 minutes apart (SCHED_RR) put a 1 KiB
# all-reduce at 0.12 and 0.19 ms, three back to back at 0.19, 0.22 and 0.24 ms; TF's at 2.7
# and 4.6 ms; the emulated points beside them repeated within 3%.
FLOOR_SWEEPS = 3



def realtime_rows(table: pd.DataFrame) -> pd.Series:
    """Which rows were measured at real-time priority (tables from before it: none)."""
    if "realtime" not in table:
        return pd.Series(False, index=table.index)
    return table["realtime"].fillna(False).astype(bool)



def normal_priority_first(table: pd.DataFrame) -> pd.DataFrame:
    """The rows measured at normal priority, as training runs, where there are any; else all."""
    normal = table[~realtime_rows(table)]
    return normal if not normal.empty else table



def at_nearest_world(table: pd.DataFrame, world: int) -> tuple[pd.DataFrame, int]:
    """The rows swept at ``world`` ranks, else at the nearest rank count swept (the smaller
    where two are as near), and that rank count; ``table`` must not be empty."""
    nearest = min({int(w) for w in table["world"]}, key=lambda w: (abs(w - world), w))
    return table[table["world"] == nearest], nearest



def latest_sweeps(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the latest FLOOR_SWEEPS sweeps (runs) in ``table``."""
    return table[table["run_id"].isin(sorted(table["run_id"].unique())[-FLOOR_SWEEPS:])]



def loopback_fits(fits: pd.DataFrame, framework: str) -> pd.DataFrame:
    """``framework``'s loopback all-reduce fits in ``fits`` (the calibration table): what a
    library's own costs are read from."""
    if fits.empty or "framework" not in fits:
        return fits.iloc[0:0]
    return fits[(fits["op"] == "all_reduce") & (fits["link_class"] == "loopback")
                & (fits["framework"] == framework)]



def software_costs(fits: pd.DataFrame, framework: str, world: int = 2) -> tuple[float, float]:
    """The communication library's own cost per message (alpha, s) and per byte (beta, s/B):
    the loopback all-reduce fits (`stratbench comm` on the local cluster) in ``fits`` (the
    calibration table) at ``world`` ranks, else at the nearest rank count swept (2 where two
    are as near), the median of each over the latest FLOOR_SWEEPS sweeps there; (0, 0) if
    none. A ring step's own cost grows with the ranks that share the cores, and one sweep of
    it is noisy: TF's loopback alpha was 1.0-1.2 ms at 2 ranks, 1.3-2.0 at 4 and 1.4-1.8 at 6
    (2026-11-24), 1.1 at 4 and 2.0 at 6 in single sweeps the next day."""
    local = normal_priority_first(loopback_fits(fits, framework))
    if local.empty:
        return 0.0, 0.0
    local = latest_sweeps(at_nearest_world(local, world)[0])
    beta = float(local["beta_s_per_byte"].median())
    return float(local["alpha_s"].median()), beta if math.isfinite(beta) else 0.0
