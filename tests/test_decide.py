"""A verdict's prose is written from its decision: over generated candidate tables, every
``decided_by`` agrees with the table it came from, its sentence with its numbers, and every
ratio reads as people write it."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.units import compare, format_fraction, format_ratio, times_the
from harness.recommend.decide import Goal, acceptable, best_per_strategy, meets, runnable, verdict
from harness.recommend.records import Candidate, MeasuredRun, Option

FORBIDDEN = re.compile(r"(?<![\d.])1(\.0)?x\b|\d[eE][+-]?\d")
PHRASE = re.compile(r"(under 1%|\d+%|[\d,]+(?:\.\d)?x) (slower|faster)")


@pytest.mark.parametrize("ratio, words", [
    (1.04, "4% slower"), (1.004, "under 1% slower"), (1.4, "40% slower"), (1.8, "1.8x slower"),
    (6.23, "6.2x slower"), (25.0, "25x slower"), (123.0, "120x slower"),
    (1234.0, "1,200x slower"), (1 / 1.8, "1.8x faster"), (1 / 1.25, "25% faster")])
def test_ratios_read_as_people_write_them(ratio, words):
    assert compare(ratio, "slower", "faster") == words


@pytest.mark.parametrize("fraction, words", [
    (0.4, "40%"), (0.02, "2%"), (0.01, "1%"), (2.89e-4, "0.029%"), (0.0091, "0.91%"),
    (0.0, "0%"), (1.04e-7, "0.000010%")])
def test_a_small_share_is_never_read_as_nothing(fraction, words):
    assert format_fraction(fraction) == words


def test_a_ratio_is_never_1x_nor_in_e_notation():
    assert times_the(123.4, "cost") == "120x the cost"
    assert times_the(1.3, "cost") == "30% more cost"
    assert times_the(0.5, "cost") == "2.0x less cost"
    for r in (1.5, 9.96, 99.6, 1e5, 1e9):
        assert not FORBIDDEN.search(format_ratio(r)), format_ratio(r)


STRATEGIES = ("single_device", "ddp", "fsdp", "parameter_server", "central_storage",
              "pipeline")


@st.composite
def points(draw: Any) -> list[Candidate]:
    out = []
    for _ in range(draw(st.integers(1, 8))):
        framework = draw(st.sampled_from(("torch", "tf", "sim")))
        strategy = draw(st.sampled_from(STRATEGIES))
        replicas = 1 if strategy == "single_device" else draw(st.sampled_from((2, 4, 8, 16)))
        out.append(Candidate(
            framework=framework, strategy=strategy, replicas=replicas,
            status=draw(st.sampled_from(("ok", "ok", "ok", "failed"))),
            fits=draw(st.booleans() | st.just(True)),
            train_time_s=draw(st.floats(1.0, 1e6)),
            cost_usd=draw(st.floats(0.01, 1e5) | st.just(math.nan)),
            scaling_efficiency=draw(st.floats(0.0, 1.2) | st.just(math.nan)),
            runs_as=draw(st.sampled_from(("", "torch ddp"))) if framework == "sim" else None,
            source=draw(st.sampled_from(("measured", "simulated"))),
            validation_error=draw(st.floats(0.0, 0.3) | st.just(math.nan)),
            reason="its own reason"))
    keys = [(p.framework, p.strategy, p.replicas, p.train_time_s) for p in out]
    return [p for i, p in enumerate(out) if keys.index(keys[i]) == i]  # each one findable


@st.composite
def goals(draw: Any) -> Goal:
    return Goal(1e6, budget_usd=draw(st.none() | st.floats(0.1, 1e5)),
                deadline_s=draw(st.none() | st.floats(1.0, 1e6)),
                min_efficiency=draw(st.sampled_from((0.3, 0.5, 0.7))))


def _phrase_agrees(sentence: str, ratio: float) -> None:
    """The first ratio phrase of ``sentence`` says ``ratio`` (this / that), within rounding."""
    found = PHRASE.search(sentence)
    assert found, sentence
    amount, word = found.groups()
    assert word == ("slower" if ratio >= 1 else "faster"), (sentence, ratio)
    r = ratio if ratio >= 1 else 1 / ratio
    if amount == "under 1%":
        assert r < 1.01
    elif amount.endswith("%"):
        assert abs(1 + int(amount[:-1]) / 100 - r) <= 0.0051, (sentence, ratio)
    else:
        said = float(amount[:-1].replace(",", ""))
        assert abs(said - r) <= 0.05 * r + 1e-9, (sentence, ratio)


def _find(table: list[Candidate], named: Candidate | Option | None) -> Candidate:
    assert named is not None
    same = [p for p in table if (p.framework, p.strategy, p.replicas, p.train_time_s)
            == (named.framework, named.strategy, named.replicas, named.train_time_s)]
    assert same, named
    return same[0]


@settings(max_examples=300, deadline=None)
@given(points(), goals())
def test_every_decision_and_its_sentence_agree_with_the_table(table, goal):
    ranked = best_per_strategy(table, goal)
    v = verdict("w", "t", ranked, table, goal)
    text = " ".join((v.headline, v.why, v.sure))
    assert not FORBIDDEN.search(text), text
    decision = v.decided_by
    assert decision is not None
    rule, numbers = decision.rule, decision.numbers
    option = decision.option
    if v.status == "ok":
        pick = _find(table, v.pick)
        assert acceptable(pick, goal) and runnable(pick)
        if v.runner_up is not None:
            assert runnable(_find(table, v.runner_up))
        if goal.budget_usd is not None:
            assert pick.cost_usd <= goal.budget_usd
        if goal.deadline_s is not None:
            assert pick.train_time_s <= goal.deadline_s
        # a faster layout nothing here runs is named as such, never picked
        unrun = [p for p in table if p.status == "ok" and p.fits and not runnable(p)
                 and p.train_time_s < pick.train_time_s]
        assert ("but nothing here runs it" in v.why) == bool(unrun)
    if rule == "slower_than_one_device":
        chosen = _find(table, option)
        assert int(pick.replicas) == 1 and int(chosen.replicas) > 1
        assert chosen.train_time_s >= pick.train_time_s
        assert numbers.time_ratio == chosen.train_time_s / pick.train_time_s
        _phrase_agrees(v.why, numbers.time_ratio)
    elif rule in ("below_efficiency", "over_limits_faster", "costlier_within_limits"):
        chosen = _find(table, option)
        assert chosen.train_time_s < pick.train_time_s
        _phrase_agrees(v.why, numbers.time_ratio)
        if rule == "below_efficiency":
            assert chosen.scaling_efficiency < goal.min_efficiency
            assert f"{chosen.scaling_efficiency:.0%} against" in v.why
            assert f"below {goal.min_efficiency:.0%}" in v.why
        elif rule == "over_limits_faster":
            assert not meets(chosen, goal)
            assert any(f"{what} the {limit}" in v.why for what, limit in (
                ("over", "budget"), ("held to", "budget"), ("past", "deadline")))
        else:
            assert meets(chosen, goal) and goal.budget_usd is None
    elif rule in ("fastest_efficient", "fastest_within_limits", "cheapest_within_deadline"):
        assert option is not None
        assert option.label in v.headline and int(pick.replicas) > 1
        if rule == "fastest_efficient" and math.isfinite(pick.scaling_efficiency):
            assert pick.scaling_efficiency >= goal.min_efficiency
    elif rule == "over_limits":
        assert v.status == "over_budget"
        missed = _find(table, option)
        assert not meets(missed, goal)
        over_budget = (goal.budget_usd is not None and math.isfinite(missed.cost_usd)
                       and missed.cost_usd > goal.budget_usd)
        assert ("over the budget" in v.why) == over_budget, v.why
    elif rule == "nothing_efficient":
        missed = _find(table, option)
        assert missed.scaling_efficiency < goal.min_efficiency and not goal.constrained
        assert f"{missed.scaling_efficiency:.0%} against" in v.why
    elif rule in ("no_option", "does_not_fit", "only_simulated"):
        assert v.status == "none"
        assert not any(acceptable(p, goal) for p in table)
    else:
        assert rule == "only_one_device", rule
        assert not any(runnable(p) and p.status == "ok" and p.fits
                       and int(p.replicas) > 1 for p in table)


def _candidate(strategy: str, replicas: int, time: float, cost: float, efficiency: float,
               status: str = "ok") -> Candidate:
    return Candidate(framework="torch", strategy=strategy, replicas=replicas, status=status,
                     source="measured", train_time_s=time, cost_usd=cost,
                     scaling_efficiency=efficiency, reason=f"{strategy}'s reason")


@pytest.mark.parametrize("ddp_efficiency, ddp_status, budget, rule, keys, numbers", [
    (0.625, "ok", None, "fastest_efficient", ["skipped", "skipped_why"], []),
    (0.3, "ok", None, "below_efficiency", ["same_framework"], ["time_ratio", "cost_ratio"]),
    (0.625, "ok", 0.5, "over_limits", [], ["cost_over", "time_over"]),
])
def test_a_decision_as_stored_keeps_each_rules_keys_in_their_order(
        ddp_efficiency, ddp_status, budget, rule, keys, numbers):
    """The nightly store keeps ``decided_by`` as JSON (its key order included): each rule's
    keys and numbers, in the order they were always written."""
    table = [_candidate("single_device", 1, 100.0, 1.0, 1.0),
             _candidate("ddp", 2, 80.0, 1.6, ddp_efficiency, ddp_status)]
    goal = Goal(1e6, budget_usd=budget)
    v = verdict("w", "t", best_per_strategy(table, goal), table, goal)
    assert v.decided_by is not None
    stored = v.decided_by.as_dict()
    assert list(stored) == ["rule", "numbers", "baseline", "option", *keys]
    assert stored["rule"] == rule
    assert list(stored["numbers"]) == ["budget_usd", "deadline_s", "min_efficiency", *numbers]
    assert v.as_dict()["pick"] == (None if v.pick is None else v.pick.summary())


def test_a_candidate_row_has_the_columns_its_source_gives_it():
    """A table row names what a candidate has: a measured run's weight check only where a
    run gave one, a layout only where it has one, a rank once ranked."""
    plain = _candidate("ddp", 2, 80.0, 1.6, 0.6)
    row = plain.as_row()
    assert {"layout", "weights_match", "rank", "baseline_fits"}.isdisjoint(row)
    assert row["reason"] == "ddp's reason" and row["exchange"] == "allreduce"
    ran = replace(plain, measured=MeasuredRun(None, math.nan, 1e9), layout="", rank=1,
                  baseline_fits=False)
    row = ran.as_row()
    assert row["weights_match"] is None and row["measured_memory_bytes"] == 1e9
    assert row["layout"] == "" and row["rank"] == 1 and row["baseline_fits"] is False
