"""The verdict the report leads with: per workload and target, the pick, why, how sure, and
the runner-up; and the device-count curve behind it.

The verdicts are the recommender's own (``harness.recommend.records.Verdict``, made by
``harness.recommend.decide``): the report shows them, never derives them again. A project's
cards come from the nightly store (``CardView``: the stored verdict and what changed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from markupsafe import Markup

from harness.core.units import format_usd
from harness.recommend.nightly import Card
from harness.recommend.records import Candidate, Recommendation, SweepPoint, Verdict
from reports.plots import Series, chart

NAN = float("nan")


def _ok(v: float) -> bool:
    return math.isfinite(v)


def text(v: str | float | None) -> str:
    """A stored string field; None and NaN (pandas' missing) become ''."""
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else str(v)


def duration(seconds: float) -> str:
    from harness.core.units import format_duration

    return format_duration(seconds) if _ok(seconds) else "-"


def usd(v: float) -> str:
    """Dollars and cents; a cost under a cent says so rather than '$0.00'."""
    return format_usd(v) if _ok(v) else ""


def devices(n: int) -> str:
    return f"{n} device{'' if n == 1 else 's'}"


def brief(p: Candidate | None) -> str:
    """'torch/ddp on 8 devices: 2.1 h, $51.20': a pick in one breath."""
    if p is None:
        return "none"
    cost = usd(p.cost_usd)
    return (f"{p.framework}/{p.strategy} on {devices(p.replicas)}: "
            f"{duration(p.train_time_s)}{', ' + cost if cost else ''}")


def source_text(p: Candidate | None) -> str:
    """Where a figure comes from, with the simulator's validation error where it has one."""
    if p is None:
        return ""
    err = p.validation_error
    if p.source == "simulated":
        return (f"simulated, validation error {err:.0%}" if _ok(err)
                else "simulated, not validated")
    return p.source or "?"


@dataclass(frozen=True, kw_only=True)
class CardView:
    """A project's verdict card as the report shows it: the verdict the nightly store kept
    (its pick's numbers flattened, the runner-up in words) and what changed since the night
    before."""

    workload: str
    target: str
    status: str
    headline: str
    why: str
    sure: str
    constraint: str
    runner_up_text: str
    changed: bool
    change: str
    edit: str
    edit_change: str
    input_change: str
    margin: float = NAN
    pick: Candidate | None = None  # a stored card keeps the pick's numbers, not the pick
    runner_up: Candidate | None = None

    @classmethod
    def of(cls, card: Card) -> CardView:
        return cls(workload=text(card.get("workload")), target=text(card.get("target")),
                   status=text(card.get("status")) or "none",
                   headline=text(card.get("headline")), why=text(card.get("why")),
                   sure=text(card.get("sure")), constraint=text(card.get("constraint")),
                   runner_up_text=str(card.get("runner_up_text") or ""),
                   changed=card.get("changed") is True,
                   change=str(card.get("change") or ""), edit=text(card.get("edit")),
                   edit_change=text(card.get("edit_change")),
                   input_change=text(card.get("input_change")))


Shown = TypeVar("Shown", Verdict, CardView)


def leads(all_verdicts: Sequence[Shown]) -> list[Shown]:
    """The verdict each workload leads with: its first target with a pick (the recommender
    lists targets as asked), else its first."""
    out: dict[str, Shown] = {}
    for v in all_verdicts:
        if v.workload not in out or (out[v.workload].status != "ok" and v.status == "ok"):
            out[v.workload] = v
    return list(out.values())


def _key(workload: str, target: str, p: Candidate) -> tuple[str, ...]:
    return (workload, target, p.framework, p.strategy, str(int(p.replicas)))


def pick_keys(answer: Recommendation) -> set[tuple[str, ...]]:
    """The verdicts' picks as (workload, target, framework, strategy, devices)."""
    return {_key(v.workload, v.target, v.pick) for v in answer.verdicts
            if v.status == "ok" and v.pick is not None}


def point_tip(point: SweepPoint, the_pick: bool = False) -> str:
    """Hover text of one curve point: 'torch/ddp, 8 devices: 2.1 h, $51.20 (notes)'."""
    c = point.candidate
    cost = usd(c.cost_usd)
    notes = [s for s in (
        "the pick" if the_pick else "its strategy's chosen device count"
        if point.picked else "",
        "on the time-cost Pareto front" if point.pareto else "",
        str(c.status) if c.status not in (None, "", "ok") else "",
        source_text(c)) if s]
    return (f"{c.framework}/{c.strategy}, {devices(int(c.replicas))}: "
            f"{duration(c.train_time_s)}{', ' + cost if cost else ''}"
            f"{' (' + '; '.join(notes) + ')' if notes else ''}")


def _time_unit(seconds: Sequence[float]) -> tuple[str, float]:
    top = max((s for s in seconds if _ok(s)), default=0.0)
    return ("h", 3600.0) if top >= 3 * 3600 else ("min", 60.0) if top >= 180 else ("s", 1.0)


def curve_plots(answer: Recommendation) -> list[Markup]:
    """Time to train against devices (log-log, x in powers of 2), one series per strategy,
    the pick ringed; one chart per (workload, target) swept."""
    picks = pick_keys(answer)
    plots = []
    for a in answer.answers:
        workload, target = a.verdict.workload, a.verdict.target
        rows = [p for p in a.sweep if _ok(float(p.candidate.replicas))
                and _ok(p.candidate.train_time_s) and p.candidate.train_time_s > 0]
        if not rows:
            continue
        unit, scale = _time_unit([p.candidate.train_time_s for p in rows])
        by_strategy: dict[str, list[SweepPoint]] = {}
        for p in rows:
            by_strategy.setdefault(f"{p.candidate.framework}/{p.candidate.strategy}",
                                   []).append(p)
        series = []
        for label, pts in by_strategy.items():
            pts = sorted(pts, key=lambda p: float(p.candidate.replicas))
            marks = [_key(workload, target, p.candidate) in picks for p in pts]
            series.append(Series(label, [float(p.candidate.replicas) for p in pts],
                                 [p.candidate.train_time_s / scale for p in pts],
                                 marks=marks,
                                 tips=[point_tip(p, m) for p, m in zip(pts, marks, strict=True)]))
        plots.append(chart(series, title=f"{workload} on {target}",
                           xlabel="devices", ylabel=f"time to train, {unit}", logx=True,
                           logy=True, log2x=True))
    return plots
