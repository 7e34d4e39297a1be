"""The simulator against measured emulated runs: predict each one, store the error.

Predictions use only what was known before the run: the links as the link probe measured
them (bandwidth and RTT/2, never the collective's own timing), the workload's size, and the
compute time of the one-replica case of the same run. Each prediction's relative error,
(predicted - measured) / measured, is stored in the `validation` table and shown by reports.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.calibrate.fits import comm_table
from harness.calibrate.link_share import shaped_points, step_shares, swept_near
from harness.calibrate.links import MeasuredLinks, emulated_topology, measured_links
from harness.calibrate.sweep_selection import latest_sweeps, loopback_fits, realtime_rows
from harness.calibrate.workload import worker_compute, workload_facts
from harness.core.clusters import parse_cluster
from harness.core.errors import InputError
from harness.core.strategies import baseline as find_baseline
from harness.core.strategies import library
from harness.core.strategies import strategy as find_strategy
from harness.predict.step import (
    MODEL_PARALLEL_STRATEGIES,
    PredictedRow,
    PsLayout,
    layout_of,
    local_runs,
    machine_cores,
    pass_overhead,
    placed_ps_layout,
    predict_layout,
    predict_step,
    runtime_overhead,
    shard_bytes,
    uses_collectives,
)
from results.schema import TableRow
from results.store import MANIFEST, ResultsStore, load, load_table_safe

# `stratbench comm` operation -> the collective gloo actually runs (PS push/pull have no direct
# twin: the simulator's PS is a push + pull to dedicated servers). Gloo implements
# reduce_scatter as an all-reduce that keeps one chunk (measured: same time as all_reduce), and
# broadcast as an unchunked binomial tree (gloo/broadcast.cc; on 4 and 6 emulated hosts 4 MiB
# took 3 and 5 message times, which a pipelined tree's prediction missed by -22..-50%).
OP_TO_COLLECTIVE = {"all_reduce": "allreduce_ring", "reduce_scatter": "allreduce_ring",
                    "all_gather": "all_gather_ring", "broadcast": "broadcast_binomial",
                    "all_to_all": "all_to_all"}
VALIDATION_TABLE = "validation"


def latest_validation(root: Any) -> pd.DataFrame:
    """The newest `stratbench validate` table: earlier ones predicted with older models."""
    table = load_table_safe(root, VALIDATION_TABLE)
    if table.empty or "stored_in_run" not in table:
        return table
    return table[table["stored_in_run"] == table["stored_in_run"].max()]


def _sweep_curves(sweeps: pd.DataFrame, statistic: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The latest FLOOR_SWEEPS sweeps in `sweeps` as (sizes, times) curves, each sorted by
    size; a sweep that lacks the statistic is left out."""
    latest = latest_sweeps(sweeps)
    curves = []
    for run in latest["run_id"].unique():
        sweep = latest[latest["run_id"] == run].sort_values("bytes")
        if statistic not in sweep or sweep[statistic].isna().any():
            continue
        curves.append((sweep["bytes"].to_numpy(float), sweep[statistic].to_numpy(float)))
    return curves


def _curve_time(sizes: np.ndarray, times: np.ndarray, nbytes: float) -> float:
    """One sweep's time at `nbytes` (log-log interpolation between its sizes; beyond the
    sweep, its last point's bandwidth)."""
    if nbytes > sizes[-1]:
        return float(times[-1] * nbytes / sizes[-1])
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(times))))


def _median_time(curves: list[tuple[np.ndarray, np.ndarray]], nbytes: float) -> float | None:
    """The median over the curves of their time at `nbytes`; None without a curve."""
    found = [_curve_time(sizes, times, nbytes) for sizes, times in curves]
    return float(np.median(found)) if found else None


def _same_collective(points: pd.DataFrame, framework: str, op: str, world: int,
                     realtime: bool) -> pd.Series:
    return ((points["framework"] == framework) & (points["op"] == op)
            & (points["world"] == world) & (realtime_rows(points) == realtime))


def _loopback_sweeps(points: pd.DataFrame, framework: str, op: str, world: int,
                     realtime: bool) -> pd.DataFrame:
    return points[(points["cluster"] == "local")
                  & _same_collective(points, framework, op, world, realtime)]


