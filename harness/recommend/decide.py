"""From configurations to an answer: which strategy, on how many devices, and how sure.

A configuration (a "point") is one strategy at one device count on one target, with its time
and cost to train. The rule, one for every target:
- with ``--budget`` and/or ``--deadline``: among the points that meet them, the fastest (a
  deadline alone: the cheapest that meets it);
- with neither: the fastest point whose scaling efficiency is at least ``min_efficiency``
  (default 50%: a device that adds less than half a device's work is money spent on waiting),
  and one device when no distributed point reaches it: "do not distribute".
Points are plain dicts (the recommender's rows); these are pure functions over them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.units import format_duration, format_usd

NAN = float("nan")
DEFAULT_MIN_EFFICIENCY = 0.5
Point = dict[str, Any]


@dataclass(frozen=True)
class Goal:
    samples: float
    budget_usd: float | None = None
    deadline_s: float | None = None
    min_efficiency: float = DEFAULT_MIN_EFFICIENCY

    @property
    def constrained(self) -> bool:
        return self.budget_usd is not None or self.deadline_s is not None

    def describe(self) -> str:
        parts = []
        if self.budget_usd is not None:
            parts.append(f"budget ${self.budget_usd:,.2f}")
        if self.deadline_s is not None:
            parts.append(f"deadline {format_duration(self.deadline_s)}")
        if not parts:
            parts.append(f"minimum scaling efficiency {self.min_efficiency:.0%}")
        return ", ".join(parts)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def usable(p: Point) -> bool:
    return (p["status"] == "ok" and bool(p.get("fits", True))
            and _finite(p.get("train_time_s")) and p["train_time_s"] > 0)


def meets(p: Point, goal: Goal) -> bool:
    if goal.budget_usd is not None and not (_finite(p.get("cost_usd"))
                                            and p["cost_usd"] <= goal.budget_usd):
        return False
    return goal.deadline_s is None or p["train_time_s"] <= goal.deadline_s


def efficient(p: Point, goal: Goal) -> bool:
    """Scaling efficiency at least the goal's; not judged where one device cannot hold the
    model (against a device that cannot train it, the ratio says nothing)."""
    eff = p.get("scaling_efficiency", NAN)
    if not p.get("baseline_fits", True):
        return True
    return int(p["replicas"]) == 1 or not _finite(eff) or eff >= goal.min_efficiency


def objective(p: Point, goal: Goal) -> tuple[float, float]:
    cost = p["cost_usd"] if _finite(p.get("cost_usd")) else math.inf
    if goal.deadline_s is not None and goal.budget_usd is None:
        return (cost, p["train_time_s"])
    return (p["train_time_s"], cost)


def acceptable(p: Point, goal: Goal) -> bool:
    """Usable, within the goal's limits, and (without limits) efficient enough."""
    if not usable(p) or not meets(p, goal):
        return False
    return goal.constrained or efficient(p, goal)


def choose(points: Sequence[Point], goal: Goal) -> Point | None:
    """The best acceptable point, or None."""
    ok = [p for p in points if acceptable(p, goal)]
    return min(ok, key=lambda p: objective(p, goal)) if ok else None


def nearest_miss(points: Sequence[Point], goal: Goal) -> Point | None:
    """Where nothing is acceptable: the cheapest usable point under a budget, else the
    fastest; None if nothing is usable at all."""
    ok = [p for p in points if usable(p)]
    if not ok:
        return None
    if goal.budget_usd is not None:
        return min(ok, key=lambda p: (p["cost_usd"] if _finite(p.get("cost_usd"))
                                      else math.inf, p["train_time_s"]))
    return min(ok, key=lambda p: p["train_time_s"])


def pareto(points: Sequence[Point]) -> list[Point]:
    """The usable points no other usable point beats on both time and cost."""
    ok = [p for p in points if usable(p)]
    front = []
    for p in ok:
        cost = p["cost_usd"] if _finite(p.get("cost_usd")) else 0.0
        dominated = any(
            q is not p and q["train_time_s"] <= p["train_time_s"]
            and (q["cost_usd"] if _finite(q.get("cost_usd")) else 0.0) <= cost
            and (q["train_time_s"] < p["train_time_s"]
                 or (q["cost_usd"] if _finite(q.get("cost_usd")) else 0.0) < cost)
            for q in ok)
        if not dominated:
            front.append(p)
    return front


def best_per_strategy(points: Sequence[Point], goal: Goal) -> list[Point]:
    """Each strategy at its best device count (or its nearest miss, or its first point),
    ordered: acceptable first by the objective, then the misses, then the unusable."""
    groups: dict[tuple[str, str], list[Point]] = {}
    for p in points:
        groups.setdefault((p["framework"], p["strategy"]), []).append(p)
    chosen = []
    for group in groups.values():
        pick = choose(group, goal) or nearest_miss(group, goal) or max(
            group, key=lambda p: int(p["replicas"]))
        chosen.append(pick)

    def key(p: Point) -> tuple[int, tuple[float, float]]:
        if acceptable(p, goal):
            return (0, objective(p, goal))
        if usable(p):
            return (1, objective(p, goal))
        return (2, (0.0, 0.0))

    return sorted(chosen, key=key)


def _label(p: Point) -> str:
    n = int(p["replicas"])
    name = f"{p['framework']}/{p['strategy']}"
    if p["framework"] == "sim":
        # a user acts on a framework's strategy that runs on the target's devices; the
        # simulator's name stays beside it, as what was simulated
        real = p.get("runs_as")
        if isinstance(real, str) and real:
            name = f"{real} (simulated as {name})"
        elif isinstance(real, str):
            name += (f" (no framework strategy runs it on {n} "
                     f"{p.get('device_kind', 'device')}s)")
        name += f" [{p['layout']}]" if isinstance(p.get("layout"), str) and p["layout"] else ""
    return f"{name} on {n} device{'s' if n != 1 else ''}"


