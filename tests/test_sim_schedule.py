"""Every schedule, executed on numbers, is the collective it claims to be."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.network.engine import run_collective
from harness.sim.schedules.collectives import (
    all_to_all,
    binary_tree_allreduce,
    binomial_broadcast,
    double_binary_tree_allreduce,
    halving_doubling_allreduce,
    inorder_tree,
    multidim_allreduce,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
    tree_broadcast,
)
from harness.sim.schedules.ps import central_storage, ps_sync
from harness.sim.schedules.schedule import (
    Schedule,
    ScheduleError,
    chunk_bounds,
    execute,
    parallel,
    pipelined,
    step,
)
from harness.sim.systems.spec import parse_topology

FAST = settings(max_examples=int(os.environ.get("SIM_EXAMPLES", "40")), deadline=None)


def _data(rows: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, n))


@st.composite
def allreduce_schedules(draw: st.DrawFn) -> Schedule:
    kind = draw(st.sampled_from(["ring", "hd", "binary_tree", "double_tree", "multidim",
                                 "pipelined", "ps_dedicated", "ps_colocated", "ps_unequal",
                                 "central"]))
    p = draw(st.integers(1, 20))
    if kind == "ring":
        return ring_allreduce(p, order=draw(st.permutations(range(p))))
    if kind == "hd":
        return halving_doubling_allreduce(p)
    if kind == "binary_tree":
        return binary_tree_allreduce(p, draw(st.integers(1, 9)))
    if kind == "double_tree":
        return double_binary_tree_allreduce(p, draw(st.integers(1, 9)))
    if kind in ("multidim", "pipelined"):
        dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        s = multidim_allreduce(dims)
        return pipelined(s, draw(st.integers(1, 3))) if kind == "pipelined" else s
    if kind == "ps_dedicated":
        return ps_sync(p, draw(st.integers(1, 6)), colocated=False)
    if kind == "ps_colocated":
        return ps_sync(p, draw(st.integers(1, p)), colocated=True)
    if kind == "ps_unequal":
        weights = draw(st.lists(st.floats(0.01, 100), min_size=1, max_size=min(p, 5)))
        return ps_sync(p, len(weights), colocated=draw(st.booleans()), weights=weights)
    return central_storage(p)


@FAST
@given(allreduce_schedules(), st.integers(1, 40), st.integers(0, 2**31))
def test_allreduce_schedules_equal_the_direct_reduction(schedule, n, seed):
    x = _data(schedule.contributors, n, seed)
    out = execute(schedule, x)
    assert np.allclose(out[: schedule.contributors], x.sum(axis=0))
    mean = execute(schedule, x, op="mean")
    assert np.allclose(mean[: schedule.contributors], x.mean(axis=0))


@FAST
@given(st.integers(1, 20), st.integers(1, 40), st.integers(0, 2**31), st.data())
def test_reduce_scatter_and_all_gather_match_their_definitions(p, n, seed, data):
    order = data.draw(st.permutations(range(p)))
    x = _data(p, n, seed)
    bounds = chunk_bounds(n, p)
    rs = ring_reduce_scatter(p, order)
    out = execute(rs, x)
    assert rs.owner is not None
    for c in range(p):
        a, b = bounds[c], bounds[c + 1]
        assert np.allclose(out[rs.owner[c], a:b], x[:, a:b].sum(axis=0))
    ag = ring_all_gather(p, order)
    out = execute(ag, x)
    assert ag.owner is not None
    expected = np.concatenate([x[ag.owner[c], bounds[c]:bounds[c + 1]] for c in range(p)])
    assert np.allclose(out, expected)


@FAST
@given(st.integers(1, 20), st.integers(1, 40), st.integers(1, 8), st.data())
def test_broadcast_gives_everyone_the_roots_data(p, n, chunks, data):
    root = data.draw(st.integers(0, p - 1))
    x = _data(p, n, p * n)
    assert np.allclose(execute(tree_broadcast(p, root, chunks), x), x[root])
    assert np.allclose(execute(binomial_broadcast(p, root), x), x[root])


@FAST
@given(st.integers(1, 12), st.integers(1, 4), st.integers(0, 2**31))
def test_all_to_all_hands_every_rank_the_chunk_each_rank_meant_for_it(p, width, seed):
    """Rank j ends with chunk i * p + j of every rank i (what all_to_all_single delivers);
    on the wire each rank sends all but its own chunk, (p - 1) / p of its row."""
    schedule = all_to_all(p)
    x = _data(p, p * p * width, seed)
    out = execute(schedule, x)
    for j in range(p):
        for i in range(p):
            c = slice((i * p + j) * width, (i * p + j + 1) * width)
            assert np.array_equal(out[j, c], x[i, c])
    topology = parse_topology(f"switch:n={p},bw=8Gbit,lat=0")
    result = run_collective(schedule, topology, 1e6)
    assert result.bytes_sent == pytest.approx(p * 1e6 * (p - 1) / p)
    if p > 1:  # every link carries its (p - 1) / p at once: one 1 GB/s crossing of that
        assert result.time_s == pytest.approx(1e6 * (p - 1) / p / 1e9, rel=1e-6)


@FAST
@given(st.integers(2, 8), st.data())
def test_an_unequal_all_to_all_sends_each_message_its_share(p, data):
    """Messages sized by a matrix (embedding sharding's owners answering unequal shares):
    every rank still ends with what each rank meant for it, and on a switch the step lasts
    as long as the busiest rank's own sends (or receives) take on its link."""
    weights = data.draw(st.lists(st.floats(0.05, 1.0), min_size=p, max_size=p))
    asked = np.tile(np.asarray(weights) / sum(weights), (p, 1))  # row i: rank i to each owner
    for matrix in (asked, asked.T):
        schedule = all_to_all(p, matrix)
        x = _data(p, schedule.n_chunks, 7)
        out = execute(schedule, x)
        for step_ in schedule.steps:
            for src, dst, lo, size in zip(step_.src, step_.dst, step_.lo, step_.size,
                                          strict=True):
                assert np.array_equal(out[dst, lo:lo + size], x[src, lo:lo + size])
        topology = parse_topology(f"switch:n={p},bw=8Gbit,lat=0")
        result = run_collective(schedule, topology, 1e6)
        share = matrix / matrix.sum() * p * 1e6  # bytes of each message
        np.fill_diagonal(share, 0.0)
        busiest = max(share.sum(axis=1).max(), share.sum(axis=0).max())
        assert result.bytes_sent == pytest.approx(share.sum(), rel=0.01)
        assert result.time_s == pytest.approx(busiest / 1e9, rel=0.02)
    with pytest.raises(ValueError, match="matrix"):
        all_to_all(p, np.ones((p, p + 1)))


def test_binomial_broadcast_shares_each_senders_link_as_gloo_does():
    """gloo posts all of a rank's sends at once: 6 ranks take 3 + 2 message times on a switch
    (the root's three copies, then rank 1's two), 4 ranks 2 + 1: what emulated hosts measured."""
    for p, messages in ((2, 1), (4, 3), (6, 5), (8, 6)):
        r = run_collective(binomial_broadcast(p), parse_topology(f"switch:n={p},bw=1Gbit,lat=0us"),
                           1e6)
        assert r.time_s == pytest.approx(messages * 1e6 * 8 / 1e9, rel=1e-6)


@FAST
@given(st.integers(1, 12), st.integers(1, 5), st.booleans(), st.integers(1, 30))
def test_parameter_server_aggregate_is_the_mean_of_pushed_gradients(workers, shards, colocated,
                                                                    n):
    shards = min(shards, workers) if colocated else shards
    s = ps_sync(workers, shards, colocated)
    grads = _data(workers, n, workers * 31 + n)
    out = execute(s, grads, op="mean")
    assert np.allclose(out[:workers], grads.mean(axis=0))


@FAST
@given(st.integers(2, 12), st.integers(0, 2**31), st.data())
def test_dropping_any_one_transfer_breaks_the_ring(p, seed, data):
    """The execution check can fail: a ring missing one message is not an all-reduce."""
    s = ring_allreduce(p)
    flat = [(st_, k) for st_, k in s.instances()]
    victim_step = data.draw(st.integers(0, len(flat) - 1))
    victim = data.draw(st.integers(0, len(flat[victim_step][0]) - 1))
    steps = []
    for i, (st_, k) in enumerate(flat):
        keep = np.ones(len(st_), bool)
        if i == victim_step:
            keep[victim] = False
        steps.append(step(st_.src[keep], st_.dst[keep], st_.chunks(k)[keep], st_.size[keep],
                          reduce=st_.reduce[keep]))
    broken = Schedule("broken", "allreduce", p, p, tuple(steps))
    x = _data(p, 2 * p, seed)
    assert not np.allclose(execute(broken, x), x.sum(axis=0))


def test_a_racing_schedule_is_rejected():
    racing = Schedule("race", "allreduce", 3, 1, (step([0, 1], [2, 2], 0, reduce=False),))
    with pytest.raises(ScheduleError):
        execute(racing, np.ones((3, 4)))


def test_repeat_compression_keeps_ring_schedules_small():
    s = ring_allreduce(1000)
    assert len(s.steps) == 2
    assert s.n_steps == 2 * 999
    assert s.n_transfers == 2 * 999 * 1000


def test_parallel_merges_steps_that_line_up():
    both = parallel("two", ring_allreduce(5), ring_allreduce(5))
    assert len(both.steps) == 2 and both.n_chunks == 10
    x = _data(5, 20, 1)
    assert np.allclose(execute(both, x), x.sum(axis=0))


@given(st.integers(1, 300))
def test_inorder_tree_is_a_tree_of_logarithmic_depth(n):
    parent, depth = inorder_tree(n)
    roots = [x for x in range(1, n + 1) if parent[x] == 0]
    assert len(roots) == 1
    children = np.bincount(parent[1:], minlength=n + 1)
    assert children[1:].max() <= 2
    assert depth[1:].max() == n.bit_length() - 1
