"""NCCL's channels: one ring per rail on hosts of several GPUs with a NIC each, held to the
bus bandwidth published for such clusters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.network.engine import run_collective
from harness.sim.schedules.collectives import ring_all_gather, ring_allreduce, ring_reduce_scatter
from harness.sim.schedules.schedule import execute
from harness.sim.step.strategies import allreduce_schedule, channel_rings, rail_orders
from harness.sim.systems import calibration as cal
from harness.sim.systems.preset import load_preset, preset_names
from harness.sim.systems.spec import parse_topology


def _rails(hosts: int, gpus: int, nic: str = "per_device"):
    return parse_topology(f"two_level:hosts={hosts},gpus={gpus},intra=100GB/s,inter=10GB/s,"
                          f"nic={nic}")


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 4), st.integers(2, 4), st.sampled_from(["allreduce", "rs", "ag"]))
def test_channel_rings_are_the_collective_they_stand_for(hosts, gpus, kind):
    topo = _rails(hosts, gpus)
    p = hosts * gpus
    ring = {"allreduce": ring_allreduce, "rs": ring_reduce_scatter, "ag": ring_all_gather}[kind]
    schedule = channel_rings(ring, topo, p)
    data = np.random.default_rng(p).normal(size=(p, schedule.n_chunks * 3))
    out = execute(schedule, data)
    if kind == "allreduce":
        assert np.allclose(out, data.sum(axis=0))
    elif kind == "rs":
        bounds = np.linspace(0, data.shape[1], schedule.n_chunks + 1).astype(int)
        assert schedule.owner is not None
        for c, rank in enumerate(schedule.owner):
            lo, hi = bounds[c], bounds[c + 1]
            assert np.allclose(out[rank, lo:hi], data[:, lo:hi].sum(axis=0))
    fast = run_collective(schedule, topo, 1e8, mode="fast")
    slow = run_collective(schedule, topo, 1e8, mode="detailed")
    assert fast.time_s == pytest.approx(slow.time_s, rel=1e-9)


def test_every_channel_leaves_each_host_through_its_own_nic():
    topo = _rails(3, 4)
    orders = rail_orders(topo, 12)
    assert len(orders) == 4
    exits = sorted(int(order[(h + 1) * 4 - 1]) % 4 for order in orders for h in range(1))
    assert exits == [0, 1, 2, 3]  # channel c leaves host 0 from GPU c-1: all four NICs
    assert all(sorted(order.tolist()) == list(range(12)) for order in orders)


@pytest.mark.parametrize("topo,workers", [
    (_rails(2, 4, nic="shared"), 8),  # one NIC per host: one ring (gloo, CPU nodes)
    (_rails(1, 4), 4),  # one host
    (_rails(3, 4), 6),  # workers that do not fill whole hosts
    (parse_topology("switch:n=4,bw=1GB/s"), 4),
])
def test_one_plain_ring_where_there_are_no_rails(topo, workers):
    assert [o.tolist() for o in rail_orders(topo, workers)] == [list(range(workers))]


def test_channels_put_every_nic_to_work():
    """A single ring's host boundaries each pass one NIC: a whole host's bytes through one
    tenth of its network. With a ring per rail the same all-reduce is several times faster."""
    topo = _rails(2, 8)
    single = run_collective(ring_allreduce(16), topo, 1e9)
    rails = run_collective(allreduce_schedule("allreduce_ring", topo, 16, 1e9), topo, 1e9)
    assert single.time_s / rails.time_s > 5


PUBLISHED = [(name, b) for name in preset_names() for b in load_preset(name).published]


@pytest.mark.parametrize("preset,figure", PUBLISHED,
                         ids=[f"{n}-{b.hosts}hosts" for n, b in PUBLISHED])
def test_ddp_all_reduce_is_within_15_percent_of_published_bus_bandwidth(preset, figure):
    assert figure.source and figure.collective == "allreduce"
    topo = cal.apply(parse_topology(f"preset:{preset},hosts={figure.hosts}"),
                     cal.from_preset(preset))
    p = load_preset(preset)
    workers = figure.hosts * int(p.spec.split("gpus=")[1].split(",")[0])
    from harness.sim.step.strategies import resolve_strategy

    strategy = resolve_strategy("torch:ddp")
    r = run_collective(allreduce_schedule(strategy, topo, workers, figure.nbytes), topo,
                       figure.nbytes)
    busbw = r.algbw * 2 * (workers - 1) / workers
    assert busbw == pytest.approx(figure.busbw, rel=0.15)


def test_the_dgx_preset_cites_published_figures_at_2_and_16_hosts():
    assert {b.hosts for b in load_preset("dgx_h100_ib").published} == {2, 16}
