"""From configurations to an answer: which strategy, on how many devices, and how sure.

A configuration (a ``Candidate``) is one strategy at one device count on one target, with its
time and cost to train. The rule, one for every target:
- with ``--budget`` and/or ``--deadline``: among the candidates that meet them, the fastest (a
  deadline alone: the cheapest that meets it);
- with neither: the fastest candidate whose scaling efficiency is at least ``min_efficiency``
  (default 50%: a device that adds less than half a device's work is money spent on waiting),
  and one device when no distributed candidate reaches it: "do not distribute".
Candidates, decisions and verdicts are frozen records; these are pure functions over them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness.core.stacks import LAYOUT_STACKS
from harness.core.units import (
    compare,
    finite_number,
    format_count,
    format_duration,
    format_fraction,
    format_usd,
    times_the,
)
from harness.measure.stats import MIN_CHANGE
from harness.recommend.records import (
    PICK_RULES,
    Candidate,
    Decision,
    Numbers,
    Option,
    Verdict,
)

NAN = float("nan")
DEFAULT_MIN_EFFICIENCY = 0.5
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



def usable(p: Candidate) -> bool:
    return (p.status == "ok" and bool(p.fits) and finite_number(p.train_time_s)
            and p.train_time_s > 0)


def meets(p: Candidate, goal: Goal) -> bool:
    if goal.budget_usd is not None and not (finite_number(p.cost_usd)
                                            and p.cost_usd <= goal.budget_usd):
        return False
    return goal.deadline_s is None or p.train_time_s <= goal.deadline_s


def efficient(p: Candidate, goal: Goal) -> bool:
    """Scaling efficiency at least the goal's; not judged where one device cannot hold the
    model (against a device that cannot train it, the ratio says nothing)."""
    eff = p.scaling_efficiency
    if not p.baseline_fits:
        return True
    return int(p.replicas) == 1 or not finite_number(eff) or eff >= goal.min_efficiency


def _cost_or_inf(p: Candidate) -> float:
    return p.cost_usd if finite_number(p.cost_usd) else math.inf


def objective(p: Candidate, goal: Goal) -> tuple[float, float]:
    cost = _cost_or_inf(p)
    if goal.deadline_s is not None and goal.budget_usd is None:
        return (cost, p.train_time_s)
    return (p.train_time_s, cost)


def runnable(p: Candidate) -> bool:
    """Something a user can run on the target's devices: a framework's strategy, or a
    simulated one that a framework strategy runs there (``runs_as``); one device always."""
    if p.framework != "sim" or p.strategy in ("single_device", "one_device"):
        return True
    return isinstance(p.runs_as, str) and bool(p.runs_as)


def run_name(p: Candidate) -> str:
    """What a user runs for a candidate: a simulated strategy by the one framework strategy
    it stands for on those devices (``torch ddp``), else its own name (a stack that runs
    many layouts, Megatron-Core or MaxText, is told apart by the layout)."""
    runs_as = p.runs_as
    if p.framework == "sim" and isinstance(runs_as, str) and runs_as \
            and " or " not in runs_as and runs_as not in LAYOUT_STACKS:
        return runs_as
    return f"{p.framework}/{p.strategy}"


def acceptable(p: Candidate, goal: Goal) -> bool:
    """Runnable, usable, within the goal's limits, and (without limits) efficient enough: a
    simulator-only row stays in the table, below the line, never the pick."""
    if not runnable(p) or not usable(p) or not meets(p, goal):
        return False
    return goal.constrained or efficient(p, goal)


def choose(points: Sequence[Candidate], goal: Goal) -> Candidate | None:
    """The best acceptable candidate, or None."""
    ok = [p for p in points if acceptable(p, goal)]
    return min(ok, key=lambda p: objective(p, goal)) if ok else None


def nearest_miss(points: Sequence[Candidate], goal: Goal) -> Candidate | None:
    """Where nothing is acceptable: the cheapest usable candidate under a budget, else the
    fastest; None if nothing is usable at all."""
    ok = [p for p in points if usable(p) and runnable(p)]
    if not ok:
        return None
    if goal.budget_usd is not None:
        return min(ok, key=lambda p: (_cost_or_inf(p), p.train_time_s))
    return min(ok, key=lambda p: p.train_time_s)


def pareto(points: Sequence[Candidate]) -> list[Candidate]:
    """The usable candidates no other usable one beats on both time and cost."""
    ok = [p for p in points if usable(p)]

    def cost(p: Candidate) -> float:
        return p.cost_usd if finite_number(p.cost_usd) else 0.0

    return [p for p in ok if not any(
        q is not p and q.train_time_s <= p.train_time_s and cost(q) <= cost(p)
        and (q.train_time_s < p.train_time_s or cost(q) < cost(p)) for q in ok)]


def best_per_strategy(points: Sequence[Candidate], goal: Goal) -> list[Candidate]:
    """Each strategy at its best device count (or its nearest miss, or its first candidate),
    ordered: acceptable first by the objective, then the misses, then the unusable."""
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for p in points:
        groups.setdefault((p.framework, p.strategy), []).append(p)
    chosen = []
    for group in groups.values():
        pick = choose(group, goal) or nearest_miss(group, goal) or max(
            group, key=lambda p: int(p.replicas))
        chosen.append(pick)

    def key(p: Candidate) -> tuple[int, tuple[float, float]]:
        if acceptable(p, goal):
            return (0, objective(p, goal))
        if usable(p):
            return (1, objective(p, goal))
        return (2, (0.0, 0.0))

    return sorted(chosen, key=key)


def _label(p: Candidate) -> str:
    """A candidate in words: what to run, on how many devices."""
    n = int(p.replicas)
    name = f"{p.framework}/{p.strategy}"
    if p.framework == "sim":
        # a user acts on a framework's strategy that runs on the target's devices; the
        # simulator's name stays beside it, as what was simulated
        real = p.runs_as
        if isinstance(real, str) and real:
            name = f"{real} (simulated as {name})"
        elif isinstance(real, str):
            kind = p.device_kind if p.device_kind is not None else "device"
            name += f" (no framework strategy runs it on {n} {kind}s)"
        name += f" [{p.layout}]" if isinstance(p.layout, str) and p.layout else ""
    return f"{name} on {n} device{'s' if n != 1 else ''}"


def _error_text(p: Candidate) -> str:
    err = p.validation_error
    if p.source == "measured":
        return "measured"
    basis = p.validation_basis
    if not (isinstance(basis, str) and basis):
        basis = "the simulator's median step error"
    return (f"{p.source}, ±{err:.0%} ({basis})" if finite_number(err)
            else f"{p.source}, not yet validated")


def sureness(pick: Candidate, runner_up: Candidate | None) -> tuple[str, float]:
    """(how sure, in words; the margin runner-up time / pick time - 1)."""
    if runner_up is None:
        return f"{_error_text(pick)}; no other strategy to compare", NAN
    margin = runner_up.train_time_s / pick.train_time_s - 1
    errors = [p.validation_error for p in (pick, runner_up) if p.source != "measured"]
    known = [e for e in errors if finite_number(e)]
    # both may be off, in opposite directions; a measured figure by run-to-run noise
    measured = any(p.source == "measured" for p in (pick, runner_up))
    noise = sum(known) + (MIN_CHANGE if measured else 0.0)
    if errors and not known:
        verdict = "no validation error to weigh it against"
    elif margin > noise:
        verdict = (f"beyond the error ({noise:.0%})" if known
                   else f"beyond run-to-run noise ({noise:.0%})")
    else:
        verdict = (f"within the error ({noise:.0%}): close, either will do" if known
                   else f"within run-to-run noise ({noise:.0%}): close, either will do")
    return (f"{_error_text(pick)}; the runner-up is {compare(1 + margin, 'slower', 'faster')}: "
            f"{verdict}"), margin


def _cost(p: Candidate) -> float:
    return float(p.cost_usd) if finite_number(p.cost_usd) else NAN


def _brief(p: Candidate) -> Option:
    """A candidate as a decision names it: what it is and the numbers that can decide."""
    efficiency = float(p.scaling_efficiency) if p.baseline_fits \
        else NAN  # against a device that cannot hold the model the ratio says nothing
    return Option(_label(p), p.framework, p.strategy, int(p.replicas), float(p.train_time_s),
                  _cost(p), efficiency)


def decided_by(pick: Candidate | None, points: Sequence[Candidate], goal: Goal) -> Decision:
    """The rule that decided, with its numbers and its baseline: what the verdict's prose is
    written from (``explain``), so that the two can never disagree.

    rules: ``no_option`` (nothing usable: ``does_not_fit`` when memory is why;
    ``only_simulated`` when only layouts no framework runs there would train it),
    ``over_limits`` (nothing meets the budget or deadline: the nearest miss against them),
    ``nothing_efficient`` (no limits, no usable one device, and every option below the
    efficiency threshold),
    ``only_one_device`` (no distributed option runs), ``slower_than_one_device`` (the fastest
    distributed option takes longer than the pick, a one-device run: the baseline, whichever
    framework's it is), ``below_efficiency`` (faster, but each added device adds less than the
    threshold against its own framework's one device), ``over_limits_faster`` (faster options
    miss the budget or deadline), ``fastest_efficient``, ``fastest_within_limits`` and
    ``cheapest_within_deadline`` (a distributed pick: the best that meets the rule)."""
    limits = Numbers(budget_usd=goal.budget_usd, deadline_s=goal.deadline_s,
                     min_efficiency=goal.min_efficiency)
    if pick is None:
        return _no_pick(points, goal, limits)
    spread = [p for p in points if usable(p) and runnable(p) and int(p.replicas) > 1]
    faster = [p for p in spread if p.train_time_s < pick.train_time_s]
    if int(pick.replicas) > 1:
        rule = ("fastest_efficient" if not goal.constrained
                else "cheapest_within_deadline" if goal.budget_usd is None
                else "fastest_within_limits")
        skipped = min(faster, key=lambda p: p.train_time_s) if faster else None
        return Decision(rule=rule, numbers=limits, option=_brief(pick),
                        skipped=None if skipped is None else _brief(skipped),
                        skipped_why=None if skipped is None else (
                            "efficiency" if not goal.constrained
                            else "cost" if meets(skipped, goal) else "limits"))
    if not spread:
        return Decision(rule="only_one_device", numbers=limits, baseline=_brief(pick))
    if faster:
        best = min(faster, key=lambda p: p.train_time_s)
        rule = ("below_efficiency" if not goal.constrained
                else "costlier_within_limits" if meets(best, goal) else "over_limits_faster")
    else:
        best = min(spread, key=lambda p: p.train_time_s)
        rule = "slower_than_one_device"
    numbers = replace(limits, time_ratio=best.train_time_s / pick.train_time_s,
                      cost_ratio=_ratio(_cost(best), _cost(pick)))
    return Decision(rule=rule, numbers=numbers, baseline=_brief(pick), option=_brief(best),
                    same_framework=best.framework == pick.framework)


def _no_pick(points: Sequence[Candidate], goal: Goal, limits: Numbers) -> Decision:
    """``decided_by`` where nothing is acceptable."""
    miss = nearest_miss(points, goal)
    simulated_only = [p for p in points if usable(p) and not runnable(p)]
    if miss is None and simulated_only:
        best = min(simulated_only, key=lambda p: p.train_time_s)
        return Decision(rule="only_simulated", numbers=limits, option=_brief(best))
    if miss is None:
        reasons = [str(p.reason or "") for p in points]
        memory = next((r for r in reasons if r.startswith("does not fit")), "")
        return Decision(rule="does_not_fit" if memory else "no_option", numbers=limits,
                        detail=memory or next((r for r in reasons if r), "no results"))
    if not goal.constrained:
        return Decision(rule="nothing_efficient", numbers=limits, option=_brief(miss))
    numbers = replace(limits, cost_over=_cost(miss) / goal.budget_usd
                      if goal.budget_usd and finite_number(_cost(miss)) else NAN,
                      time_over=miss.train_time_s / goal.deadline_s
                      if goal.deadline_s else NAN)
    return Decision(rule="over_limits", numbers=numbers, option=_brief(miss))


def explain(decision: Decision) -> str:
    """The sentence a verdict gives for ``decided_by``: its rule and its numbers, each against
    the baseline it was compared with."""
    rule, n = decision.rule, decision.numbers
    option, base = decision.option, decision.baseline
    if rule in ("does_not_fit", "no_option"):
        return decision.detail
    if rule == "only_simulated":
        assert option is not None
        return (f"only the simulator's layouts train it here, and no framework strategy runs "
                f"them on these devices: the fastest, {option.label}, would take "
                f"{format_duration(option.train_time_s)}")
    if rule == "over_limits":
        assert option is not None
        return f"{option.label} {_missed(option, n)}"
    if rule == "nothing_efficient":
        assert option is not None
        return (f"no one-device run to fall back on, and the fastest option, "
                f"{option.label}, scales at {option.scaling_efficiency:.0%} against its "
                f"framework's one device, below {n.min_efficiency:.0%}")
    if rule == "only_one_device":
        return "one device: no distributed configuration runs here"
    if rule in PICK_RULES:
        assert option is not None
        return _explain_pick(decision, option)
    assert option is not None and base is not None
    pace = compare(n.time_ratio or NAN, "slower", "faster")
    versus = "one device" if decision.same_framework else f"{base.label}, the pick,"
    text = f"the fastest distributed option, {option.label}, is {pace} than {versus}"
    if finite_number(n.cost_ratio):
        text += f" for {times_the(n.cost_ratio or NAN, 'cost')}"
    if rule == "below_efficiency":
        text += (f", at a scaling efficiency of {option.scaling_efficiency:.0%} against "
                 f"{option.framework}'s own one device, below {n.min_efficiency:.0%}")
    elif rule == "over_limits_faster":
        text += f", but {_missed(option, n)}"
    elif rule == "costlier_within_limits":
        text += f"; one device is the cheapest that meets the {_limits_text(n)}"
    elif finite_number(option.scaling_efficiency) and not decision.same_framework:
        text += (f"; against {option.framework}'s own one device its scaling efficiency "
                 f"is {option.scaling_efficiency:.0%}")
    return text.rstrip(",")


def _explain_pick(decision: Decision, option: Option) -> str:
    """``explain`` for a distributed pick: the rule it met, and the faster option it passed
    over and why."""
    rule, n, skipped, why = decision.rule, decision.numbers, decision.skipped, \
        decision.skipped_why
    eff = option.scaling_efficiency
    if rule == "fastest_efficient":
        text = (f"the fastest option at a scaling efficiency of at least "
                f"{n.min_efficiency:.0%} ({eff:.0%} against its framework's one device)"
                if finite_number(eff) else
                "the fastest option (one device cannot hold the model, so no scaling "
                "efficiency is judged)")
    else:
        text = (f"the {'fastest' if rule == 'fastest_within_limits' else 'cheapest'} "
                f"option that meets the {_limits_text(n)}")
    if skipped is not None:
        ratio = option.train_time_s / skipped.train_time_s
        dearer = _ratio(skipped.cost_usd, option.cost_usd)
        against = (f"its scaling efficiency is {skipped.scaling_efficiency:.0%}, below "
                   f"{n.min_efficiency:.0%}" if why == "efficiency"
                   else f"costs {times_the(dearer, 'cost')}" if why == "cost"
                   else _missed(skipped, n))
        text += f"; {skipped.label} is {compare(ratio, 'faster', 'slower')} but {against}"
    return text


def _ratio(a: float, b: float) -> float:
    return a / b if finite_number(a) and finite_number(b) and b > 0 else NAN


def _limits_text(n: Numbers) -> str:
    parts = ([f"budget of {format_usd(n.budget_usd)}"] if n.budget_usd else []) + (
        [f"deadline of {format_duration(n.deadline_s)}"] if n.deadline_s else [])
    return " and ".join(parts)


def _missed(option: Option, n: Numbers) -> str:
    """How an option misses the limits, by how much: its cost against the budget, its time
    against the deadline (the one wording of both rules that name a miss)."""
    parts = []
    budget, deadline = n.budget_usd, n.deadline_s
    if budget and finite_number(option.cost_usd) and option.cost_usd > budget:
        parts.append(f"costs {format_usd(option.cost_usd)}, "
                     f"{compare(option.cost_usd / budget, 'over', 'under')} the budget of "
                     f"{format_usd(budget)}")
    elif budget and not finite_number(option.cost_usd):
        parts.append(f"has no price, so it cannot be held to the budget of "
                     f"{format_usd(budget)}")
    if deadline and option.train_time_s > deadline:
        parts.append(f"takes {format_duration(option.train_time_s)}, "
                     f"{compare(option.train_time_s / deadline, 'past', 'before')} the "
                     f"deadline of {format_duration(deadline)}")
    return " and ".join(parts) or "does not meet the limits"


def verdict(workload: str, target: str, ranked: Sequence[Candidate],
            points: Sequence[Candidate], goal: Goal) -> Verdict:
    """The answer for one workload on one target, as the report and the terminal show it;
    its ``why`` is written from its ``decided_by``."""
    pick = next((p for p in ranked if acceptable(p, goal)), None)
    decision = decided_by(pick, points, goal)
    said = functools.partial(Verdict, workload=workload, target=target,
                             constraint=goal.describe(), decided_by=decision)
    if pick is None:
        miss = nearest_miss(points, goal)
        if miss is None:
            return said(status="none", headline="no strategy can train it here",
                        why=explain(decision))
        return said(
            status="over_budget", pick=miss,
            headline=(f"nothing meets the {goal.describe()}: the nearest is {_label(miss)}, "
                      f"{format_duration(miss.train_time_s)} for {format_usd(miss.cost_usd)}"),
            why=explain(decision))
    # the runner-up is something else to run: not the pick's strategy under another of the
    # simulator's names (NCCL's ring or tree is torch ddp either way)
    others = [p for p in ranked if p is not pick and acceptable(p, goal)
              and (p.framework, p.strategy) != (pick.framework, pick.strategy)
              and run_name(p) != run_name(pick)]
    runner_up = others[0] if others else None
    sure, margin = sureness(pick, runner_up)
    cost = pick.cost_usd
    headline = (f"{'do not distribute: ' if int(pick.replicas) == 1 else 'use '}"
                f"{_label(pick)}: {format_count(goal.samples)} samples in "
                f"{format_duration(pick.train_time_s)}"
                + (f" for {format_usd(cost)}" if finite_number(cost) else ""))
    why = explain(decision) + _why_more(pick, points)
    if runner_up is not None:
        why += f"; next: {_label(runner_up)}, {compare(1 + margin, 'slower', 'faster')}"
    return said(status="ok", headline=headline, why=why, sure=sure, margin=margin, pick=pick,
                runner_up=runner_up)


def _why_more(pick: Candidate, points: Sequence[Candidate]) -> str:
    """What a verdict adds to its rule's sentence: the pick's own reason, a cheaper one
    device, a faster layout nothing here runs, the pick's MFU."""
    why, cost = "", pick.cost_usd
    if int(pick.replicas) > 1:
        reason = str(pick.reason or "")
        eff = pick.scaling_efficiency
        if finite_number(eff):  # the decision's sentence gave it already (why over 100% stays)
            reason = reason.replace(f"; scaling efficiency {eff:.0%}", "")
        why += f"; {reason}" if reason else ""
        single = [p for p in points if int(p.replicas) == 1 and usable(p)]
        if single and finite_number(cost) and finite_number(single[0].cost_usd) \
                and single[0].cost_usd < cost:
            why += (f"; one device is cheaper if you can wait: "
                    f"{format_duration(single[0].train_time_s)} for "
                    f"{format_usd(single[0].cost_usd)}")
    unrun = [p for p in points if usable(p) and not runnable(p)
             and p.train_time_s < pick.train_time_s]
    if unrun:  # what a stack beyond these frameworks would gain (Megatron-Core, torchtitan)
        faster = min(unrun, key=lambda p: p.train_time_s)
        why += (f"; {_label(faster)} would be "
                f"{compare(faster.train_time_s / pick.train_time_s, 'slower', 'faster')}"
                f", but nothing here runs it")
    if finite_number(pick.mfu):
        why += (f"; MFU {format_fraction(pick.mfu or NAN)} (model FLOPs over the devices' "
                f"dense bf16 peak)")
    return why
