"""The fast engine equals the detailed one; more bandwidth never hurts, more bytes never help."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness.sim.network.engine import fan_weights, run_collective
from harness.sim.network.flow import fluid_step, maxmin_rates, maxmin_rates_plain
from harness.sim.network.topology import (
    Hierarchy,
    Topology,
    Torus,
    degrade,
    link_classes,
    link_table,
    n_devices,
    path,
    route,
    scale_bandwidth,
    with_servers,
)
from harness.sim.schedules.collectives import (
    binomial_broadcast,
    double_binary_tree_allreduce,
    halving_doubling_allreduce,
    multidim_allreduce,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
    tree_broadcast,
)
from harness.sim.schedules.ps import ps_sync
from harness.sim.schedules.schedule import Schedule, pipelined
from harness.sim.systems.spec import parse_topology

SETTINGS = settings(max_examples=int(os.environ.get("SIM_EXAMPLES", "30")), deadline=None)


@st.composite
def small_topologies(draw: st.DrawFn) -> Topology:
    kind = draw(st.sampled_from(["switch", "two_level", "leaf_spine", "torus", "ring"]))
    bw = draw(st.sampled_from(["10Gbit", "100Gbit", "25GB/s"]))
    lat = draw(st.sampled_from(["0", "2us", "30us"]))
    if kind == "switch":
        spec = f"switch:n={draw(st.integers(2, 12))},bw={bw},lat={lat}"
    elif kind == "two_level":
        nic = draw(st.sampled_from(["per_device", "shared"]))
        spec = (f"two_level:hosts={draw(st.integers(1, 4))},gpus={draw(st.integers(1, 4))},"
                f"intra=100GB/s,inter={bw},nic={nic},inter_lat={lat}")
    elif kind == "leaf_spine":
        hosts = draw(st.integers(2, 6))
        if draw(st.booleans()):  # leaves as even as the count allows, or racks built unevenly
            leaves = f"hosts_per_leaf={draw(st.integers(1, 3))}"
        else:
            cuts = sorted(draw(st.sets(st.integers(1, hosts - 1), max_size=3)))
            sizes = [b - a for a, b in zip([0, *cuts], [*cuts, hosts], strict=True)]
            leaves = f"leaves={'+'.join(map(str, sizes))}"
        spec = (f"leaf_spine:hosts={hosts},gpus={draw(st.integers(1, 2))},"
                f"intra=100GB/s,{leaves},inter={bw},"
                f"oversub={draw(st.sampled_from([1, 2, 4]))},inter_lat={lat}")
    elif kind == "torus":
        dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        spec = f"torus:dims={'x'.join(map(str, dims))},bw={bw},lat={lat}"
    else:
        spec = f"ring:n={draw(st.integers(2, 9))},bw={bw},lat={lat}"
    topo = parse_topology(spec)
    if draw(st.booleans()):
        topo = degrade(topo, draw(st.integers(0, n_devices(topo) - 1)),
                       draw(st.sampled_from([1.5, 4.0])))
    return topo


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, Topology, list[int] | None]:
    topo = draw(small_topologies())
    n = n_devices(topo)
    p = draw(st.integers(1, n))
    kind = draw(st.sampled_from(["ring", "hd", "tree", "rs", "ag", "bcast", "binomial", "hier",
                                 "pipelined", "ps_colocated", "ps_dedicated"]))
    devices = None
    if kind == "ring":
        s = ring_allreduce(p, draw(st.permutations(range(p))))
    elif kind == "hd":
        s = halving_doubling_allreduce(p)
    elif kind == "tree":
        s = double_binary_tree_allreduce(p, draw(st.integers(1, 6)))
    elif kind == "rs":
        s = ring_reduce_scatter(p)
    elif kind == "ag":
        s = ring_all_gather(p)
    elif kind == "bcast":
        s = tree_broadcast(p, draw(st.integers(0, p - 1)), draw(st.integers(1, 5)))
    elif kind == "binomial":
        s = binomial_broadcast(p, draw(st.integers(0, p - 1)))
    elif kind in ("hier", "pipelined"):
        dims = topo.dims if isinstance(topo, Torus) else (topo.per_host, topo.hosts)
        s = multidim_allreduce(dims)
        if kind == "pipelined":
            s = pipelined(s, draw(st.integers(2, 3)))
    elif kind == "ps_colocated":
        s = ps_sync(p, draw(st.integers(1, p)), colocated=True)
    else:
        assume(isinstance(topo, Hierarchy))
        k = draw(st.integers(1, 3))
        topo = with_servers(topo, k)
        s = ps_sync(p, k, colocated=False)
        devices = [*range(p), *range(n, n + k)]
    return s, topo, devices


@SETTINGS
@given(cases(), st.floats(1.0, 1e9))
def test_fast_mode_equals_detailed_mode(case, nbytes):
    schedule, topo, devices = case
    fast = run_collective(schedule, topo, nbytes, mode="fast", devices=devices)
    slow = run_collective(schedule, topo, nbytes, mode="detailed", devices=devices)
    assert fast.time_s == pytest.approx(slow.time_s, rel=1e-9, abs=1e-15)
    assert fast.transfers == slow.transfers
    assert fast.bytes_sent == pytest.approx(slow.bytes_sent, rel=1e-9)
    for c in fast.class_bytes:
        assert fast.class_bytes[c] == pytest.approx(slow.class_bytes[c], rel=1e-9, abs=1e-6)
        assert fast.link_bytes[c] == pytest.approx(slow.link_bytes[c], rel=1e-9, abs=1e-6)


@SETTINGS
@given(small_topologies(), st.data())
def test_vectorised_routes_equal_plain_routes(topo, data):
    n = n_devices(topo)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               min_size=1, max_size=30))
    pairs = [(a, b) for a, b in pairs if a != b]
    assume(pairs)
    r = route(topo, np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]))
    for i, (a, b) in enumerate(pairs):
        links, latency = path(topo, a, b)
        assert sorted(links) == sorted(x for x in r.links[i].tolist() if x >= 0)
        assert latency == pytest.approx(r.latency[i])
        assert all(0 <= x < link_table(topo).capacity.size for x in links)


@SETTINGS
@given(st.integers(1, 12), st.integers(1, 30), st.data())
def test_vectorised_and_plain_fair_sharing_agree(n_links, n_flows, data):
    capacity = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=n_links,
                                           max_size=n_links)))
    paths = [data.draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4,
                                unique=True)) for _ in range(n_flows)]
    padded = np.full((n_flows, 4), -1)
    for i, p in enumerate(paths):
        padded[i, : len(p)] = p
    fast = maxmin_rates(padded, capacity)
    plain = maxmin_rates_plain(paths, capacity.tolist())
    assert np.allclose(fast, plain, rtol=1e-9)
    load = np.zeros(n_links)
    for p, r in zip(paths, fast, strict=True):
        load[p] += r
    assert (load <= capacity * (1 + 1e-9)).all()  # feasible
    for p, r in zip(paths, fast, strict=True):  # and every flow has a saturated bottleneck
        assert any(load[link] >= capacity[link] * (1 - 1e-9) and
                   r >= max(fast[[i for i, q in enumerate(paths) if link in q]]) * (1 - 1e-9)
                   for link in p)


@SETTINGS
@given(cases(), st.floats(1.0, 1e9), st.floats(1.0, 8.0), st.data())
def test_more_bandwidth_is_never_slower(case, nbytes, factor, data):
    schedule, topo, devices = case
    only = data.draw(st.sampled_from([None, *[c.name for c in link_classes(topo)]]))
    before = run_collective(schedule, topo, nbytes, devices=devices).time_s
    after = run_collective(schedule, scale_bandwidth(topo, factor, only), nbytes,
                           devices=devices).time_s
    assert after <= before * (1 + 1e-9)


@SETTINGS
@given(cases(), st.floats(1.0, 1e9), st.floats(1.0, 8.0))
def test_a_larger_message_is_never_faster(case, nbytes, factor):
    schedule, topo, devices = case
    small = run_collective(schedule, topo, nbytes, devices=devices).time_s
    large = run_collective(schedule, topo, nbytes * factor, devices=devices).time_s
    assert large >= small * (1 - 1e-9)


def test_fair_sharing_splits_a_shared_link():
    # two flows into one port share it: both take twice as long as one alone
    links = np.array([[0, 2], [1, 2]])
    duration, rounds, land = fluid_step(links, np.array([10.0, 10.0]), np.zeros(2),
                                        np.array([1.0, 1.0, 1.0]))
    assert duration == pytest.approx(20.0) and rounds == 1
    # a short and a long flow: the long one speeds up when the short one is gone
    duration, rounds, land = fluid_step(links, np.array([5.0, 10.0]), np.zeros(2),
                                        np.array([1.0, 1.0, 1.0]))
    assert land.tolist() == pytest.approx([10.0, 15.0]) and rounds == 2


def test_a_straggler_link_slows_the_ring_but_not_halving_doubling_as_much():
    topo = parse_topology("switch:n=16,bw=100Gbit,lat=5us")
    slow = degrade(topo, 3, 4.0)
    for s in (ring_allreduce(16), halving_doubling_allreduce(16)):
        base = run_collective(s, topo, 1e8).time_s
        hit = run_collective(s, slow, 1e8).time_s
        assert hit > base * 2  # every step waits for the slow port
    assert run_collective(ring_allreduce(16), slow, 1e8, mode="detailed").time_s == \
        pytest.approx(run_collective(ring_allreduce(16), slow, 1e8).time_s, rel=1e-9)


def test_shared_nic_is_slower_than_one_nic_per_device():
    per_device = parse_topology("two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit")
    shared = parse_topology("two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit,nic=shared")
    s = multidim_allreduce((8, 4))
    assert run_collective(s, shared, 1e8).time_s > 4 * run_collective(s, per_device,
                                                                      1e8).time_s / 2


def test_oversubscribed_spine_is_slower():
    def spec(o: int) -> str:
        return (f"leaf_spine:hosts=8,gpus=1,hosts_per_leaf=2,inter=100Gbit,oversub={o},"
                "spine_lat=0")

    s = ring_allreduce(8)
    assert run_collective(s, parse_topology(spec(4)), 1e8).time_s > \
        run_collective(s, parse_topology(spec(1)), 1e8).time_s * 1.5


def _ps_on(spec: str, workers: int, shards: int, slow_server: bool = False
           ) -> tuple[Schedule, Topology, list[int]]:
    topo = with_servers(parse_topology(spec), shards)
    n = n_devices(topo) - shards
    if slow_server:
        topo = degrade(topo, n + shards - 1, 4.0)
    return ps_sync(workers, shards), topo, [*range(workers), *range(n, n + shards)]


@pytest.mark.parametrize("spec,symmetric,slow_server", [
    ("two_level:hosts=4,gpus=2,intra=100GB/s,inter=10Gbit", True, False),
    ("two_level:hosts=4,gpus=2,intra=100GB/s,inter=10Gbit,nic=shared", True, False),
    ("two_level:hosts=4,gpus=2,intra=100GB/s,inter=10Gbit", False, True),
    ("leaf_spine:hosts=6,gpus=1,hosts_per_leaf=2,inter=10Gbit,oversub=2", False, False),
])
def test_a_parameter_server_round_is_timed_from_one_server_where_they_are_alike(
        spec, symmetric, slow_server):
    """One server's flows stand for all K where the servers are interchangeable; anywhere
    else (servers under different leaves, a slow server) every flow is timed, and either way
    the time is the detailed engine's, which writes every transfer out."""
    schedule, topo, devices = _ps_on(spec, 6, 3, slow_server)
    push = schedule.steps[0]
    assert push.fan == 3 and len(push) == 6
    assert (fan_weights(push, topo, np.asarray(devices)) is not None) == symmetric
    fast = run_collective(schedule, topo, 1e8, mode="fast", devices=devices)
    slow = run_collective(schedule, topo, 1e8, mode="detailed", devices=devices)
    assert fast.time_s == pytest.approx(slow.time_s, rel=1e-9)
    assert fast.transfers == slow.transfers == 2 * 6 * 3
    assert fast.bytes_sent == pytest.approx(slow.bytes_sent, rel=1e-9)


