"""The asynchronous parameter server reduced by symmetry (representative workers and shards)
against the explicit simulation, on clusters the explicit one can afford: within 2% on
throughput and mean staleness wherever the reduced row says it is exact, and a row that
says it is not wherever it cannot be (issue 63)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim import parse_topology
from harness.sim.network.topology import Topology
from harness.sim.step.async_ps import (
    EXPLICIT_WORKERS,
    INEXACT_NOTE,
    MEAN_FIELD_NOTE,
    representative_shards,
    representatives,
)
from harness.sim.step.async_ps import simulate_async_ps as simulate_deployed
from harness.sim.step.result import StepResult
from harness.sim.systems.calibration import Calibration, stating
from workloads.execution import Execution, PsDeployment
from workloads.spec import WorkloadSpec

SPEC = WorkloadSpec(params=25_000_000)
PROFILE = stating(None, compute_s=0.1)  # the step's costs, as a profile states them
# the servers apply each push in turn, 2% of a step: the queue the reduction times on average
UPDATING = stating(None, compute_s=0.1, optimizer_s=0.002)
# one switch with a NIC per device, leaves under an oversubscribed spine, single-device hosts
TOPOLOGIES = (
    "two_level:hosts=8,gpus=8,intra=450GB/s,inter=400Gbit,nic=per_device",
    "leaf_spine:hosts=16,gpus=4,hosts_per_leaf=4,intra=300GB/s,inter=100Gbit,oversub=4",
    "switch:n=64,bw=25Gbit,lat=5us",
)
BOUND = 0.02


def simulate_async_ps(topology: Topology, workers: int, profile: Calibration | None, *,
                      shards: int | None = None, colocated: bool = False,
                      shard_weights: list[float] | None = None, **run: object) -> StepResult:
    """The asynchronous step of ``SPEC`` at ``profile``'s costs, its servers' deployment
    given as loose options."""
    ps = PsDeployment(shards=shards, colocated=colocated,
                      shard_weights=None if shard_weights is None else tuple(shard_weights))
    return simulate_deployed(topology, workers, SPEC, profile, execution=Execution(ps=ps),
                             **run)  # type: ignore[arg-type]


def shard_setups() -> st.SearchStrategy[dict]:
    even = st.integers(1, 16).map(lambda k: {"shards": k})
    uneven = st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=2, max_size=16).map(
        lambda w: {"shard_weights": w})
    return st.one_of(even, uneven)


# derandomized: CI draws the same 14 clusters each run (a fresh clone has no example
# database), and the counterexamples found so far are the xfail test below
@settings(max_examples=14, deadline=None, derandomize=True)
@given(topology=st.sampled_from(TOPOLOGIES), workers=st.integers(17, 64),
       shards=shard_setups(), colocated=st.booleans(), stragglers=st.integers(0, 4),
       factor=st.sampled_from([2.0, 3.0]), profile=st.sampled_from([PROFILE, UPDATING]))
def test_the_reduced_simulation_agrees_with_the_explicit_one(topology, workers, shards,
                                                            colocated, stragglers, factor,
                                                            profile):
    topo = parse_topology(topology)
    k = len(shards.get("shard_weights", ())) or shards["shards"]
    if colocated and k > workers:
        return
    run = dict(shards, colocated=colocated, stragglers=stragglers, straggler_factor=factor)
    reduced = simulate_async_ps(topo, workers, profile, **run)
    explicit = simulate_async_ps(topo, workers, profile, max_explicit_workers=workers, **run)
    assert not explicit.notes or "stand for" not in explicit.notes[0]
    if MEAN_FIELD_NOTE in reduced.notes:
        assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                             rel=BOUND)
        assert reduced.staleness_mean == pytest.approx(explicit.staleness_mean, rel=BOUND)
    else:  # nothing reduced, or the row says the reduction is rounded
        assert INEXACT_NOTE in reduced.notes or reduced.notes == explicit.notes


@pytest.mark.xfail(strict=True, reason="issue 63, open: 18 workers as 9 representatives "
                   "on updating servers miss the 2% bound their row claims")
@pytest.mark.parametrize("shards", [1, 3])
def test_a_counterexample_hypothesis_found_beyond_the_bound(shards):
    """Found by the property test above in CI (pre-existing at 7e63911): 18 workers on
    dedicated servers that take 2% of a step per update; reduced throughput 4.5% low at one
    shard, mean staleness 11% high at three. Strict: it fails once the reduction holds."""
    topo = parse_topology(TOPOLOGIES[0])
    run = dict(shards=shards, stragglers=0, straggler_factor=2.0)
    reduced = simulate_async_ps(topo, 18, UPDATING, **run)
    explicit = simulate_async_ps(topo, 18, UPDATING, max_explicit_workers=18, **run)
    assert MEAN_FIELD_NOTE in reduced.notes
    assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                         rel=BOUND)
    assert reduced.staleness_mean == pytest.approx(explicit.staleness_mean, rel=BOUND)


CORNERS = [
    (TOPOLOGIES[0], {"shards": 16}),
    (TOPOLOGIES[0], {"shard_weights": [1.0] * 8 + [3.0] * 4 + [0.5] * 4}),
    (TOPOLOGIES[0], {"shards": 16, "stragglers": 4, "straggler_factor": 2.0}),
    (TOPOLOGIES[2], {"shards": 8, "colocated": True}),
    (TOPOLOGIES[2], {"shards": 16, "colocated": True}),
    (TOPOLOGIES[2], {"shards": 8, "colocated": True, "stragglers": 4,
                     "straggler_factor": 3.0}),
    (TOPOLOGIES[2], {"shard_weights": [1.0] * 8 + [3.0] * 4 + [0.5] * 4,
                     "stragglers": 4, "straggler_factor": 2.0}),
]


def timed_as_average(run: dict) -> bool:
    """Whether servers that take time to update are reduced exactly here: a push's turn is
    timed as its workers' average, which holds where alike workers' pushes land together."""
    return not (run.get("colocated") or run.get("stragglers") or "shard_weights" in run)


@pytest.mark.parametrize("topology, run, profile", [
    (topology, run, profile) for topology, run in CORNERS for profile in (PROFILE, UPDATING)
    if profile is PROFILE or timed_as_average(run)])
def test_each_kind_of_cluster_is_reduced_within_the_bound_at_64_workers(topology, run,
                                                                        profile):
    """The acceptance's corners, each reduced (16 representatives for 64 workers, 32 where
    servers are colocated) and each within 2%: dedicated and colocated servers, even and
    uneven shards, stragglers, servers that update at once or in turn."""
    topo = parse_topology(topology)
    reduced = simulate_async_ps(topo, 64, profile, **run)
    explicit = simulate_async_ps(topo, 64, profile, max_explicit_workers=64, **run)
    w = EXPLICIT_WORKERS["colocated" if run.get("colocated") else "dedicated"]
    assert f"{w} explicit workers stand for 64" in reduced.notes, reduced.notes
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
    assert representatives(2048, 16, [2048]) == (16, True)
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
    assert big.notes[:2] == ("16 explicit workers stand for 8192",
                             "2 representative shards stand for 1024")
    assert big.events <= 1.5 * small.events
    assert big.throughput_samples_s == pytest.approx(128 * small.throughput_samples_s,
                                                     rel=BOUND)


def test_servers_updating_in_turn_for_unalike_workers_are_said_to_be_inexact():
    for topology, run in CORNERS:
        if not timed_as_average(run):
            row = simulate_async_ps(parse_topology(topology), 64, UPDATING, **run)
            assert INEXACT_NOTE in row.notes, (topology, run)


def test_colocated_servers_keep_twice_the_representatives():
    """EXPLICIT_WORKERS' reason: a server's own worker pushes to it first, 1 push in W' of
    its queue; with 16 representatives that is timed far off, with 32 within the bound."""
    topo = parse_topology(TOPOLOGIES[2])
    run = {"shards": 8, "colocated": True}
    explicit = simulate_async_ps(topo, 64, UPDATING, max_explicit_workers=64, **run)

    def off(representatives: int) -> float:
        r = simulate_async_ps(topo, 64, UPDATING, max_explicit_workers=representatives, **run)
        return abs(r.throughput_samples_s / explicit.throughput_samples_s - 1)

    assert off(16) > 0.05 and off(EXPLICIT_WORKERS["colocated"]) < 0.005
    assert INEXACT_NOTE in simulate_async_ps(topo, 64, UPDATING, **run).notes
    dedicated = {"shards": 8}
    explicit = simulate_async_ps(topo, 64, UPDATING, max_explicit_workers=64, **dedicated)
    reduced = simulate_async_ps(topo, 64, UPDATING, **dedicated)
    assert reduced.throughput_samples_s == pytest.approx(explicit.throughput_samples_s,
                                                         rel=0.005)
