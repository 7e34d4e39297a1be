"""Pipeline schedules: dependencies, the bubble, and the same numbers as the unsplit model."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.errors import SpecError
from harness.sim.schedules.pipeline import (
    BACKWARD,
    FORWARD,
    Pass,
    _in_flight,
    in_flight_per_chunk,
    peak_in_flight,
    run_pipeline,
    schedule_order,
    stage_order,
)

schedules = st.sampled_from(["gpipe", "1f1b"])
times = st.floats(min_value=1e-3, max_value=10.0, allow_nan=False)


@st.composite
def pipelines(draw):
    stages = draw(st.integers(1, 6))
    microbatches = draw(st.integers(1, 12))
    return (draw(schedules), stages, microbatches,
            draw(st.lists(times, min_size=stages, max_size=stages)),
            draw(st.lists(times, min_size=stages, max_size=stages)),
            draw(st.lists(st.floats(0.0, 5.0), min_size=stages - 1, max_size=stages - 1)),
            draw(st.lists(st.floats(0.0, 5.0), min_size=stages - 1, max_size=stages - 1)))


@settings(max_examples=150, deadline=None)
@given(pipelines(), st.sampled_from([None, 1, 1.5, 2, 3]))
def test_no_stage_runs_a_pass_before_its_input_has_arrived(case, cores):
    """Also when the stages share fewer cores than they are (emulated hosts on one machine):
    then a pass takes at least its time, longer while others compute beside it."""
    schedule, stages, microbatches, fwd, bwd, send, back = case
    timing = run_pipeline(stage_order(schedule, stages, microbatches), fwd, bwd, send, back,
                          cores)
    spans = timing.spans
    assert len(spans) == 2 * stages * microbatches  # every pass once
    eps = 1e-9
    shared = cores is not None and cores < stages
    for (s, kind, m), (start, end) in spans.items():
        full_speed = fwd[s] if kind == FORWARD else bwd[s]
        if shared:
            assert end - start >= full_speed * (1 - 1e-9)
        else:
            assert end - start == pytest.approx(full_speed)
        if kind == FORWARD and s > 0:
            assert start >= spans[(s - 1, FORWARD, m)][1] + send[s - 1] - eps
        if kind == BACKWARD:
            assert start >= spans[(s, FORWARD, m)][1] - eps  # its own activations
            if s < stages - 1:
                assert start >= spans[(s + 1, BACKWARD, m)][1] + back[s] - eps
    for s in range(stages):  # a stage runs one pass at a time
        mine = sorted(v for (st_, _, _), v in spans.items() if st_ == s)
        assert all(a[1] <= b[0] + eps for a, b in itertools.pairwise(mine))


@settings(max_examples=100, deadline=None)
@given(schedules, st.integers(1, 8), st.integers(1, 32), times, times)
def test_with_free_links_and_equal_stages_the_bubble_is_s_minus_1_over_m_plus_s_minus_1(
        schedule, stages, microbatches, forward, backward):
    timing = run_pipeline(stage_order(schedule, stages, microbatches), [forward] * stages,
                          [backward] * stages, [0.0] * (stages - 1), [0.0] * (stages - 1))
    expected = (stages - 1) / (microbatches + stages - 1)
    assert timing.bubble == pytest.approx(expected, abs=1e-9)
    assert timing.makespan_s == pytest.approx((microbatches + stages - 1)
                                              * (forward + backward))


@settings(max_examples=100, deadline=None)
@given(pipelines(), st.lists(st.integers(-3, 3).filter(bool), min_size=6, max_size=6),
       st.lists(st.integers(-5, 5), min_size=12, max_size=12))
def test_run_in_the_schedules_order_a_pipeline_computes_the_unsplit_models_gradients(
        case, weights, inputs):
    """Stage s multiplies by w_s; the loss is sum over micro-batches of y^2 / 2. Running the
    passes in the order the timing puts them, each reading only what was sent to it, gives
    exactly (in rationals) the gradient of the unsplit model on the whole batch."""
    schedule, stages, microbatches, fwd, bwd, send, back = case
    w = [Fraction(x) for x in weights[:stages]]
    x = [Fraction(v) for v in inputs[:microbatches]]
    timing = run_pipeline(stage_order(schedule, stages, microbatches), fwd, bwd, send, back)
    inbox_fwd: dict[tuple[int, int], Fraction] = {(0, m): x[m] for m in range(microbatches)}
    inbox_bwd: dict[tuple[int, int], Fraction] = {}
    saved: dict[tuple[int, int], Fraction] = {}
    grads = [Fraction(0)] * stages
    for (s, kind, m), _ in sorted(timing.spans.items(), key=lambda kv: kv[1]):
        if kind == FORWARD:
            a = inbox_fwd.pop((s, m))  # KeyError: ran before its input arrived
            saved[(s, m)] = a
            out = w[s] * a
            if s + 1 < stages:
                inbox_fwd[(s + 1, m)] = out
            else:
                inbox_bwd[(s, m)] = out  # dL/dy = y
        else:
            g = inbox_bwd.pop((s, m))
            grads[s] += g * saved.pop((s, m))
            if s > 0:
                inbox_bwd[(s - 1, m)] = g * w[s]
    for s in range(stages):
        unsplit = Fraction(0)
        for xm in x:
            y = xm
            for v in w:
                y *= v
            others = Fraction(1)
            for k, v in enumerate(w):
                if k != s:
                    others *= v
            unsplit += y * others * xm
        assert grads[s] == unsplit
    assert not inbox_fwd and not inbox_bwd and not saved


@pytest.mark.parametrize("stages, microbatches", [(4, 8), (4, 2), (1, 5), (8, 8)])
def test_1f1b_holds_at_most_s_minus_stage_micro_batches_gpipe_all_of_them(stages,
                                                                          microbatches):
    one_f = stage_order("1f1b", stages, microbatches)
    gpipe = stage_order("gpipe", stages, microbatches)
    assert [peak_in_flight(o) for o in one_f] == [min(stages - s, microbatches)
                                                  for s in range(stages)]
    assert [peak_in_flight(o) for o in gpipe] == [microbatches] * stages


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 10), st.sampled_from([1, 2, 3, 5]))
def test_the_in_flight_peak_is_counted_in_a_short_schedule_as_in_the_whole(stages, groups,
                                                                          virtual):
    """The memory model counts each chunk's micro-batches in flight at the stage's peak from
    a schedule of at most 2 x stages micro-batches: the peak comes in the warm-up, so the
    whole schedule (here up to 10 x stages) gives the same counts."""
    schedule = "interleaved" if virtual > 1 else "1f1b"
    microbatches = stages * groups
    assert in_flight_per_chunk(schedule, stages, microbatches, virtual) == \
        _in_flight(schedule, stages, microbatches, virtual)


@settings(max_examples=100, deadline=None)
@given(pipelines(), st.sampled_from([1, 1.5, 2, 3]))
def test_shared_cores_do_all_the_work_never_faster_than_cores_allow(case, cores):
    schedule, stages, microbatches, fwd, bwd, send, back = case
    order = stage_order(schedule, stages, microbatches)
    alone = run_pipeline(order, fwd, bwd, send, back)
    shared = run_pipeline(order, fwd, bwd, send, back, cores)
    work = microbatches * (sum(fwd) + sum(bwd))
    assert shared.makespan_s >= alone.makespan_s * (1 - 1e-9)
    assert shared.makespan_s >= work / min(cores, stages) * (1 - 1e-9)
    if cores == 1 and not any(send) and not any(back):
        assert shared.makespan_s == pytest.approx(work)  # one core, never idle


def test_a_slow_link_queues_the_sends_and_the_bubble_grows():
    order = stage_order("1f1b", 2, 8)
    free = run_pipeline(order, [1.0, 1.0], [2.0, 2.0], [0.0], [0.0])
    slow = run_pipeline(order, [1.0, 1.0], [2.0, 2.0], [3.0], [3.0])
    assert slow.makespan_s > free.makespan_s and slow.bubble > free.bubble
    starts = sorted(start for (s, k, _), (start, _) in slow.spans.items()
                    if s == 1 and k == FORWARD)
    assert all(b - a >= 3.0 - 1e-9 for a, b in itertools.pairwise(starts))


def test_an_order_that_waits_on_itself_is_refused():
    bad = [[Pass(BACKWARD, 0), Pass(FORWARD, 0)]]
    with pytest.raises(SpecError, match="deadlocks"):
        run_pipeline(bad, [1.0], [1.0], [], [])
    with pytest.raises(SpecError, match="unknown pipeline schedule"):
        stage_order("zigzag", 2, 2)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b"]), st.integers(2, 6), st.integers(1, 12),
       st.floats(0.1, 2.0), st.floats(0.0, 3.0))
def test_a_blocking_send_never_finishes_sooner_and_costs_nothing_when_free(
        schedule, stages, microbatches, forward, send):
    """Megatron-LM 2021's synchronised point-to-point: the sender waits for each send, so
    the step is never shorter than with background sends, equal when sends are free, and
    with a GPipe pipeline of one micro-batch, every send is on the critical path either way."""
    order = stage_order(schedule, stages, microbatches)
    args = ([forward] * stages, [2 * forward] * stages, [send] * (stages - 1),
            [send] * (stages - 1))
    background = run_pipeline(order, *args)
    waited = run_pipeline(order, *args, blocking=True)
    assert waited.makespan_s >= background.makespan_s - 1e-9
    if send == 0.0 or microbatches == 1:
        assert waited.makespan_s == pytest.approx(background.makespan_s)
    if send >= 0.01 and microbatches > 1 and schedule == "gpipe":
        # the first stage's forwards now queue behind their sends
        assert waited.makespan_s > background.makespan_s


@settings(max_examples=100, deadline=None)
@given(pipelines(), st.lists(st.floats(0.0, 2.0), min_size=12, max_size=12))
def test_the_dedicated_loop_and_the_event_loop_agree_when_no_core_is_shared(case, comm):
    """Two implementations of one rule: the flat-table loop every model-parallel step runs,
    and the event loop emulated hosts on shared cores run, given a core per stage."""
    from harness.sim.schedules.pipeline import _Links, _run_shared

    schedule, stages, microbatches, forward, backward, send, back = case
    fcomm, bcomm = comm[:stages], comm[6:6 + stages]
    order = stage_order(schedule, stages, microbatches)
    dedicated = run_pipeline(order, forward, backward, send, back, None, fcomm, bcomm)
    shared = _run_shared(order, (forward, backward), (fcomm, bcomm),
                         _Links(send, back, stages), float(stages))
    scale = max(dedicated.makespan_s, 1.0)
    assert dedicated.makespan_s == pytest.approx(shared.makespan_s, abs=1e-9 * scale)
    for key, (start, end) in dedicated.spans.items():
        assert start == pytest.approx(shared.spans[key][0], abs=1e-9 * scale)
        assert end == pytest.approx(shared.spans[key][1], abs=1e-9 * scale)
    for s, passes in enumerate(order):  # each device's last pass, as both loops report it
        last = passes[-1]
        assert dedicated.last_pass_s[s] == dedicated.spans[(s, last.kind, last.microbatch)]
        assert shared.last_pass_s[s] == shared.spans[(s, last.kind, last.microbatch)]
    # without a dict entry per pass (the recommender's way): the same timing, no spans
    lean = run_pipeline(order, forward, backward, send, back, None, fcomm, bcomm,
                        keep_spans=False)
    assert lean.spans == {}
    assert ((lean.makespan_s, lean.busy_s, lean.ends_s, lean.last_pass_s)
            == (dedicated.makespan_s, dedicated.busy_s, dedicated.ends_s,
                dedicated.last_pass_s))


@settings(max_examples=40, deadline=None)
@given(pipelines(), st.floats(0.5, 2.0))
def test_a_remembered_timing_is_the_one_its_times_give(case, scale):
    """The span-free timings of a shared schedule are remembered by the schedule and every
    time it was given: asked again, the same timing; given other times, their own."""
    schedule, stages, microbatches, forward, backward, send, back = case
    shared = schedule_order(schedule, stages, microbatches)
    for f in (forward, [t * scale for t in forward]):
        lean = run_pipeline(shared, f, backward, send, back, keep_spans=False)
        fresh = run_pipeline(stage_order(schedule, stages, microbatches), f, backward, send,
                             back)
        assert run_pipeline(shared, list(f), backward, send, back, keep_spans=False) is lean
        assert ((lean.makespan_s, lean.busy_s, lean.ends_s, lean.last_pass_s)
                == (fresh.makespan_s, fresh.busy_s, fresh.ends_s, fresh.last_pass_s))