@pytest.mark.parametrize(("beside", "crossing"), [((0, 1), 4), ((0, 3), 5)])
def test_parameter_servers_push_and_pull_across_the_racks_they_and_their_workers_sit_in(
        beside, crossing):
    """5 hosts racked 3 + 2 (as the emulator builds 5 hosts in 2 racks), 2 colocated servers
    beside the workers a run placed them with: every push from a worker in the other rack
    than its server's crosses the uplinks (up from its leaf, down into the server's), and its
    pull crosses them back; the rest stay in their rack."""
    topo = parse_topology("leaf_spine:hosts=5,leaves=3+2,inter=150Mbit,uplink=100Mbit")
    shard = 1e6  # bytes per server and direction
    schedule = ps_sync(5, 2, colocated=True, beside=beside)
    result = run_collective(schedule, topo, 2 * shard, mode="detailed")
    leaf = [0, 0, 0, 1, 1]
    crossings = sum(leaf[w] != leaf[s] for s in beside for w in range(5))
    assert crossings == crossing
    # bytes of the messages that crossed each class: a shard pushed and pulled per pair
    assert result.class_bytes["spine"] == pytest.approx(2 * crossings * shard, rel=1e-6)
    assert result.class_bytes["inter"] == pytest.approx(2 * 2 * 4 * shard, rel=1e-6)