def loopback_time(points: pd.DataFrame, framework: str, op: str, world: int,
                  nbytes: float, statistic: str = "time_s",
                  realtime: bool = False) -> float | None:
    """The same collective at the same rank count on loopback, the median over the latest
    FLOOR_SWEEPS local sweeps at the same scheduling priority: what the library and this
    machine's cores cost with no network at all, a floor that no emulated network can beat.
    Measured: gloo's 4 KiB all-reduce on 3 ranks takes about 3 ms on loopback and on
    unshaped emulated hosts alike (2 cores, 3 processes, normal priority), 10x the simulated
    wire time. None without such a sweep."""
    local = _loopback_sweeps(points, framework, op, world, realtime)
    return _median_time(_sweep_curves(local, statistic), nbytes)


@functools.lru_cache(maxsize=256)
def _is_unshaped(cluster: str) -> bool:
    try:
        spec = parse_cluster(cluster)
    except InputError:
        return False
    return spec.kind == "netns" and spec.unshaped


def _unshaped(clusters: pd.Series) -> pd.Series:
    """Which cluster specs are unshaped emulated hosts (`netns:hosts=N,rate=unshaped`)."""
    return clusters.map(_is_unshaped).astype(bool)


def _unshaped_sweeps(points: pd.DataFrame, framework: str, op: str, world: int,
                     realtime: bool) -> pd.DataFrame:
    return points[_unshaped(points["cluster"])
                  & _same_collective(points, framework, op, world, realtime)]


def unshaped_time(points: pd.DataFrame, framework: str, op: str, world: int,
                  nbytes: float, statistic: str = "time_s",
                  realtime: bool = False) -> float | None:
    """The same collective across `world` unshaped emulated hosts (one rank each), the median
    over the latest FLOOR_SWEEPS such sweeps at the same priority: the library, the cores
    and the emulated path (veth, bridge, qdisc, the wire's round trips) with no bandwidth
    limit. A loopback floor lacks the path and the round trips: with it, small collectives
    on shaped hosts came out too slow in the median (torch +4.5%, TF +6.6%; with this floor
    -0.7%, +1.7%; docs/SIMULATOR.md). None without such a sweep."""
    hosts = _unshaped_sweeps(points, framework, op, world, realtime)
    return _median_time(_sweep_curves(hosts, statistic), nbytes)


class Floors:
    """`floor_time` over one table of sweeps, each collective's floor curves selected once
    (a campaign scores thousands of points against a few dozen sweeps)."""

    SOURCES = (("unshaped", _unshaped_sweeps), ("loopback", _loopback_sweeps))

    def __init__(self, points: pd.DataFrame) -> None:
        self.points = points
        self._curves: dict[tuple[str, str, str, int, str, bool],
                           list[tuple[np.ndarray, np.ndarray]]] = {}

    def time(self, framework: str, op: str, world: int, nbytes: float,
             statistic: str = "time_s", realtime: bool = False) -> tuple[float | None, str]:
        """(the floor, where it came from): unshaped emulated hosts where they were swept
        at the same rank count, else loopback."""
        for source, select in self.SOURCES:
            key = (source, framework, op, world, statistic, realtime)
            if key not in self._curves:
                self._curves[key] = _sweep_curves(
                    select(self.points, framework, op, world, realtime), statistic)
            floor = _median_time(self._curves[key], nbytes)
            if floor is not None:
                return floor, source
        return None, "none"


def floor_time(points: pd.DataFrame, framework: str, op: str, world: int, nbytes: float,
               statistic: str = "time_s", realtime: bool = False
               ) -> tuple[float | None, str]:
    """(the floor, where it came from): unshaped emulated hosts where they were swept
    at the same rank count, else loopback (`Floors` where many points share the sweeps)."""
    return Floors(points).time(framework, op, world, nbytes, statistic, realtime)


@dataclass(frozen=True)
class NetworkTimes:
    """The simulator's times for one collective on a run's measured links."""

    total: float  # bytes and latency
    wire: float  # the bytes alone (the same links at zero latency)
    latency: float  # the latency alone (a 1-byte message)
    bucket_s: float  # the links' tbf bucket, in seconds of their rate


