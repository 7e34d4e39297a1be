"""Step-time statistics: the CI covers the median, and summaries are ordered sensibly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.measure import stats


@given(st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=300))
def test_summary_is_ordered(values):
    s = stats.summarize(values)
    assert s.ci95_low_s <= s.median_s <= s.ci95_high_s
    assert s.p10_s <= s.median_s <= s.p90_s
    assert min(values) <= s.ci95_low_s and s.ci95_high_s <= max(values)


@settings(deadline=None, max_examples=5)
@given(st.integers(0, 10_000))
def test_median_ci_covers_the_true_median_about_95_percent(seed):
    rng = np.random.default_rng(seed)
    covered = 0
    trials = 400
    for _ in range(trials):
        x = rng.lognormal(mean=0.0, sigma=0.5, size=40)  # true median exp(0) = 1
        low, high = stats.median_ci(x)
        covered += low <= 1.0 <= high
    assert 0.92 <= covered / trials <= 0.995


def test_scaling_efficiency():
    assert stats.scaling_efficiency(200.0, 2, 100.0) == 1.0
    assert stats.scaling_efficiency(150.0, 2, 100.0) == 0.75
    assert math.isnan(stats.scaling_efficiency(150.0, 2, 0.0))


@given(st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=9))
def test_a_point_measured_in_rounds_is_its_median_round_and_their_range(rounds):
    point = stats.summarize_rounds(rounds)
    assert min(rounds) <= point["time_s"] <= max(rounds)
    assert point["time_s"] == pytest.approx(float(np.median(rounds)))
    assert point["spread_rel"] == pytest.approx((max(rounds) - min(rounds)) / point["time_s"])
    assert min(rounds) <= point["fast_s"] <= point["time_s"]


def test_one_slow_round_moves_the_point_by_nothing():
    assert stats.summarize_rounds([1.0, 4.0, 1.1, 0.9, 1.0])["time_s"] == 1.0


def test_the_uncontended_time_stays_with_the_fast_mode_when_the_median_flips():
    """Rounds whose iterations are 40-60% slow (4 ms scheduler waits): the medians flip
    between the modes, the lower quartiles do not."""
    medians, quartiles = [0.5, 4.0, 4.1, 0.5, 4.0], [0.45, 0.47, 0.5, 0.44, 0.46]
    point = stats.summarize_rounds(medians, quartiles)
    assert point["time_s"] == 4.0 and point["fast_s"] == 0.46
    assert stats.summarize_rounds([1.0, 2.0, 3.0, 4.0, 5.0])["fast_s"] == 2.0


def test_overlap_is_one_when_the_shorter_part_hides_and_zero_when_they_queue():
    from harness.measure.stats import overlap

    assert overlap([1.0, 1.0, 3.0], [0.5], 1.0)["measured_overlap"] == pytest.approx(1.0)
    assert overlap([1.0], [0.5], 1.5)["measured_overlap"] == pytest.approx(0.0)
    assert overlap([1.0], [0.5], 2.0)["measured_overlap"] < 0  # slower together than apart
