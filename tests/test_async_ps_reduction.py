"""The asynchronous parameter server reduced by symmetry (representative workers and shards)
against the explicit simulation, on clusters the explicit one can afford: within 2% on
throughput and mean staleness wherever the reduced row says it is exact, and a row that
says it is not wherever it cannot be (issue 63)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim import parse_topology
from harness.sim.async_ps import (
    INEXACT_NOTE,
    MEAN_FIELD_NOTE,
    representative_shards,
    representatives,
    simulate_async_ps,
)
from workloads.spec import WorkloadSpec

PROFILE = WorkloadSpec(params=25_000_000, step_time_s=0.1)
# one switch with a NIC per device, leaves under an oversubscribed spine, single-device hosts
TOPOLOGIES = (
    "two_level:hosts=8,gpus=8,intra=450GB/s,inter=400Gbit,nic=per_device",
    "leaf_spine:hosts=16,gpus=4,hosts_per_leaf=4,intra=300GB/s,inter=100Gbit,oversub=4",
    "switch:n=64,bw=25Gbit,lat=5us",
)
BOUND = 0.02


def shard_setups() -> st.SearchStrategy[dict]:
    even = st.integers(1, 16).map(lambda k: {"shards": k})
    uneven = st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=2, max_size=16).map(
        lambda w: {"shard_weights": w})
    return st.one_of(even, uneven)


@settings(max_examples=14, deadline=None)
@given(topology=st.sampled_from(TOPOLOGIES), workers=st.integers(17, 64),
       shards=shard_setups(), colocated=st.booleans(), stragglers=st.integers(0, 4),
       factor=st.sampled_from([2.0, 3.0]))
def test_the_reduced_simulation_agrees_with_the_explicit_one(topology, workers, shards,
                                                            colocated, stragglers, factor):
    topo = parse_topology(topology)
    k = len(shards.get("shard_weights", ())) or shards["shards"]
    if colocated and k > workers:
        return
    run = dict(shards, colocated=colocated, stragglers=stragglers, straggler_factor=factor)
    reduced = simulate_async_ps(topo, workers, PROFILE, **run)
    explicit = simulate_async_ps(topo, workers, PROFILE, max_explicit_workers=workers, **run)
    assert not explicit.notes or "stand for" not in explicit.notes[0]
    if MEAN_FIELD_NOTE in reduced.notes:
        assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                             rel=BOUND)
        assert reduced.staleness_mean == pytest.approx(explicit.staleness_mean, rel=BOUND)
    else:  # nothing reduced, or the row says the reduction is rounded
        assert INEXACT_NOTE in reduced.notes or reduced.notes == explicit.notes


ONE_SWITCH = (TOPOLOGIES[0], TOPOLOGIES[2])


@pytest.mark.parametrize("topology, run", [
    (TOPOLOGIES[0], {"shards": 16}),
    (TOPOLOGIES[0], {"shard_weights": [1.0] * 8 + [3.0] * 4 + [0.5] * 4}),
    (TOPOLOGIES[0], {"shards": 16, "stragglers": 4, "straggler_factor": 2.0}),
    (TOPOLOGIES[2], {"shards": 8, "colocated": True}),
    (TOPOLOGIES[2], {"shards": 16, "colocated": True}),
    (TOPOLOGIES[2], {"shards": 8, "colocated": True, "stragglers": 4,
                     "straggler_factor": 3.0}),
    (TOPOLOGIES[2], {"shard_weights": [1.0] * 8 + [3.0] * 4 + [0.5] * 4,
                     "stragglers": 4, "straggler_factor": 2.0}),
])
def test_each_kind_of_cluster_is_reduced_within_the_bound_at_64_workers(topology, run):
    """The acceptance's corners, each reduced (32 representatives for 64 workers) and each
    within 2%: dedicated and colocated servers, even and uneven shards, stragglers."""
    topo = parse_topology(topology)
    reduced = simulate_async_ps(topo, 64, PROFILE, **run)
    explicit = simulate_async_ps(topo, 64, PROFILE, max_explicit_workers=64, **run)
    assert "32 explicit workers stand for 64" in reduced.notes, reduced.notes
    assert MEAN_FIELD_NOTE in reduced.notes, reduced.notes
    assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                         rel=BOUND)
    assert reduced.staleness_mean == pytest.approx(explicit.staleness_mean, rel=BOUND)


def test_where_the_reduction_cannot_be_exact_the_row_says_so():
    """Leaves under a spine, or servers beside workers on multi-device hosts."""
    leaves = parse_topology(TOPOLOGIES[1])
    assert INEXACT_NOTE in simulate_async_ps(leaves, 64, PROFILE).notes
    hosts = parse_topology("two_level:hosts=32,gpus=8,intra=450GB/s,inter=400Gbit,"
                           "nic=per_device")
    far = simulate_async_ps(hosts, 256, PROFILE, shards=32, colocated=True)
    assert INEXACT_NOTE in far.notes and MEAN_FIELD_NOTE not in far.notes


def test_representatives_reduce_every_class_by_one_whole_factor():
    assert representatives(2048, 32, [2048]) == (32, True)
    assert representatives(48, 16, [44, 4]) == (12, True)  # 11 + 1 stand for 44 + 4
    assert representatives(61, 16, [58, 3]) == (16, False)  # a prime: rounded, and says so
    assert representatives(64, 16, [64], per_host=8) == (16, True)  # 2 on each host
    groups = representative_shards([1.0] * 256, 128.0)
    assert len(groups) == 2 and {g.stands_for for g in groups} == {128.0}
    uneven = representative_shards([1.0, 3.0, 1.0, 1.0], 2.0)  # one group per weight
    assert [(g.weight, g.stands_for) for g in uneven] == [(1.5, 1.5), (1.5, 1.5), (3.0, 1.0)]


def test_two_thousand_workers_in_under_a_second_of_simulation():
    """The mean-field cost does not grow with the workers or the default shards."""
    topo = parse_topology("two_level:hosts=1024,gpus=8,intra=450GB/s,inter=400Gbit,"
                          "nic=per_device")
    small = simulate_async_ps(topo, 64, PROFILE)
    big = simulate_async_ps(topo, 8192, PROFILE)
    assert big.notes[:2] == ("32 explicit workers stand for 8192",
                             "4 representative shards stand for 1024")
    assert big.events <= 1.5 * small.events
    assert big.throughput_samples_s == pytest.approx(128 * small.throughput_samples_s,
                                                     rel=BOUND)


def test_servers_that_update_in_turn_are_where_the_reduction_is_rounded():
    """A server applies pushes one at a time; a representative's push is its workers'
    pushes in one turn (``scale`` x as long), so the queue is timed coarser than the real
    one: with updates 5% of a step, farther than the 2% bound (this test holds 5%)."""
    topo = parse_topology(TOPOLOGIES[0])
    slow_updates = WorkloadSpec(params=25_000_000, step_time_s=0.1, optimizer_s=0.005)
    reduced = simulate_async_ps(topo, 64, slow_updates, shards=8)
    explicit = simulate_async_ps(topo, 64, slow_updates, shards=8, max_explicit_workers=64)
    assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                         rel=0.05)
    assert reduced.staleness_mean == pytest.approx(explicit.staleness_mean, rel=0.05)