def _combine(net: NetworkTimes, floor: float | None, source: str, framework: str
             ) -> tuple[float, str]:
    """The predicted time and which bound set it.

    A loopback floor lacks the links' latency: the simulated network (bytes and latency)
    is added to it for libraries with serial_software, else the larger of the two counts, the
    floor with the latency added. An unshaped floor was measured across the same emulated
    path and holds that latency (gloo's rendezvous round trips included): the network then
    adds only its bytes' time (`wire`). Gloo's cost hides under the wire's (the larger of
    the two). A serial_software library's own time leaves the link idle, and the link's tbf
    bucket fills meanwhile, so up to a bucket of the wire's time then passes at line speed:
    floor + max(0, wire - min(bucket, floor)); a real NIC has no bucket (the plain sum)."""
    if floor is None:
        return net.total, "network"
    if source == "unshaped":
        if library(framework).serial_software:
            return floor + max(0.0, net.wire - min(net.bucket_s, floor)), "network + unshaped"
        return max(net.wire, floor), source if floor > net.wire else "network"
    if library(framework).serial_software:
        return net.total + floor, f"network + {source}"
    floor += net.latency
    return max(net.total, floor), source if floor > net.total else "network"


def validate_comm(store: ResultsStore) -> pd.DataFrame:
    """Each collective point on shaped emulated hosts: the simulated network time on the
    measured links, combined with the floor of the same collective (the library, the cores
    and, from unshaped hosts, the emulated path; floor_time() says which), for both
    statistics a sweep records: the median (`error`) and the uncontended time
    (`error_fast`, harness.measure.stats.summarize_rounds says why)."""
    from harness.sim import simulate_collective

    points = comm_table(store.root, "comm")
    rows: list[TableRow] = []
    if points.empty:
        return pd.DataFrame(rows)
    points["realtime"] = realtime_rows(points)
    # unshaped sweeps are the floor under the others' predictions, not predictions
    shaped = points["cluster"].str.startswith("netns") & ~_unshaped(points["cluster"])
    floors = Floors(points)
    for p in points[shaped].to_dict("records"):
        collective = OP_TO_COLLECTIVE.get(p["op"])
        world, nbytes, framework = int(p["world"]), float(p["bytes"]), p["framework"]
        links = measured_links(store, p["run_id"], p["cluster"])
        if links is None or collective is None:
            continue
        topology = emulated_topology(links, trips=library(framework).trips(collective))
        net = NetworkTimes(
            total=simulate_collective(topology, world, collective, nbytes).time_s,
            wire=simulate_collective(emulated_topology(links, trips=0), world, collective,
                                     nbytes).time_s,
            # the wire latency that loopback did not have
            latency=simulate_collective(topology, world, collective, 1.0).time_s,
            bucket_s=links.bucket_s)
        floor, source = floors.time(framework, p["op"], world, nbytes,
                                    realtime=p["realtime"])
        predicted, bound = _combine(net, floor, source, framework)
        row = {"kind": "collective", "run_id": p["run_id"], "cluster": p["cluster"],
               "what": f"{framework}/{p['op']}", "bytes": p["bytes"], "replicas": p["world"],
               "topology": topology, "measured_s": p["time_s"], "predicted_s": predicted,
               "network_s": net.total, "wire_s": net.wire,
               "floor_s": math.nan if floor is None else floor,
               "floor_source": source, "bound": bound, "error": predicted / p["time_s"] - 1,
               # the range of the point's rounds over their median (sweeps from before
               # rounds have none): how far the measurement itself moved
               "spread_rel": p.get("spread_rel", math.nan)}
        fast = p.get("fast_s", math.nan)
        fast_floor, fast_source = floors.time(framework, p["op"], world, nbytes, "fast_s",
                                              p["realtime"])
        if isinstance(fast, float) and fast > 0 and fast_floor is not None:
            fast_predicted, _ = _combine(net, fast_floor, fast_source, framework)
            row.update({"measured_fast_s": fast, "predicted_fast_s": fast_predicted,
                        "error_fast": fast_predicted / fast - 1})
        rows.append(row)
    return pd.DataFrame(rows)


def ps_layout(row: dict[str, Any]) -> PsLayout | None:
    """A PS row's shards and placement, from what the run recorded; None where it recorded
    neither, or placed tasks as the simulator does not model (predict.placed_ps_layout)."""
    extra = row["extra"]
    shards = shard_bytes(extra)
    hosts = extra.get("task_hosts") or {}
    if not shards or not hosts:
        return None
    return placed_ps_layout(shards, {str(t): int(h) for t, h in hosts.items()})