def _summary(p: Point | None) -> dict[str, Any] | None:
    keys = ("framework", "strategy", "replicas", "train_time_s", "cost_usd", "step_time_s",
            "throughput_samples_s", "scaling_efficiency", "source", "validation_error",
            "reason", "status", "runs_as")
    return None if p is None else {k: p.get(k, NAN) for k in keys}


def _error_text(p: Point) -> str:
    err = p.get("validation_error", NAN)
    if p["source"] == "measured":
        return "measured"
    return (f"{p['source']}, ±{err:.0%} (the simulator's median step error)" if _finite(err)
            else f"{p['source']}, not yet validated")


def sureness(pick: Point, runner_up: Point | None) -> tuple[str, float]:
    """(how sure, in words; the margin runner-up time / pick time - 1)."""
    if runner_up is None:
        return f"{_error_text(pick)}; no other strategy to compare", NAN
    margin = runner_up["train_time_s"] / pick["train_time_s"] - 1
    errors = [p.get("validation_error", NAN) for p in (pick, runner_up)
              if p["source"] != "measured"]
    known = [e for e in errors if _finite(e)]
    noise = sum(known) if known else 0.0
    if errors and not known:
        verdict = "no validation error to weigh it against"
    elif margin > noise:
        verdict = (f"beyond the error ({noise:.0%})" if known else "both measured")
    else:
        verdict = f"within the error ({noise:.0%}): close, either will do"
    return (f"{_error_text(pick)}; the runner-up is {margin:.0%} slower: {verdict}"), margin


def verdict(workload: str, target: str, ranked: Sequence[Point], points: Sequence[Point],
            goal: Goal) -> dict[str, Any]:
    """The answer for one workload on one target, as the report and the terminal show it."""
    base = {"workload": workload, "target": target, "constraint": goal.describe(),
            "margin": NAN, "pick": None, "runner_up": None}
    pick = ranked[0] if ranked and acceptable(ranked[0], goal) else None
    if pick is None:
        miss = nearest_miss(points, goal)
        if miss is None:
            why = ranked[0]["reason"] if ranked else "no results"
            return base | {"status": "none", "headline": "no strategy can train it here",
                           "why": why, "sure": ""}
        over = (f"{miss['cost_usd'] / goal.budget_usd - 1:.0%} over the budget"
                if goal.budget_usd and _finite(miss.get("cost_usd")) else "")
        late = (f"{miss['train_time_s'] / goal.deadline_s - 1:.0%} past the deadline"
                if goal.deadline_s and miss["train_time_s"] > goal.deadline_s else "")
        return base | {
            "status": "over_budget", "pick": _summary(miss),
            "headline": (f"nothing meets the {goal.describe()}: the nearest is {_label(miss)}, "
                         f"{format_duration(miss['train_time_s'])} for "
                         f"{format_usd(miss.get('cost_usd', NAN))}"),
            "why": "; ".join(x for x in (over, late) if x) or miss["reason"], "sure": ""}
    others = [p for p in ranked[1:] if acceptable(p, goal)
              and (p["framework"], p["strategy"]) != (pick["framework"], pick["strategy"])]
    runner_up = others[0] if others else None
    sure, margin = sureness(pick, runner_up)
    cost = pick.get("cost_usd", NAN)
    headline = (f"{'do not distribute: ' if int(pick['replicas']) == 1 else 'use '}"
                f"{_label(pick)}: {goal.samples:.3g} samples in "
                f"{format_duration(pick['train_time_s'])}"
                + (f" for {format_usd(cost)}" if _finite(cost) else ""))
    why = pick["reason"]
    if int(pick["replicas"]) == 1:
        why = _why_not_distribute(pick, points, goal) or why
    else:
        single = [p for p in points if int(p["replicas"]) == 1 and usable(p)]
        if single and _finite(cost) and _finite(single[0].get("cost_usd")) \
                and single[0]["cost_usd"] < cost:
            why += (f"; one device is cheaper if you can wait: "
                    f"{format_duration(single[0]['train_time_s'])} for "
                    f"{format_usd(single[0]['cost_usd'])}")
    if runner_up is not None:
        why += f"; next: {_label(runner_up)}, {margin:.0%} slower"
    return base | {"status": "ok", "headline": headline, "why": why, "sure": sure,
                   "margin": margin, "pick": _summary(pick), "runner_up": _summary(runner_up)}


def _why_not_distribute(single: Point, points: Sequence[Point], goal: Goal) -> str:
    spread = [p for p in points if usable(p) and int(p["replicas"]) > 1]
    if not spread:
        return "one device: no distributed configuration could run"
    best = min(spread, key=lambda p: p["train_time_s"])
    speedup = single["train_time_s"] / best["train_time_s"]
    eff = best.get("scaling_efficiency", NAN)
    pace = (f"is only {speedup:.2g}x faster" if speedup >= 1
            else f"is {1 / speedup:.2g}x slower than one device")
    text = (f"the fastest distributed option, {_label(best)}, {pace}"
            + (f" (scaling efficiency {eff:.0%}, below {goal.min_efficiency:.0%})"
               if _finite(eff) else ""))
    if _finite(best.get("cost_usd")) and _finite(single.get("cost_usd")) \
            and single["cost_usd"] > 0:
        text += f" for {best['cost_usd'] / single['cost_usd']:.2g}x the cost"
    return text
