"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, no fetches),
a pure function of the stored results. Rendered with jinja2, autoescape on: every string that
comes from results is escaped; charts are built by ``reports.plots`` which escapes its text.

It leads with the verdict (``reports.verdict``): per workload the pick, why, how sure and the
runner-up, then the device-count curves; every table follows, collapsed, so the page a reader
scrolls is the answer and the evidence is one click away.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypedDict, cast

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from harness.core.strategies import WEIGHT_TOLERANCE
from harness.core.units import finite_number
from harness.recommend.decide import run_name
from harness.recommend.records import Answer, Recommendation, Verdict
from harness.sim.rows import Scalar
from reports import history as hist
from reports import verdict as vd
from reports.plots import Series, chart

if TYPE_CHECKING:
    from harness.core.project import Project
    from harness.recommend.nightly import Card

CROSSOVER_WORKERS = (2, 4, 8, 16, 32, 64)
CROSSOVER_BANDWIDTHS_BITS = (1e8, 4e8, 1e9, 1e10, 2.5e10, 1e11)
CROSSOVER_STRATEGIES = ("allreduce_ring", "parameter_server")
DEFAULT_CROSSOVER_WORKLOADS = ("mlp:M", "recsys:S")
CROSSOVER_FIXED_WORKERS = 8
CROSSOVER_FIXED_BITS = 1e10
CROSSOVER_COMPUTE_S = 0.02


#: a cell of a results table as the template reads it (a run's ``extra``: its JSON object)
Cell = Scalar | dict[str, Scalar]
Row = dict[str, Cell]


