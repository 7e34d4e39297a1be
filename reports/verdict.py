"""The verdict the report leads with: per workload and target, the pick, why, how sure, and
the runner-up; and the device-count curve behind it.

``harness.recommend.recommender.recommend()`` puts both in ``frame.attrs``: ``verdicts``
(one dict per workload and target) and ``sweep`` (one dict per workload, target, strategy and
device count).
Frames without them (a recommender from before these attrs) still get a verdict, derived here
from ranks 1 and 2 of each (workload, target) group of the table, and no curve: the report
must never lose its first screen because the data interface moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
from markupsafe import Markup

from harness.core.units import format_count, format_usd
from harness.recommend.decide import sureness
from reports.plots import Series, chart

PICK_KEYS = ("framework", "strategy", "replicas", "train_time_s", "cost_usd", "step_time_s",
             "throughput_samples_s", "scaling_efficiency", "source", "validation_error",
             "reason", "runs_as")
TEXT_KEYS = ("framework", "strategy", "source", "reason", "runs_as")


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _ok(v: float) -> bool:
    return math.isfinite(v)


def _flag(v: Any) -> bool:
    """A bool field; a missing one (None, NaN: truthy as a float) is False."""
    return not isinstance(v, float) and bool(v)


def text(v: Any) -> str:
    """A string field; None and NaN (pandas' missing) become ''."""
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else str(v)


def _pick(p: Any) -> dict[str, Any] | None:
    """A pick or runner-up with every key present and plain Python types (NaN if unknown)."""
    if not isinstance(p, dict):
        return None
    out: dict[str, Any] = {k: (text(p.get(k)) if k in TEXT_KEYS else _float(p.get(k)))
                           for k in PICK_KEYS}
    reps = out["replicas"]
    out["replicas"] = int(reps) if _ok(reps) else 0
    return out


def duration(seconds: float) -> str:
    from harness.core.units import format_duration

    return format_duration(seconds) if _ok(seconds) else "-"


def usd(v: float) -> str:
    """Dollars and cents; a cost under a cent says so rather than '$0.00'."""
    return format_usd(v) if _ok(v) else ""


def devices(n: int) -> str:
    return f"{n} device{'' if n == 1 else 's'}"


def run_name(p: dict[str, Any]) -> str:
    """What a user runs for a candidate (``harness.recommend.decide.run_name``)."""
    from harness.recommend.decide import run_name as named

    return named(p)


def brief(p: dict[str, Any] | None) -> str:
    """'torch/ddp on 8 devices: 2.1 h, $51.20': a pick in one breath."""
    if p is None:
        return "none"
    cost = usd(p["cost_usd"])
    return (f"{p['framework']}/{p['strategy']} on {devices(p['replicas'])}: "
            f"{duration(p['train_time_s'])}{', ' + cost if cost else ''}")


def source_text(p: dict[str, Any] | None) -> str:
    """Where a figure comes from, with the simulator's validation error where it has one."""
    if p is None:
        return ""
    err = p["validation_error"]
    if p["source"] == "simulated":
        return (f"simulated, validation error {err:.0%}" if _ok(err)
                else "simulated, not validated")
    return p["source"] or "?"


def normalize(v: dict[str, Any]) -> dict[str, Any]:
    """A verdict from ``frame.attrs['verdicts']`` with every key the template reads."""
    out: dict[str, Any] = {k: text(v.get(k)) for k in (
        "workload", "target", "status", "headline", "why", "sure", "constraint")}
    out["status"] = out["status"] or "none"
    out["margin"] = _float(v.get("margin"))
    out["pick"], out["runner_up"] = _pick(v.get("pick")), _pick(v.get("runner_up"))
    return out


def _usable(r: dict[str, Any]) -> bool:
    t = _float(r.get("train_time_s"))
    return r.get("status") == "ok" and bool(r.get("fits", True)) and _ok(t) and t > 0


def derive(workload: str, target: str, rows: list[dict[str, Any]], samples: float
           ) -> dict[str, Any]:
    """The verdict of one (workload, target) group from its ranked rows (rank 1 the pick,
    rank 2 the runner-up), for frames whose attrs carry none."""
    usable = [r for r in sorted(rows, key=lambda r: _float(r.get("rank"))) if _usable(r)]
    pick = _pick(usable[0]) if usable else None
    runner_up = _pick(usable[1]) if len(usable) > 1 else None
    base = {"workload": workload, "target": target, "constraint": "", "pick": pick,
            "runner_up": runner_up}
    if pick is None:
        why = text(rows[0].get("reason")) if rows else "no results"
        return base | {"status": "none", "headline": f"no strategy ran and fits on {target}",
                       "why": why, "sure": "", "margin": math.nan}
    sure, margin = sureness(pick, runner_up)
    cost = usd(pick["cost_usd"])
    headline = (f"use {pick['framework']}/{pick['strategy']} on {devices(pick['replicas'])}: "
                f"{format_count(samples)} samples in {duration(pick['train_time_s'])}"
                f"{' for ' + cost if cost else ''}")
    return base | {"status": "ok", "headline": headline, "why": pick["reason"],
                   "sure": sure, "margin": margin}


def verdicts(frame: pd.DataFrame, samples: float) -> list[dict[str, Any]]:
    """One verdict per (workload, target): the recommender's where it wrote them, else
    derived from the ranked table."""
    given = frame.attrs.get("verdicts")
    if isinstance(given, list):
        return [normalize(v) for v in given if isinstance(v, dict)]
    if frame.empty:
        return []
    return [derive(str(w), str(t), [{str(k): v for k, v in r.items()}
                                    for r in g.to_dict("records")], samples)
            for (w, t), g in frame.groupby(["workload", "target"], sort=False)]


def leads(all_verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdict each workload leads with: its first target with a pick (the recommender
    lists targets as asked), else its first."""
    out: dict[str, dict[str, Any]] = {}
    for v in all_verdicts:
        if v["workload"] not in out or (out[v["workload"]]["status"] != "ok"
                                        and v["status"] == "ok"):
            out[v["workload"]] = v
    return list(out.values())


def _key(workload: Any, target: Any, p: dict[str, Any]) -> tuple[str, ...]:
    return (str(workload), str(target), str(p.get("framework")), str(p.get("strategy")),
            str(int(_float(p.get("replicas")))))


def pick_keys(frame: pd.DataFrame) -> set[tuple[str, ...]] | None:
    """The verdicts' picks as (workload, target, framework, strategy, devices); None where
    the frame has no verdicts (then the sweep's own ``picked`` flags mark the pick)."""
    given = frame.attrs.get("verdicts")
    if not isinstance(given, list):
        return None
    return {_key(v.get("workload"), v.get("target"), v["pick"]) for v in given
            if isinstance(v, dict) and v.get("status") == "ok" and isinstance(v.get("pick"), dict)}


def point_tip(r: dict[str, Any], the_pick: bool = False) -> str:
    """Hover text of one curve point: 'torch/ddp, 8 devices: 2.1 h, $51.20 (notes)'."""
    cost = usd(_float(r.get("cost_usd")))
    notes = [s for s in (
        "the pick" if the_pick else "its strategy's chosen device count"
        if _flag(r.get("picked")) else "",
        "on the time-cost Pareto front" if _flag(r.get("pareto")) else "",
        str(r.get("status")) if r.get("status") not in (None, "", "ok") else "",
        source_text(_pick(r))) if s]
    return (f"{r.get('framework')}/{r.get('strategy')}, {devices(int(_float(r['replicas'])))}: "
            f"{duration(_float(r.get('train_time_s')))}{', ' + cost if cost else ''}"
            f"{' (' + '; '.join(notes) + ')' if notes else ''}")


def _time_unit(seconds: Sequence[float]) -> tuple[str, float]:
    top = max((s for s in seconds if _ok(s)), default=0.0)
    return ("h", 3600.0) if top >= 3 * 3600 else ("min", 60.0) if top >= 180 else ("s", 1.0)


def curve_plots(frame: pd.DataFrame) -> list[Markup]:
    """Time to train against devices (log-log, x in powers of 2), one series per strategy,
    the pick ringed; one chart per (workload, target) of ``frame.attrs['sweep']``."""
    sweep = [r for r in frame.attrs.get("sweep") or [] if isinstance(r, dict)
             and _ok(_float(r.get("replicas"))) and _ok(_float(r.get("train_time_s")))
             and _float(r.get("train_time_s")) > 0]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in sweep:
        groups.setdefault((str(r.get("workload")), str(r.get("target"))), []).append(r)
    picks = pick_keys(frame)
    plots = []
    for (workload, target), rows in groups.items():
        unit, scale = _time_unit([_float(r["train_time_s"]) for r in rows])
        by_strategy: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_strategy.setdefault(f"{r.get('framework')}/{r.get('strategy')}", []).append(r)
        series = []
        for label, pts in by_strategy.items():
            pts = sorted(pts, key=lambda r: _float(r["replicas"]))
            marks = [_flag(r.get("picked")) if picks is None
                     else _key(workload, target, r) in picks for r in pts]
            series.append(Series(label, [_float(r["replicas"]) for r in pts],
                                 [_float(r["train_time_s"]) / scale for r in pts],
                                 marks=marks,
                                 tips=[point_tip(r, m) for r, m in zip(pts, marks, strict=True)]))
        plots.append(chart(series, title=f"{workload} on {target}",
                           xlabel="devices", ylabel=f"time to train, {unit}", logx=True,
                           logy=True, log2x=True))
    return plots
