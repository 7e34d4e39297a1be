"""On uniform topologies the simulator reproduces the alpha-beta closed forms."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.network.engine import run_collective
from harness.sim.network.topology import Hierarchy, LinkClass, with_servers
from harness.sim.schedules import closed_forms as cf
from harness.sim.schedules.collectives import (
    binary_tree_allreduce,
    double_binary_tree_allreduce,
    halving_doubling_allreduce,
    hierarchical_allreduce,
    multidim_allreduce,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)
from harness.sim.schedules.ps import central_storage, ps_sync
from harness.sim.schedules.schedule import shard_chunks

SETTINGS = settings(max_examples=int(os.environ.get("SIM_EXAMPLES", "40")), deadline=None)
REL = 0.01  # the tolerance; in practice they agree to ~1e-12

sizes = st.floats(1e3, 1e9)
bandwidths = st.floats(1e8, 1e12)
latencies = st.floats(0.0, 1e-4)


def switch(p: int, bw: float, lat: float) -> Hierarchy:
    return Hierarchy(devices=p, per_host=1, inter=LinkClass("net", bw, lat))


@SETTINGS
@given(st.integers(2, 64), sizes, bandwidths, latencies)
def test_ring_allreduce(p, S, bw, lat):
    t = run_collective(ring_allreduce(p), switch(p, bw, lat), S).time_s
    assert t == pytest.approx(cf.ring_allreduce(p, S, lat, 1 / bw), rel=REL)


@SETTINGS
@given(st.integers(2, 64), sizes, bandwidths, latencies)
def test_halving_doubling_allreduce(p, S, bw, lat):
    t = run_collective(halving_doubling_allreduce(p), switch(p, bw, lat), S).time_s
    assert t == pytest.approx(cf.halving_doubling_allreduce(p, S, lat, 1 / bw), rel=REL)


@SETTINGS
@given(st.integers(2, 64), sizes, bandwidths, latencies)
def test_binary_tree_allreduce(p, S, bw, lat):
    t = run_collective(binary_tree_allreduce(p), switch(p, bw, lat), S).time_s
    assert t == pytest.approx(cf.binary_tree_allreduce(p, S, lat, 1 / bw), rel=REL)


@SETTINGS
@given(st.integers(2, 64), st.integers(1, 32), sizes, bandwidths, latencies)
def test_double_binary_tree_between_lower_bound_and_estimate(p, chunks, S, bw, lat):
    t = run_collective(double_binary_tree_allreduce(p, chunks), switch(p, bw, lat), S).time_s
    assert t >= cf.allreduce_lower_bound(p, S, lat, 1 / bw) * (1 - 1e-9)
    assert t <= cf.double_binary_tree_estimate(p, S, lat, 1 / bw, chunks) * (1 + 1e-9)


@SETTINGS
@given(st.integers(2, 64), sizes, bandwidths, latencies)
def test_ring_reduce_scatter_and_all_gather(p, S, bw, lat):
    topo = switch(p, bw, lat)
    expected = cf.ring_reduce_scatter(p, S, lat, 1 / bw)
    assert run_collective(ring_reduce_scatter(p), topo, S).time_s == pytest.approx(expected,
                                                                                   rel=REL)
    assert run_collective(ring_all_gather(p), topo, S).time_s == pytest.approx(expected, rel=REL)


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 8), st.booleans(), sizes, bandwidths, bandwidths,
       latencies, latencies)
def test_hierarchical_allreduce(g, h, shared, S, bw1, bw2, lat1, lat2):
    topo = Hierarchy(devices=g * h, per_host=g, intra=LinkClass("intra", bw1, lat1),
                     inter=LinkClass("inter", bw2, lat2), nic="shared" if shared else "per_device")
    t = run_collective(hierarchical_allreduce(g, h), topo, S).time_s
    expected = cf.hierarchical_allreduce(g, h, S, lat1, 1 / bw1, lat2, 1 / bw2, shared)
    assert t == pytest.approx(expected, rel=REL, abs=1e-15)


@SETTINGS
@given(st.integers(1, 24), st.integers(1, 8), st.booleans(), sizes, bandwidths, latencies)
def test_parameter_server(workers, shards, colocated, S, bw, lat):
    shards = min(shards, workers) if colocated else shards
    topo = switch(workers, bw, lat)
    devices = None
    if not colocated:
        topo = with_servers(topo, shards)
        devices = list(range(workers + shards))
    t = run_collective(ps_sync(workers, shards, colocated), topo, S, devices=devices).time_s
    expected = cf.parameter_server(workers, shards, S, lat, 1 / bw, colocated=colocated)
    assert t == pytest.approx(expected, rel=REL, abs=1e-15)


@SETTINGS
@given(st.integers(1, 24), st.lists(st.floats(0.05, 20), min_size=1, max_size=6),
       st.booleans(), sizes, bandwidths, latencies)
def test_parameter_server_unequal_shards(workers, weights, colocated, S, bw, lat):
    """With unequal shards the closed form is a lower bound (every port's load at full
    speed); fair sharing can take longer, but never more than the loads one after another."""
    weights = weights[:workers] if colocated else weights
    shards = len(weights)
    topo = switch(workers, bw, lat)
    devices = None
    if not colocated:
        topo = with_servers(topo, shards)
        devices = list(range(workers + shards))
    schedule = ps_sync(workers, shards, colocated, weights=weights)
    t = run_collective(schedule, topo, S, devices=devices).time_s
    chunks = shard_chunks(weights)  # the fractions the schedule really cut
    bound = cf.parameter_server(workers, shards, S, lat, 1 / bw, colocated=colocated,
                                fractions=list(chunks))
    largest = chunks.max() / chunks.sum()
    serial = 2 * (lat + (S + workers * largest * S) / bw) if workers > 1 or not colocated \
        else 0.0
    assert bound * (1 - REL) - 1e-15 <= t <= serial * (1 + REL) + 1e-15
    assert np.allclose(chunks / chunks.sum(), np.asarray(weights) / sum(weights), atol=2e-3)


def test_unequal_shards_under_fair_sharing_take_longer_than_the_port_bound():
    """Found by hypothesis: 2 workers, dedicated shards of 1/4, 1/4, 1/2. A worker's port
    splits evenly over its three pushes; the small ones land at 0.75 S/bw, then the large one
    is held to half the big server's port: 1.25 S/bw per phase, not the bound's 1.0."""
    S, bw = 1000.0, 1e8
    topo = with_servers(switch(2, bw, 0.0), 3)
    t = run_collective(ps_sync(2, 3, weights=[1, 1, 2]), topo, S,
                       devices=list(range(5))).time_s
    assert t == pytest.approx(2 * 1.25 * S / bw, rel=1e-6)
    assert cf.parameter_server(2, 3, S, 0.0, 1 / bw, fractions=[1, 1, 2]) == \
        pytest.approx(2 * S / bw)


@SETTINGS
@given(st.integers(1, 32), sizes, bandwidths, latencies)
def test_central_storage(workers, S, bw, lat):
    t = run_collective(central_storage(workers), switch(workers, bw, lat), S).time_s
    assert t == pytest.approx(cf.central_storage(workers, S, lat, 1 / bw), rel=REL, abs=1e-15)


@SETTINGS
@given(st.integers(2, 48), sizes, bandwidths, latencies, st.integers(0, 3))
def test_no_allreduce_beats_the_lower_bound(p, S, bw, lat, which):
    schedule = [ring_allreduce(p), halving_doubling_allreduce(p),
                double_binary_tree_allreduce(p, 4), multidim_allreduce((2, p))][which]
    q = schedule.world
    t = run_collective(schedule, switch(q, bw, lat), S).time_s
    assert t >= cf.allreduce_lower_bound(q, S, lat, 1 / bw) * (1 - 1e-9)


def test_closed_forms_by_hand():
    """Two numbers worked out on paper, so the formulas themselves are pinned too."""
    # ring, p=4, S=1 GB, 10 GB/s, 10 us: 6 * 10us + 1.5 GB / 10 GB/s
    assert cf.ring_allreduce(4, 1e9, 1e-5, 1e-10) == pytest.approx(6e-5 + 0.15)
    # halving-doubling, p=6 (q=4): 4 alpha + 1.5 S beta + 2 (alpha + S beta)
    assert cf.halving_doubling_allreduce(6, 1e9, 1e-5, 1e-10) == pytest.approx(
        4e-5 + 0.15 + 2 * (1e-5 + 0.1))
    assert cf.busbw("allreduce", 8, 1e9, 1.0) == pytest.approx(1.75e9)
