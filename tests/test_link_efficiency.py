"""A library's share of shaped links, read from its all-reduce swept on them, and where the
step predictions use it."""

import dataclasses

import pandas as pd
import pytest

from harness.calibrate.link_share import link_key, link_share
from harness.calibrate.links import MeasuredLinks, emulated_topology
from harness.calibrate.workload import workload_facts
from harness.predict.step import PredictedRow, predict_step
from harness.sim import simulate_collective

MIB16 = float(1 << 24)
LINKS = MeasuredLinks(hosts=4, bandwidth_bytes_s=300e6 / 8, rtt_s=100e-6, burst_bytes=0.0)


def _wire_s(ranks: int) -> float:
    return simulate_collective(emulated_topology(dataclasses.replace(LINKS, hosts=ranks),
                                                 trips=0), ranks, "allreduce_ring",
                               MIB16).time_s


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
    profile = facts.at(batch=64)

    def step(strategy: str, share: float, ps: PsLayout | None = None) -> float:
        row = predict_step("torch", strategy, profile, LINKS, 4, 0.02, fits=pd.DataFrame(),
                           cores=8, ps=ps, link_share=share)
        assert row is not None and row.link_share == (share if ps is None else 1.0)
        return float(row.row.step_time_median_s)

    full, half = step("ddp", 1.0), step("ddp", 0.5)
    assert 1.8 < (half - 0.02) / (full - 0.02) < 2.1
    ps = PsLayout([1.0, 1.0], False)
    assert step("parameter_server", 0.5, ps) == step("parameter_server", 1.0, ps)


def test_an_all_to_all_share_is_read_near_the_exchange_or_not_at_all():
    """gloo's all-to-all on 2 hosts moves 1 MiB near the wire rate and 4 MiB at half of it
    (both directions of one connection full at once): embedding sharding's exchange reads
    the size nearest its own, and nothing where the nearest swept is over 2x away (a 16 MiB
    sweep says nothing of a 1 MiB exchange); the all-reduce's share is still read at the
    largest size."""
    from harness.calibrate.link_share import step_shares

    links = dataclasses.replace(LINKS, hosts=2)
    at = "netns:hosts=2,rate=300mbit"

    def wire(op: str, nbytes: float) -> float:
        name = "allreduce_ring" if op == "all_reduce" else op
        return simulate_collective(emulated_topology(links, trips=0), 2, name,
                                   nbytes).time_s

    rows = [("all_to_all", float(1 << 20), 1.05), ("all_to_all", float(1 << 22), 2.0),
            ("all_reduce", float(1 << 22), 1.1), ("all_reduce", MIB16, 1.0)]
    points = pd.DataFrame([{"framework": "torch", "cluster": at, "op": op, "bytes": nbytes,
                            "world": 2, "time_s": wire(op, nbytes) * k, "run_id": "s"}
                           for op, nbytes, k in rows])
    share, exchange = step_shares(points, pd.DataFrame(), "torch", "embedding_sharding",
                                  links, at, 2, 0.8e6)
    assert share is not None and (share.op, share.nbytes) == ("all_reduce", MIB16)
    assert share.efficiency == pytest.approx(1.0, rel=1e-3)
    assert exchange is not None and (exchange.op, exchange.nbytes) == ("all_to_all", 1 << 20)
    assert exchange.efficiency == pytest.approx(1 / 1.05, rel=1e-2)  # less the round trips
    big = step_shares(points, pd.DataFrame(), "torch", "embedding_sharding", links, at, 2, 5e6)
    assert big[1] is not None and big[1].efficiency == pytest.approx(0.5, rel=1e-2)
    only16 = points[points["bytes"] == MIB16].assign(op="all_to_all")
    assert step_shares(only16, pd.DataFrame(), "torch", "embedding_sharding", links, at, 2,
                       0.8e6)[1] is None
    assert step_shares(points, pd.DataFrame(), "torch", "ddp", links, at, 2, 0.8e6)[1] is None


