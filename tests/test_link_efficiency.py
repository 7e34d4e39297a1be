"""A library's share of shaped links, read from its all-reduce swept on them, and where the
step predictions use it."""

import dataclasses

import pandas as pd
import pytest

from harness.calibrate.link_share import link_key, link_share
from harness.calibrate.links import MeasuredLinks, emulated_topology
from harness.calibrate.workload import workload_facts
from harness.predict.step import predict_step
from harness.sim import simulate_collective

MIB16 = float(1 << 24)
LINKS = MeasuredLinks(hosts=4, bandwidth_bytes_s=300e6 / 8, rtt_s=100e-6, burst_bytes=0.0)


def _wire_s(ranks: int) -> float:
    return simulate_collective(emulated_topology(dataclasses.replace(LINKS, hosts=ranks),
                                                 trips=0), ranks, "allreduce_ring",
                               MIB16)["time_s"]


def _points(*sweeps: tuple[str, str, int, float, str]) -> pd.DataFrame:
    return pd.DataFrame([{"framework": fw, "cluster": cluster, "op": "all_reduce",
                          "bytes": MIB16, "world": world, "time_s": time_s, "run_id": run}
                         for fw, cluster, world, time_s, run in sweeps])


def test_the_share_is_the_rate_at_which_the_model_times_the_measured_all_reduce():
    """16 MiB measured at 1.25x its wire time on 4 hosts: the library reaches 80% of the
    links (the round trips the model adds are microseconds beside 0.7 s); the latest three
    sweeps' median, the size and the ranks it was read at are kept."""
    wire = _wire_s(4)
    points = _points(*[("tf", "netns:hosts=4,rate=300mbit", 4, wire * k, f"r{i}")
                       for i, k in enumerate((3.0, 1.2, 1.25, 1.3))])
    share = link_share(points, pd.DataFrame(), "tf", LINKS, "netns:hosts=4,rate=300mbit", 4)
    assert share is not None
    assert share.efficiency == pytest.approx(0.8, rel=2e-3)  # r0 (3.0x) is not among the latest
    assert (share.world, share.nbytes, share.sweeps) == (4, MIB16, 3)


def test_a_share_belongs_to_the_library_and_the_links_it_was_swept_on():
    """Another library, another rate, another uplink or a sweep too small to be bandwidth
    bound give nothing; the host count does not matter (a 4-rank sweep on 6 hosts crosses
    the same links), and the nearest rank count swept stands in for one not swept."""
    wire = _wire_s(4)
    points = _points(("torch", "netns:hosts=6,rate=300mbit", 4, wire * 1.1, "a"),
                     ("torch", "netns:hosts=4,rate=100mbit", 4, wire * 5, "b"))
    at = "netns:hosts=4,rate=300mbit"
    assert link_share(points, pd.DataFrame(), "tf", LINKS, at, 4) is None
    share = link_share(points, pd.DataFrame(), "torch", LINKS, at, 4)
    assert share is not None and share.efficiency == pytest.approx(1 / 1.1, rel=2e-3)
    assert link_share(points, pd.DataFrame(), "torch", LINKS, at, 6).world == 4
    racked = "netns:hosts=4,rate=300mbit,racks=2,uplink=100mbit"
    assert link_share(points, pd.DataFrame(), "torch", LINKS, racked, 4) is None
    small = points.assign(bytes=4096.0)
    assert link_share(small, pd.DataFrame(), "torch", LINKS, at, 4) is None
    assert link_key("local") is None and link_key("netns:hosts=2,rate=unshaped") is None


def test_a_share_slows_the_collectives_and_leaves_the_parameter_servers_rpc_alone():
    """DDP's exchange at half the links is about twice as long; a parameter server's pushes
    and pulls go through TensorPipe, which no collective sweep measured."""
    from harness.predict.step import PsLayout

    facts = workload_facts("mlp:M")
    profile = facts.profile(batch=64)

    def step(strategy: str, share: float, ps: PsLayout | None = None) -> float:
        row = predict_step("torch", strategy, profile, LINKS, 4, 0.02, fits=pd.DataFrame(),
                           cores=8, ps=ps, link_share=share)
        assert row is not None and row["link_share"] == (share if ps is None else 1.0)
        return float(row["step_time_median_s"])

    full, half = step("ddp", 1.0), step("ddp", 0.5)
    assert 1.8 < (half - 0.02) / (full - 0.02) < 2.1
    ps = PsLayout([1.0, 1.0], False)
    assert step("parameter_server", 0.5, ps) == step("parameter_server", 1.0, ps)
