"""`stratbench comm`, parent side: plan the size sweep, launch it, store points and fits."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.calibrate import fits as calibrate
from harness.core.case import COMM_ROUNDS, Case, Options
from harness.launch import placement as layout
from harness.launch.netns import Cluster
from harness.launch.processes import run_group
from harness.run.execute import confined
from results.store import ResultsStore

COMM_TABLE = "comm"
CALIBRATION_TABLE = "calibration"
STEP_FACTOR = 4
# Frameworks whose sweep ranks run at real-time priority (SCHED_RR, where allowed). Emulated
# hosts put 2-6 ranks on this machine's 2 cores, and a woken gloo rank waited out another's
# time slice: a 4-rank 1 KiB all-reduce took ~7 ms at normal priority and 0.76 ms at SCHED_RR
# (a real cluster, one host per rank, has no such wait), and two identical sweeps on 4
# emulated hosts at 800 Mbit/s differed by 2% per point instead of ~10%. TF's gRPC
# collectives did not change (7.4 vs 7.2 ms for 1 KiB on 4 ranks, rounds spread wider), so
# TF stays at normal priority. Training runs always do: their compute would starve the
# emulator's softirqs. The link probe runs at SCHED_RR too (harness/launch/linkprobe.py).
REALTIME_FRAMEWORKS = frozenset({"torch"})


def sweep_sizes(low: int, high: int, factor: int = STEP_FACTOR) -> list[int]:
    """low, low*4, ... up to high (high itself included), as nccl-tests' -f 4."""
    sizes, size = [], low
    while size < high:
        sizes.append(size)
        size *= factor
    sizes.append(high)
    return sorted(set(sizes))


@dataclass
class CommResult:
    status: str
    reason: str
    points: pd.DataFrame
    fits: pd.DataFrame


def run_comm(framework: str, cluster: str, sizes: list[int], world: int,
             timeout_s: float, hosts: Cluster | None = None,
             rounds: int = COMM_ROUNDS, realtime: bool = True,
             ops: tuple[str, ...] | None = None) -> CommResult:
    """The sweep on loopback, or one rank per emulated host when `hosts` is given; at
    real-time priority where `realtime`, the framework is one of REALTIME_FRAMEWORKS and the
    system allows it (the points' `realtime` column says whether it did). ``ops``: the
    operations to time (the framework's own default set when None)."""
    realtime = realtime and framework in REALTIME_FRAMEWORKS
    options: Options = {"sizes": sizes, "rounds": rounds, "realtime": realtime}
    if ops:
        options["ops"] = list(ops)
    case = Case(framework=framework, strategy="comm", workload="", cluster=cluster,
                replicas=world, steps=0, warmup=0, repeats=1, timeout_s=timeout_s,
                per_replica_batch=1, options=options)
    workdir = Path(tempfile.mkdtemp(prefix="stratbench-comm-"))
    try:
        case_file = workdir / "case.json"
        case_file.write_text(case.to_json())
        with confined(case, hosts) as where:
            group = run_group(layout.processes(case, case_file, where), workdir / "r0",
                              timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if group.status != "ok":
        return CommResult(group.status, group.reason, pd.DataFrame(), pd.DataFrame())
    # a collective is done when every rank is done: the slowest rank's time per point
    per_rank = pd.concat([pd.DataFrame(o.report["points"]) for o in group.outcomes
                          if o.report and "points" in o.report])
    measured = [c for c in ("time_s", "fast_s", "spread_rel") if c in per_rank]
    slowest = per_rank.groupby(["op", "bytes", "world"], sort=False)[measured].max()
    points = calibrate.with_bandwidths(slowest.reset_index())
    points.insert(0, "framework", framework)
    points.insert(1, "cluster", cluster)
    # every rank at real-time priority, or the sweep does not count as one
    ran_realtime = all(o.report.get("realtime", False) for o in group.outcomes if o.report)
    points["realtime"] = ran_realtime
    link_class = "loopback" if cluster == "local" else cluster
    fits = calibrate.fits_frame(calibrate.fit(points, link_class))
    fits.insert(0, "framework", framework)
    fits["realtime"] = ran_realtime
    return CommResult("ok", "", points, fits)


def store_comm(store: ResultsStore, run_id: str, result: CommResult, name: str) -> None:
    store.write_table(run_id, COMM_TABLE, name, result.points)
    store.write_table(run_id, CALIBRATION_TABLE, name, result.fits)


def format_table(result: CommResult) -> str:
    """nccl-tests' columns: size, time, algbw, busbw; then the fitted alpha and beta."""
    lines = [f"{'op':<15}{'size':>12}{'time (us)':>14}{'algbw GB/s':>12}{'busbw GB/s':>12}"]
    for r in result.points.to_dict("records"):
        lines.append(f"{r['op']:<15}{r['bytes']:>12}{r['time_s'] * 1e6:>14.1f}"
                     f"{r['algbw_bytes_s'] / 1e9:>12.3f}{r['busbw_bytes_s'] / 1e9:>12.3f}")
    lines.append("")
    lines.append(f"{'fit':<15}{'alpha (us)':>12}{'beta (GB/s)':>14}{'residual':>12}")
    for f in result.fits.to_dict("records"):
        lines.append(f"{f['op']:<15}{f['alpha_s'] * 1e6:>12.1f}"
                     f"{f['bandwidth_bytes_s'] / 1e9:>14.3f}{f['residual_rel']:>11.0%}")
    return "\n".join(lines)