def test_embedding_shardings_dense_all_reduce_reads_the_share_near_its_own_size():
    """Its only all-reduce is the dense layers' (a few hundred KB for recsys): gloo's share at
    4 MiB (1/1.1 here) where that was swept within 2x of it, the largest size's (16 MiB)
    where none was; a ddp step's buckets keep the largest size's."""
    from harness.calibrate.link_share import step_shares

    links = dataclasses.replace(LINKS, hosts=2)
    at = "netns:hosts=2,rate=300mbit"
    wire = {nbytes: simulate_collective(emulated_topology(links, trips=0), 2, "allreduce_ring",
                                        nbytes).time_s for nbytes in (float(1 << 22), MIB16)}
    points = pd.DataFrame([{"framework": "torch", "cluster": at, "op": "all_reduce",
                            "bytes": nbytes, "world": 2, "time_s": wire[nbytes] * k,
                            "run_id": "s"} for nbytes, k in ((1 << 22, 1.1), (MIB16, 1.0))])

    def share(strategy: str, dense: float) -> float:
        got = step_shares(points, pd.DataFrame(), "torch", strategy, links, at, 2, 0.8e6,
                          dense)[0]
        assert got is not None
        return got.efficiency

    assert share("embedding_sharding", 3e6) == pytest.approx(1 / 1.1, rel=1e-2)
    assert share("embedding_sharding", 0.5e6) == pytest.approx(1.0, rel=1e-2)  # 8x away
    assert share("ddp", 3e6) == pytest.approx(1.0, rel=1e-2)


def test_a_lopsided_exchange_moves_what_one_way_carries_beyond_the_other_at_the_full_rate():
    """``_exchange_time``: an even exchange at the all-to-all's share; one rank's message to
    another with nothing back at the one-way rate whatever the share; 2 : 1 between them:
    the part both ways carry at the share, the rest at the one-way rate (the probed rate:
    1 / the link share against links scaled by it)."""
    import numpy as np

    from harness.sim.step.data_parallel import _Collectives, _exchange_time
    from harness.sim.systems.spec import parse_topology

    colls = _Collectives(parse_topology("switch:n=2,bw=8Mbit,lat=0us"), "fast")
    one = 1.0  # seconds for 1 MB at the full rate

    def took(matrix: list[list[float]], share: float) -> float:
        return _exchange_time(colls, np.array(matrix) * 1e6, share)

    assert took([[0, 1], [1, 0]], 0.5) == pytest.approx(2 * took([[0, 1], [1, 0]], 1.0),
                                                        rel=1e-3)
    assert took([[0, 1], [0, 0]], 0.5) == pytest.approx(one, rel=1e-3)
    assert took([[0, 2], [1, 0]], 0.5) == pytest.approx(2 * one + one, rel=1e-3)
    lopsided = _exchange_time(colls, np.array([[0, 2], [1, 0]]) * 1e6, 0.5, 1 / 0.8)
    assert lopsided == pytest.approx(2 * one + one * 0.8, rel=1e-3)


def test_embedding_sharding_times_its_all_to_alls_at_their_share_and_its_runtime_per_core():
    """The all-to-alls at half the all-reduce's share take about twice as long; the dense
    all-reduce and the rest of the step do not move. Its runtime's own time (tensor work
    every rank does at once) is stretched by oversold cores as compute is: 4 ranks on 2
    cores pay twice what 4 on 8 do."""
    profile = workload_facts("recsys:M").at(batch=256)
    links = dataclasses.replace(LINKS, hosts=4)

    def step(exchange: float | None, cores: int = 8, runtime_s: float = 0.0) -> PredictedRow:
        row = predict_step("torch", "embedding_sharding", profile, links, 4, 0.01,
                           fits=pd.DataFrame(), cores=cores, link_share=0.9,
                           exchange_share=exchange, runtime_s=runtime_s)
        assert row is not None
        return row

    same, half = step(None), step(0.45)
    assert same.exchange_share is None and half.exchange_share == 0.45
    assert step(0.9).row.step_time_median_s == pytest.approx(same.row.step_time_median_s)
    moved = same.row.step_time_median_s - 0.01  # the all-to-alls and the dense all-reduce
    assert 1.3 < (half.row.step_time_median_s - 0.01) / moved < 2.0
    alone = step(None, cores=8, runtime_s=0.05).row.step_time_median_s
    shared = step(None, cores=2, runtime_s=0.05).row.step_time_median_s
    assert shared - step(None, cores=2).row.step_time_median_s == pytest.approx(0.10)
    assert alone - same.row.step_time_median_s == pytest.approx(0.05)