def _env() -> Environment:
    env = Environment(loader=PackageLoader("reports", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["num"] = _num
    env.filters["ms"] = lambda v: _num(v * 1e3 if finite_number(v) else v)
    env.filters["pct"] = lambda v: f"{v:+.0%}" if finite_number(v) else "-"
    env.filters["pct0"] = lambda v: f"{v:.0%}" if finite_number(v) else "-"
    env.filters["margin"] = lambda v: (f"{v:+.1%}" if abs(v) < 0.1 else f"{v:+.0%}"
                                       ) if finite_number(v) else "-"
    env.filters["duration"] = _duration
    env.filters["usd"] = lambda v: vd.usd(v) if finite_number(v) else "-"
    env.filters["bytes"] = _bytes
    return env


def _num(v: Any) -> str:
    if not finite_number(v):
        return "-" if v is None or isinstance(v, float) else str(v)
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _duration(v: Any) -> str:
    from harness.core.units import format_duration

    return format_duration(v) if finite_number(v) else "-"


def _bytes(v: Any) -> str:
    if not finite_number(v):
        return "-"
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def _records(frame: pd.DataFrame) -> list[Row]:
    if frame is None or frame.empty:
        return []
    return [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]


def _name(w: Any, s: Any) -> str:
    from harness.recommend.recommender import workload_name

    return workload_name(str(w), s)


class RecommendationContext(TypedDict):
    """What the report's template reads of the recommender's answer."""

    groups: list[Group]
    rec_error: str
    rec_missing: list[str]
    rec_rows: int
    verdicts: Sequence[Verdict | vd.CardView]
    leads: Sequence[Verdict | vd.CardView]
    curves: list[Markup]


class Group(TypedDict):
    workload: str
    target: str
    rows: list[Row]


class CardsContext(TypedDict):
    """A project's verdict cards, as the template reads them."""

    verdicts: list[vd.CardView]
    leads: list[vd.CardView]
    project_name: str
    project_run: str


def recommendations(root: Path) -> RecommendationContext:
    """The recommender's table grouped per (workload, target), its verdicts (the report's
    first screen) and device-count curves; an input error becomes the section's note."""
    from harness.core.errors import InputError
    from harness.recommend.recommender import recommend_from_store

    try:
        answer = recommend_from_store(root)
    except InputError as exc:
        return RecommendationContext(groups=[], rec_error=str(exc), rec_missing=[], rec_rows=0,
                                     verdicts=[], leads=[], curves=[])
    return recommendation_context(answer)


def recommendation_context(answer: Recommendation) -> RecommendationContext:
    frame = answer.table()
    groups = [Group(workload=str(w), target=str(t), rows=_records(g))
              for (w, t), g in frame.groupby(["workload", "target"], sort=False)]
    verdicts = list(answer.verdicts)
    return RecommendationContext(groups=groups, rec_error="", rec_missing=list(answer.missing),
                                 rec_rows=len(frame), verdicts=verdicts,
                                 leads=vd.leads(verdicts), curves=vd.curve_plots(answer))


def project_recommendations(root: Path, project: Project) -> RecommendationContext:
    """The recommender's tables and curves for the project's workloads on its targets, each
    under its target's goal: the report of a project shows nothing of the default suite."""
    from harness.core.errors import InputError
    from harness.recommend import nightly
    from harness.recommend.recommender import stored_inputs
    from results.store import load

    measured, tables = load(root), stored_inputs(root)
    answers: list[Answer] = []
    missing = []
    for workload, goal in project.cards():
        try:
            answers += nightly.card_answer(measured, tables, project, workload, goal).answers
        except InputError as exc:  # the card says why
            missing.append(str(exc))
    return recommendation_context(Recommendation(tuple(answers), tuple(missing)))


def project_scope(project: Project) -> tuple[set[str], set[str]]:
    """(the row names of the project's workloads as runs store them, its clusters as runs
    name them): what a project's report keeps of the measured tables."""
    from harness.core.clusters import parse_cluster
    from harness.core.project import resolved_workload
    from workloads import UserWorkload, WorkloadError, resolve_workload

    names = set()
    for text in project.workloads:
        try:
            workload = resolve_workload(resolved_workload(text, project))
        except WorkloadError:
            continue
        names.add(workload.name if isinstance(workload, UserWorkload)
                  else f"{workload.family}:{workload.size}" if workload.size else workload.name)
    return names, {parse_cluster(c).text for c in project.clusters}


def _in_scope(frame: pd.DataFrame, scope: tuple[set[str], set[str]] | None) -> pd.DataFrame:
    """The rows of ``frame`` on the scope's clusters (and of its workloads, where the frame
    names workloads); all of it without a scope."""
    from harness.calibrate.workload import row_names

    if scope is None or frame.empty:
        return frame
    names, clusters = scope
    keep = pd.Series(True, index=frame.index)
    if "cluster" in frame:
        keep &= frame["cluster"].astype(str).isin(clusters)
    if "workload" in frame and "size" in frame:
        keep &= row_names(frame).isin(names)
    return frame[keep]


def manifest_items(root: Path) -> tuple[str, list[tuple[str, str]]]:
    from results.store import ResultsStore

    store = ResultsStore(root)
    for run_id in reversed(store.run_ids()):
        m = store.manifest(run_id)
        if m:
            items = [(k, v if isinstance(v, str) else json.dumps(v, indent=1, default=str))
                     for k, v in sorted(m.items()) if k not in ("cases", "run_id")]
            return run_id, items
    return "", []


def scaling_plots(latest: pd.DataFrame) -> list[Markup]:
    ok = latest[latest["status"] == "ok"]
    plots = []
    for workload, group in ok.groupby(ok["workload"].astype(str) + ":" +
                                      ok["size"].fillna("").astype(str), sort=True):
        series = []
        for (fw, strat, cluster), g in group.groupby(["framework", "strategy", "cluster"]):
            base = group[(group["framework"] == fw) & (group["cluster"] == cluster) &
                         (group["replicas"] == 1)]
            if int(g["replicas"].min()) > 1 and not base.empty:  # lines start at the baseline
                g = pd.concat([base.head(1), g])
            g = g.sort_values("replicas")
            label = f"{fw}/{strat} {cluster}"
            series.append(Series(label, list(g["replicas"].astype(float)),
                                 list(g["throughput_samples_s"].astype(float)),
                                 tips=[f"{label}, {vd.devices(int(n))}: {t:,.0f} samples/s"
                                       for n, t in zip(g["replicas"],
                                                       g["throughput_samples_s"],
                                                       strict=True)]))
        plots.append(chart(series, title=f"{workload.rstrip(':')}: throughput against replicas",
                           xlabel="replicas", ylabel="samples/s", integer_x=True))
    return plots


def busbw_plot(comm: pd.DataFrame) -> list[Markup]:
    if comm.empty or not {"op", "bytes", "busbw_bytes_s"} <= set(comm.columns):
        return []
    series = []
    keys = [c for c in ("op", "world", "cluster") if c in comm.columns]
    for key, g in comm.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values("bytes")
        series.append(Series(" ".join(str(k) for k in key), list(g["bytes"].astype(float)),
                             list(g["busbw_bytes_s"].astype(float) / 1e6)))
    return [chart(series, title="collective bus bandwidth against message size",
                  xlabel="message bytes", ylabel="busbw MB/s", logx=True, logy=True)]


def validation_plot(validation: pd.DataFrame) -> list[Markup]:
    if validation.empty or "measured_s" not in validation:
        return []
    series = [Series(str(kind), list(g["measured_s"].astype(float)),
                     list(g["predicted_s"].astype(float)))
              for kind, g in validation.groupby("kind")]
    return [chart(series, title="simulated against measured (diagonal: exact)",
                  xlabel="measured s", ylabel="predicted s", logx=True, logy=True,
                  lines=False, diagonal=True)]


def _built_in(workload: str) -> Any:
    """The built-in workload ``workload`` names, None for any other name."""
    from workloads import WorkloadError, parse_workload

    try:
        return parse_workload(workload)
    except (WorkloadError, ValueError):
        return None


def crossover_workloads(measured: pd.DataFrame) -> list[str]:
    names = sorted({_name(w, s) for w, s in
                    zip(measured["workload"], measured["size"], strict=False)})
    names = [n for n in names if _built_in(n) is not None]
    dense = [n for n in names if not n.startswith("recsys")][:1]
    sparse = [n for n in names if n.startswith("recsys")][:1]
    chosen = dense + sparse
    for d in DEFAULT_CROSSOVER_WORKLOADS:
        if len(chosen) >= 2:
            break
        if d not in chosen and d.split(":")[0] not in {c.split(":")[0] for c in chosen}:
            chosen.append(d)
    return chosen


def _compute_s(measured: pd.DataFrame, workload: str) -> float:
    if measured.empty:
        return CROSSOVER_COMPUTE_S
    ok = measured[(measured["status"] == "ok") & (measured["replicas"] == 1)]
    ok = ok[[_name(w, s) == workload for w, s in zip(ok["workload"], ok["size"], strict=False)]]
    return float(ok["step_time_median_s"].median()) if not ok.empty else CROSSOVER_COMPUTE_S


@dataclass(frozen=True)
class CrossoverNote:
    """Where a parameter server beats the ring all-reduce for one workload."""

    workload: str
    compute_s: float
    sparsity: float
    ps_wins_at: str


def crossover(measured: pd.DataFrame) -> tuple[list[Markup], list[CrossoverNote]]:
    """All-reduce (ring) against a parameter server on a switch: step time against workers
    (at 10 Gbit/s) and against bandwidth (8 workers), simulated here (cheap)."""
    from harness.calibrate.workload import workload_facts
    from harness.sim import simulate
    from harness.sim.systems.calibration import stating

    plots: list[Markup] = []
    notes: list[CrossoverNote] = []
    for workload in crossover_workloads(measured):
        compute = _compute_s(measured, workload)
        facts = workload_facts(workload)
        measured_compute = stating(None, compute_s=compute)

        def run(n: int, bits: float, profile: Any = facts, name: str = workload,
                calibration: Any = measured_compute) -> dict[str, float]:
            rows = simulate(f"switch:n={n},bw={bits:.0f}bit,lat=30us", n,
                            list(CROSSOVER_STRATEGIES), profile, calibration, workload=name)
            return {r.strategy: float(r.step_time_median_s) for r in rows}

        by_n = {n: run(n, CROSSOVER_FIXED_BITS) for n in CROSSOVER_WORKERS}
        by_bw = {b: run(CROSSOVER_FIXED_WORKERS, b) for b in CROSSOVER_BANDWIDTHS_BITS}
        plots.append(chart([Series(s, list(map(float, by_n)), [by_n[n].get(s, math.nan)
                                                                for n in by_n])
                            for s in CROSSOVER_STRATEGIES],
                           title=f"{workload}: step time against workers at 10 Gbit/s",
                           xlabel="workers", ylabel="step s", logx=True, logy=True))
        plots.append(chart([Series(s, [b / 1e9 for b in by_bw],
                                   [by_bw[b].get(s, math.nan) for b in by_bw])
                            for s in CROSSOVER_STRATEGIES],
                           title=f"{workload}: step time against bandwidth, "
                                 f"{CROSSOVER_FIXED_WORKERS} workers",
                           xlabel="Gbit/s", ylabel="step s", logx=True, logy=True))
        wins = [n for n, t in by_n.items() if t.get("parameter_server", math.inf)
                < t.get("allreduce_ring", math.inf)]
        notes.append(CrossoverNote(workload, compute, facts.sparsity,
                                   ", ".join(str(n) for n in wins) or "none"))
    return plots, notes


def history_plots(h: pd.DataFrame) -> list[Markup]:
    if h.empty or h["run_id"].nunique() < 1:
        return []
    runs = sorted(h["run_id"].unique())
    index = {r: i + 1 for i, r in enumerate(runs)}
    plots = []
    names = h["workload"].astype(str) + ":" + h["size"].fillna("").astype(str)
    for workload, group in h.groupby(names, sort=True):
        series = []
        for case_id, g in group.groupby("case_id"):
            tips = [f"{case_id}, run {index[r['run_id']]} ({r['run_id']}): "
                    f"{r['step_time_median_s'] * 1e3:.4g} ms (95% CI "
                    f"{r['step_time_ci95_low_s'] * 1e3:.4g}-{r['step_time_ci95_high_s'] * 1e3:.4g}"
                    f"), {r['verdict']}" for r in g.to_dict("records")]
            series.append(Series(
                str(case_id).split("/", 1)[-1] if "/" in str(case_id) else str(case_id),
                [float(index[r]) for r in g["run_id"]],
                list(g["step_time_median_s"].astype(float)),
                lows=list(g["step_time_ci95_low_s"].astype(float)),
                highs=list(g["step_time_ci95_high_s"].astype(float)),
                flags=list(g["verdict"] == "regression"), tips=tips))
        plots.append(chart(series, title=f"{workload.rstrip(':')}: median step time per run "
                                         f"(red ring: regression)",
                           xlabel="run (oldest first)", ylabel="step s", integer_x=True))
    return plots


def project_cards(root: Path, project: Project) -> CardsContext:
    """A project's verdict cards, in its file's order: as the latest bench run of the project
    stored them (with what changed since the night before), else computed now."""
    from harness.recommend import nightly
    from results.store import load_table_safe

    table = load_table_safe(root, nightly.TABLE)
    mine = (table[(table["project_id"] == project.identity()) if "project_id" in table
                  else (table["project"] == project.fingerprint())]
            if not table.empty and "project" in table else pd.DataFrame())
    if not mine.empty:  # the cards of tonight's question (an edit since: none stored yet)
        mine = mine[mine["project"] == project.fingerprint()]
    if not mine.empty:
        latest = mine[mine["run_id"] == mine["run_id"].max()].sort_values("position")
        cards = [cast("Card", r) for r in latest.to_dict("records")]
        stored = str(latest["run_id"].iloc[0])
    else:
        cards, stored = nightly.project_verdicts(root, project), ""
    out = [vd.CardView.of(c) for c in cards]
    return CardsContext(verdicts=out, leads=out, project_name=project.name,
                        project_run=stored)


def dense_baseline_note(row: Row, records: list[Row]) -> str:
    """What a multi-replica run of an embedding model is measured against, where its run's
    one-device baseline updated every table row each step (runs from before the sparse
    baseline, or a framework's that does): its efficiency would look far better than
    against the touched-rows training a user runs on one device (recsys:L, torch: 604 ms
    dense against 8.8 ms sparse)."""
    if int(cast(float, row.get("replicas") or 1)) < 2 \
            or not _has_tables(f"{row['workload']}:{row['size']}"):
        return ""
    base = [b for b in records if b["run_id"] == row["run_id"]
            and int(cast(float, b["replicas"])) == 1
            and b["framework"] == row["framework"] and b["workload"] == row["workload"]
            and b["size"] == row["size"]]
    extra = base[0].get("extra") if base else None
    if not isinstance(extra, dict) or extra.get("updates") == "sparse rows":
        return ""
    if row["framework"] == "tf":
        return ("efficiency against TF's one_device, whose updates are sparse but whose "
                "Keras embedding layers read each table whole every step")
    return "efficiency against a dense one-device baseline (every table row updated each step)"


@functools.lru_cache(maxsize=64)
def _has_tables(workload: str) -> bool:
    from harness.calibrate.workload import workload_facts
    from harness.core.errors import InputError

    try:
        return workload_facts(workload).embedding_row_bytes > 0
    except InputError:
        return False


def build_report(root: str | os.PathLike[str], project: Project | None = None) -> str:
    """The report's HTML for the results under ``root`` (reads only); a project's verdict
    cards lead it where one is given."""
    from harness.recommend.recommender import DEFAULT_SAMPLES, validation_errors
    from harness.validate.score import latest_validation
    from results.store import load, load_table_safe

    root = Path(root)
    scope = project_scope(project) if project is not None else None
    measured = load(root)
    if not measured.empty:
        measured = _in_scope(measured[measured["source"].fillna("measured") == "measured"],
                             scope)
    latest = (measured.sort_values("run_id").groupby("case_id").tail(1)
              if not measured.empty else measured)
    comm = _in_scope(load_table_safe(root, "comm"), scope)
    validation = _in_scope(latest_validation(root), scope)
    if project is not None:
        rec = {**project_recommendations(root, project), **project_cards(root, project)}
    else:
        rec = {**recommendations(root)}
    run_id, manifest = manifest_items(root)
    h = hist.history(measured)
    # a what-if on a generic switch: the default suite's, not a project's targets
    cross_plots, cross_notes = crossover(measured) if project is None else ([], [])
    bad = latest[latest["status"] != "ok"] if not latest.empty else latest
    ok = latest[latest["status"] == "ok"] if not latest.empty else latest
    measured_records = _records(ok.sort_values(["workload", "size", "cluster", "framework",
                                                "strategy", "replicas"]) if not ok.empty
                                else ok)
    for r in measured_records:  # a synchronous run that did not train as one device did
        extra = r.get("extra")
        r["weights_mismatch"] = isinstance(extra, dict) and extra.get("weights_match") is False
        r["baseline_note"] = dense_baseline_note(r, measured_records)
    context = {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "root": str(root), **rec, "samples": DEFAULT_SAMPLES,
        "brief": vd.brief, "source_text": vd.source_text, "run_name": run_name,
        "manifest_run": run_id, "manifest": manifest,
        "measured": measured_records,
        "mismatches": [r for r in measured_records if r["weights_mismatch"]],
        "weight_tolerance": WEIGHT_TOLERANCE,
        "scaling_plots": scaling_plots(latest) if not latest.empty else [],
        "comm_plots": busbw_plot(comm), "comm_points": len(comm),
        "validation": _records(validation),
        "validation_errors": validation_errors(validation),
        "validation_plots": validation_plot(validation),
        "crossover_plots": cross_plots, "crossover_notes": cross_notes,
        "crossover_strategies": ", ".join(CROSSOVER_STRATEGIES),
        "history": _records(h), "history_plots": history_plots(h),
        "regressions": _records(hist.regressions(h)), "rule": hist.RULE,
        "runs": sorted(measured["run_id"].unique()) if not measured.empty else [],
        "bad": _records(bad),
    }
    return _env().get_template("report.html").render(**context)


def write_report(root: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 project: Project | None = None) -> Path:
    """Build the report and write it atomically; default ``<root>/report.html``."""
    from results.store import write_atomic

    path = Path(out) if out else Path(root) / "report.html"
    body = build_report(root, project).encode("utf-8")
    def write(fh: IO[bytes]) -> None:
        fh.write(body)

    write_atomic(path, write)
    return path