def run_cores(store: ResultsStore, run_id: str) -> int:
    """The cores the run's emulated hosts shared (its manifest), else this machine's: a
    validation re-run elsewhere predicts the run as it was, not as this machine would be."""
    cores = ((store.manifest(run_id) or {}).get("cpu") or {}).get("usable_cores")
    return int(cores) if cores else machine_cores()


def validate_steps(store: ResultsStore) -> pd.DataFrame:
    """End-to-end step times of multi-replica cases on emulated hosts."""
    from harness.calibrate.workload import workload_facts

    frame = load(store.root)
    ok = frame[(frame["status"] == "ok") & frame["cluster"].str.startswith("netns")]
    rows: list[TableRow] = []
    fits = comm_table(store.root, "calibration")
    points = comm_table(store.root, "comm")
    runtimes: dict[tuple[str, str, str, int], float] = {}  # runtime_overhead, computed once
    for record in ok[ok["replicas"] > 1].to_dict("records"):
        r = {str(k): v for k, v in record.items()}
        base = baseline_row(frame, r)
        links = measured_links(store, r["run_id"], r["cluster"])
        if base.empty or links is None:
            continue
        if r["strategy"] in MODEL_PARALLEL_STRATEGIES:
            row = _predict_layout_row(store, r, base.iloc[0], links, fits, frame)
            if row is not None:
                rows.append(row)
            continue
        try:
            facts = workload_facts(f"{r['workload']}:{r['size']}")
        except InputError:
            continue
        ps = None
        if "parameter_server" in r["strategy"]:
            ps = ps_layout(r)
            if ps is None:
                continue
        cores = run_cores(store, r["run_id"])
        key = (r["framework"], r["strategy"], facts.name, cores)
        if key not in runtimes:
            runtimes[key] = runtime_overhead(frame, fits, r["framework"], r["strategy"], facts,
                                             cores)
        profile = facts.at(batch=r["global_batch"] // r["replicas"])
        share, exchange = step_shares(points, fits, r["framework"], r["strategy"], links,
                                      r["cluster"], int(r["replicas"]),
                                      profile.sparse_rows_bytes(), profile.dense_bytes())
        sim = predict_step(r["framework"], r["strategy"], profile, links, int(r["replicas"]),
                           worker_compute(base.iloc[0], r["framework"], r["strategy"]),
                           fits=fits, cores=cores, ps=ps,
                           runtime_s=runtimes[key],
                           link_share=share.efficiency if share else 1.0,
                           exchange_share=exchange.efficiency if exchange else None)
        if sim is None or not sim.row.ok:
            continue
        wire = r.get("wire_bytes_per_step")
        if isinstance(wire, float) and math.isfinite(wire) and wire > 0:
            rows.append(_wire_row(r, sim, facts.gradient_bytes(), links.hosts, wire))
        measured = float(r["step_time_median_s"])
        rows.append({"kind": "step", "run_id": r["run_id"], "cluster": r["cluster"],
                     "what": f"{r['framework']}/{r['strategy']}/{r['workload']}:{r['size']}",
                     "bytes": facts.gradient_bytes(), "replicas": r["replicas"],
                     "topology": sim.topology, "model": sim.model,
                     "link_share": sim.link_share,
                     "exchange_share": sim.exchange_share, "measured_s": measured,
                     "predicted_s": sim.row.step_time_median_s,
                     "error": sim.row.step_time_median_s / measured - 1})
    return pd.DataFrame(rows)


def baseline_row(frame: pd.DataFrame, r: dict[str, Any]) -> pd.DataFrame:
    """The one-replica run a cluster run is predicted from, as the predictor takes it: the
    same run's one-replica case on that cluster, else this machine's latest one-replica run of
    the workload and framework (one emulated host is one process like it). Empty: none."""
    ok = frame[(frame["status"] == "ok") & (frame["framework"] == r["framework"])
               & (frame["workload"] == r["workload"]) & (frame["size"] == r["size"])
               & (frame["replicas"] == 1)]
    same = ok[ok["run_id"] == r["run_id"]]
    if not same.empty:
        return same
    local = ok[ok["cluster"] == "local"]
    return local.sort_values("run_id").tail(1)


def unscored_steps(store: ResultsStore) -> list[str]:
    """The multi-replica runs on emulated clusters `validate` could not score, each with why:
    no one-replica run of its workload and framework anywhere, or no probed links."""
    frame = load(store.root)
    if frame.empty or "cluster" not in frame:
        return []
    runs = frame[(frame["status"] == "ok") & frame["cluster"].str.startswith("netns")
                 & (frame["replicas"] > 1)]
    out = []
    for record in runs.to_dict("records"):
        r = {str(k): v for k, v in record.items()}
        what = (f"{r['framework']}/{r['strategy']}/{r['workload']}:{r['size']} on "
                f"{r['cluster']} (run {r['run_id']})")
        if baseline_row(frame, r).empty:
            baseline = find_baseline(str(r["framework"])).name
            out.append(f"{what} is not scored: no one-replica run of the workload in "
                       f"{r['framework']} here or in its run (`stratbench run --framework "
                       f"{r['framework']} --strategy {baseline} --workload "
                       f"{r['workload']}:{r['size']}`)")
        elif measured_links(store, r["run_id"], r["cluster"]) is None:
            out.append(f"{what} is not scored: its run recorded no probed links")
    return out


def calibration_gaps(store: ResultsStore) -> list[str]:
    """What the step predictions of ``store``'s emulated runs had to do without, one line
    each: a framework whose collectives were never swept on loopback (its library's own costs
    are left out), rank counts that were not swept (the nearest sweep stands in), clusters
    on whose links a library's all-reduce was never swept (its collectives get the probed
    rate, not their share of it), and synchronous strategies with no local run of their
    workload (their runtime's own time per step is taken as 0). A prediction without its
    calibration is not the validated one."""
    frame = load(store.root)
    if frame.empty or "cluster" not in frame:
        return []
    runs = frame[(frame["status"] == "ok") & frame["cluster"].str.startswith("netns")
                 & (frame["replicas"] > 1)
                 & ~frame["strategy"].isin(MODEL_PARALLEL_STRATEGIES)]
    fits = comm_table(store.root, "calibration")
    points = comm_table(store.root, "comm")
    gaps = []
    for framework, group in runs.groupby("framework"):
        ranks = sorted({int(r) for r in group["replicas"]})
        swept = {int(w) for w in loopback_fits(fits, str(framework)).get("world", [])}
        if not swept:
            gaps.append(f"no loopback sweep of {framework}'s collectives: its steps are predicted "
                        f"without the library's own costs (stratbench comm --framework "
                        f"{framework} --world N, N in {ranks})")
        elif missing := [r for r in ranks if r not in swept]:
            gaps.append(f"{framework}'s collectives were swept at {sorted(swept)} ranks, not "
                        f"{missing}: those runs take the nearest sweep's costs")
        collective = group[[uses_collectives(str(framework), str(s))
                            for s in group["strategy"]]]
        unswept = sorted(c for c in set(collective["cluster"])
                         if shaped_points(points, str(framework), c).empty)
        if unswept:
            gaps.append(f"{framework}'s all-reduce was never swept on the links of "
                        f"{', '.join(unswept)}: its collectives there are taken at the probed "
                        f"rate (stratbench comm --framework {framework} --cluster CLUSTER "
                        f"--world N --sizes 16MiB:16MiB)")
        gaps += _exchange_gaps(frame, points, str(framework), group)
        unrun: dict[str, list[str]] = {}
        for (strategy, workload, size), _ in group.groupby(["strategy", "workload", "size"]):
            name = f"{workload}:{size}"
            record = find_strategy(str(framework), str(strategy))
            if (record is not None and record.waits_every_step
                    and not local_runs(frame, name, str(framework), str(strategy))):
                unrun.setdefault(str(strategy), []).append(name)
        if unrun:
            cases = "; ".join(f"{s} on {', '.join(w)}" for s, w in unrun.items())
            gaps.append(f"no local run of {framework}'s {cases}: the runtime's own time per "
                        "step is taken as 0 there (stratbench run, no --cluster)")
    return gaps


def _exchange_gaps(frame: pd.DataFrame, points: pd.DataFrame, framework: str,
                   group: pd.DataFrame) -> list[str]:
    """Embedding sharding's clusters where its all-to-all was not swept near the exchange's
    size: its exchange there takes the all-reduce's share of the links instead."""
    from harness.core.units import format_bytes

    out = []
    sharded = group[[(record := find_strategy(framework, str(s))) is not None
                     and record.exchange == "embedding" for s in group["strategy"]]]
    for key, _ in sharded.groupby(["cluster", "workload", "size", "replicas",
                                   "global_batch"]):
        cluster, workload, size = (str(k) for k in key[:3])
        replicas, batch = (int(float(str(k))) for k in key[3:])
        try:
            facts = workload_facts(f"{workload}:{size}", frame)
        except InputError:
            continue
        exchange = facts.at(batch=batch // replicas).sparse_rows_bytes()
        if exchange > 0 and not swept_near(points, framework, str(cluster), "all_to_all",
                                           exchange):
            out.append(f"{framework}'s all-to-all was never swept near embedding sharding's "
                       f"{format_bytes(exchange)} exchange ({workload}:{size}) on {cluster}: "
                       f"it takes the all-reduce's share of the links there (stratbench comm "
                       f"--framework {framework} --cluster {cluster} --world {replicas} "
                       f"--sizes 256KiB:4MiB)")
    return out


def _predict_layout_row(store: ResultsStore, r: dict[str, Any], base: Any,
                        links: MeasuredLinks, fits: pd.DataFrame, measured: pd.DataFrame
                        ) -> TableRow | None:
    layout = layout_of(r)
    if layout is None:
        return None
    name = f"{r['workload']}:{r['size']}"
    cores = run_cores(store, r["run_id"])
    try:
        overhead = pass_overhead(measured, fits, name, cores)
        sim = predict_layout(name, layout, links, int(r["global_batch"]),
                             float(base["step_time_median_s"]), int(base["global_batch"]),
                             fits=fits, cores=cores, pass_overhead_s=overhead)
    except (InputError, ValueError):
        return None
    step = float(r["step_time_median_s"])
    return {"kind": "step", "run_id": r["run_id"], "cluster": r["cluster"],
            "what": f"{r['framework']}/{r['strategy']}[{layout.describe()}]/"
                    f"{r['workload']}:{r['size']}",
            "bytes": float(sim.row.bytes_per_step), "replicas": r["replicas"],
            "topology": sim.topology, "model": sim.model, "measured_s": step,
            "predicted_s": sim.row.step_time_median_s,
            "error": sim.row.step_time_median_s / step - 1,
            "bubble_predicted": sim.row.bubble_fraction, "pass_overhead_s": overhead}


def summarize(table: pd.DataFrame) -> dict[str, float]:
    """Median |error| per kind (collective, step): the figure the issue's targets name; and
    `collective_fast` on the uncontended statistic where the sweeps recorded it."""
    if table.empty:
        return {}
    out = {str(kind): float(group["error"].abs().median())
           for kind, group in table.groupby("kind")}
    if "error_fast" in table and table["error_fast"].notna().any():
        out["collective_fast"] = float(table["error_fast"].abs().median())
    return out


# The packages a validation's figures come from, whole (tests/test_layers.py checks that
# everything validate imports, directly or not, lies in them): any file added to them later
# is in the fingerprint without anyone listing it.
PREDICTION_PACKAGES = ("harness/core", "harness/sim", "harness/calibrate", "harness/predict",
                       "harness/validate", "workloads", "results")


def _prediction_sources() -> list[Path]:
    """The code a validation's figures come from: the simulator, the step rules, the fits,
    the link shares and the workloads' sizes. A change to any of it makes an earlier
    validation stale."""
    root = Path(__file__).resolve().parent.parent.parent
    files: list[Path] = []
    for package in PREDICTION_PACKAGES:
        files += sorted((root / package).rglob("*.py"))
    return [f for f in files if f.is_file()]


def _holds_only_validations(run: Path) -> bool:
    return all(child.name in (MANIFEST, VALIDATION_TABLE) or child.name.startswith(".")
               for child in run.iterdir())


def inputs_fingerprint(root: Path | str) -> str:
    """What `validate` reads: every stored file but earlier validations (name, size, mtime),
    and the prediction code's text. Equal fingerprints give the same table, so it is reused."""
    digest = hashlib.sha256()
    runs = Path(root) / "runs"
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not run.is_dir() or _holds_only_validations(run):
            continue
        for path in sorted(run.rglob("*")):
            rel = path.relative_to(runs)
            if (not path.is_file() or path.name.startswith(".")
                    or VALIDATION_TABLE in rel.parts[1:-1]):
                continue
            stat = path.stat()
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    for source in _prediction_sources():
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def cached_validation(store: ResultsStore, fingerprint: str) -> tuple[str, pd.DataFrame] | None:
    """The newest stored validation (the run holding it, the table) if it was computed from
    exactly these inputs."""
    table = latest_validation(store.root)
    if table.empty or "inputs" not in table or set(table["inputs"]) != {fingerprint}:
        return None
    stored_in = str(table["stored_in_run"].iloc[0])
    return stored_in, table.drop(columns=["stored_in_run", "name"], errors="ignore")


def _wire_row(r: dict[str, Any], sim: PredictedRow, grad_bytes: float, hosts: int,
              wire: float) -> TableRow:
    """The simulator's bytes per host per step (all its transfers over the hosts: servers
    share the workers' hosts here) against what the hosts' interfaces sent."""
    predicted = float(sim.row.bytes_per_step) / hosts
    return {"kind": "wire", "run_id": r["run_id"], "cluster": r["cluster"],
            "what": f"{r['framework']}/{r['strategy']}/{r['workload']}:{r['size']}",
            "bytes": grad_bytes, "replicas": r["replicas"], "topology": sim.topology,
            "model": sim.model, "measured_s": math.nan, "predicted_s": math.nan,
            "measured_bytes": wire, "predicted_bytes": predicted,
            "error": predicted / wire - 1}


def validate(store: ResultsStore) -> pd.DataFrame:
    """Every prediction with its error; `inputs` is the fingerprint it was computed from."""
    from harness.validate.memory import validate_memory

    fingerprint = inputs_fingerprint(store.root)
    parts = [t for t in (validate_comm(store), validate_steps(store),
                         validate_memory(load(store.root))) if not t.empty]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if not table.empty:
        table["inputs"] = fingerprint
    return table


def format_table(table: pd.DataFrame) -> str:
    """One line per prediction; `rounds` is the measured point's spread (the range of its
    rounds over their median), to read each error beside the noise it was measured with."""
    lines = [f"{'kind':<11}{'what':<34}{'bytes':>11}{'n':>3}{'measured ms':>13}"
             f"{'predicted ms':>14}{'error':>8}{'rounds':>8}"]
    for r in table.to_dict("records"):
        spread = r.get("spread_rel", math.nan)
        if r["kind"] == "memory":  # bytes, not milliseconds
            measured = f"{r['measured_bytes'] / 1e6:>10.0f} MB"
            predicted = f"{r['predicted_bytes'] / 1e6:>11.0f} MB"
        elif r["kind"] == "wire":  # bytes per host per step
            measured = f"{r['measured_bytes'] / 1e3:>10.0f} kB"
            predicted = f"{r['predicted_bytes'] / 1e3:>11.0f} kB"
        else:
            measured, predicted = f"{r['measured_s'] * 1e3:>13.2f}", \
                f"{r['predicted_s'] * 1e3:>14.2f}"
        lines.append(f"{r['kind']:<11}{str(r['what'])[:33]:<34}{int(r['bytes']):>11}"
                     f"{int(r['replicas']):>3}{measured}{predicted}{r['error']:>+8.0%}"
                     + (f"{spread:>8.0%}" if isinstance(spread, float) and spread >= 0 else ""))
    for kind, err in summarize(table).items():
        lines.append(f"median |error| {kind}: {err:.1%}" if not math.isnan(err) else "")
    if "spread_rel" in table and table["spread_rel"].notna().any():
        lines.append(f"median spread of the measured collectives' rounds: "
                     f"{table['spread_rel'].median():.1%}")
    if "floor_source" in table:
        for source, group in table.dropna(subset=["floor_source"]).groupby("floor_source"):
            lines.append(f"collectives with a floor from {source}: {len(group)} points, "
                         f"median |error| {group['error'].abs().median():.1%}")
    return "\n".join(lines)
