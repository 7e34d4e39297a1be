"""Every emulated cluster shape through every path that turns its links into a topology:
the links placed for a job, widened to a sweep's ranks, written as the simulator's spec and
parsed back, at each device count the recommender tries. Whatever the path, the spec parses,
holds the hosts it is for, and its racks are the ones a scheduler fills (issue 58: a racked
job widened to a sweep kept its placement's racks, `leaves=2+2` for 6 hosts)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.calibrate.link_share import link_share
from harness.calibrate.links import (
    MeasuredLinks,
    as_swept,
    built_racks,
    emulated_topology,
    links_from_probes,
    links_of_cluster,
    placed,
)
from harness.core.clusters import parse_cluster, rack_of, rack_sizes
from harness.core.strategies import library
from harness.launch import netns
from harness.recommend.targets import device_counts, parse_targets
from harness.sim import parse_topology, simulate_collective
from harness.sim.network.topology import leaf_of_host

RATE, UPLINK = "200mbit", "120mbit"


def cluster_of(hosts: int, racks: int) -> str:
    """An emulated cluster spec: one switch (racks 1) or ``racks`` racks under a core."""
    flat = f"netns:hosts={hosts},rate={RATE}"
    return flat if racks == 1 else f"{flat},racks={racks},uplink={UPLINK}"


def shapes(top: int = 12) -> list[tuple[int, int]]:
    """Every (hosts, racks) an emulated cluster can be built as, up to ``top`` hosts."""
    return [(h, r) for h in range(2, top + 1) for r in [1, *range(2, h + 1)]]


def probes(cluster: str) -> list[dict]:
    """Link probes of ``cluster`` as the link probe records them: neighbours in host order,
    those across a rack boundary marked (faster within a rack, slower across)."""
    spec = parse_cluster(cluster)
    hosts, racks = spec.hosts, spec.racks
    out = []
    for a in range(hosts):
        b = (a + 1) % hosts
        across = rack_of(a, hosts, racks) != rack_of(b, hosts, racks)
        out.append({"src": a, "dst": b, "cross_rack": float(across),
                    "throughput_bits_s": 110e6 if across else 190e6,
                    "rtt_median_s": 300e-6 if across else 100e-6})
    return out


def assert_topology_of(links: MeasuredLinks, cluster: str, job: int) -> None:
    """``links`` describe ``job`` hosts of ``cluster``, racked as a scheduler fills them:
    hosts 0..job-1 of the cluster as built, each in the rack the emulator put it in."""
    spec = parse_cluster(cluster)
    hosts, racks = spec.hosts, spec.racks
    assert links.hosts == job
    topology = parse_topology(emulated_topology(links))  # a spec the simulator takes
    assert topology.devices == job
    expected = [rack_of(h, hosts, racks) for h in range(job)]
    if links.uplink_bytes_s > 0 and len(set(expected)) > 1:
        assert leaf_of_host(topology).tolist() == expected, (cluster, job)
    else:  # within one rack (or one switch): no uplink crossed, a flat switch of the job
        assert emulated_topology(links).startswith(f"switch:n={job},"), (cluster, job)


@pytest.mark.parametrize("hosts", range(2, 13))
def test_every_job_on_every_cluster_shape_is_the_hosts_a_scheduler_gives(hosts):
    """Hosts 2-12, no racks and every rack count from 2 to the hosts (racks that do not
    divide the hosts included), every job size from 1 to all hosts, links from the spec and
    from probes: placed, placed again from that placement, and widened to every sweep of
    the same links (a sweep is one rank a host, on any host count with these racks)."""
    for racks in [1, *range(2, hosts + 1)]:
        cluster = cluster_of(hosts, racks)
        assert sum(built_racks(cluster) or (hosts,)) == hosts
        for links in (links_of_cluster([], cluster),
                      links_from_probes(cluster, probes(cluster), 0.0)):
            assert (links.racks > 1) == (racks > 1)
            for job in range(1, hosts + 1):
                job_links = placed(links, job)
                assert_topology_of(job_links, cluster, job)
                for again in range(1, hosts + 1):  # from the cluster, not the placement
                    assert placed(job_links, again) == placed(links, again)
                for swept_hosts in range(max(2, racks), 13):
                    swept = cluster_of(swept_hosts, racks)
                    assert_topology_of(as_swept(job_links, swept, swept_hosts), swept,
                                       swept_hosts)


@pytest.mark.parametrize("hosts, racks", shapes())
def test_the_recommenders_device_counts_each_place_on_the_cluster(hosts, racks):
    (target,) = parse_targets([cluster_of(hosts, racks)])
    links = links_of_cluster([], target.spec)
    counts = device_counts(target)
    assert counts[-1] == hosts and counts[0] == 1
    for n in counts:
        assert_topology_of(placed(links, n), target.spec, n)


def test_a_record_cannot_hold_more_hosts_than_its_cluster_was_built_with():
    links = links_of_cluster([], cluster_of(6, 3))
    assert links.hosts_per_rack == (2, 2, 2)
    assert placed(links, 4).hosts_per_rack == (2, 2)
    assert placed(placed(links, 4), 6).hosts_per_rack == (2, 2, 2)
    with pytest.raises(ValueError, match="7 hosts"):
        placed(links, 7)
    with pytest.raises(ValueError):
        MeasuredLinks(0, 1e6, 0.0, 0.0)
    assert MeasuredLinks(1, 1e6, 0.0, 0.0).hosts_per_rack == (1,)  # one host, one switch


def _sweep(cluster: str, world: int, nbytes: float, time_s: float) -> pd.DataFrame:
    return pd.DataFrame([{"framework": "torch", "op": "all_reduce", "bytes": nbytes,
                          "cluster": cluster, "world": world, "run_id": "r1",
                          "time_s": time_s}])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_share_is_read_on_the_cluster_the_sweep_ran_on(data):
    """``link_share`` of a job on any cluster shape, from an all-reduce swept on a cluster
    with the same links at another host count: the sweep's time is planted as the simulator
    times it on the swept cluster as built (at a known share of the links), and the share
    read back is that one, whichever job the links were placed for."""
    hosts = data.draw(st.integers(2, 12), "hosts")
    racks = data.draw(st.sampled_from([1, *range(2, hosts + 1)]), "racks")
    job = data.draw(st.integers(1, hosts), "job")
    swept_hosts = data.draw(st.integers(max(2, racks), 12), "swept hosts")
    share = data.draw(st.floats(0.3, 1.0), "share")
    cluster, swept = cluster_of(hosts, racks), cluster_of(swept_hosts, racks)
    links = links_from_probes(cluster, probes(cluster), 0.0)
    nbytes = 4 * 2**20
    # the swept cluster's own links at the same rates, as built (not through placement)
    on_swept = MeasuredLinks(swept_hosts, links.bandwidth_bytes_s, links.rtt_s, 0.0,
                             uplink_bytes_s=links.uplink_bytes_s, rack_rtt_s=links.rack_rtt_s,
                             built=rack_sizes(swept_hosts, racks) if racks > 1 else ())
    wire = simulate_collective(emulated_topology(on_swept, trips=0), swept_hosts,
                               "allreduce_ring", nbytes).time_s
    trips = library("torch").trips("allreduce_ring")
    modelled = simulate_collective(emulated_topology(on_swept, trips=trips), swept_hosts,
                                   "allreduce_ring", nbytes).time_s
    measured = (modelled - wire) + wire / share
    read = link_share(_sweep(swept, swept_hosts, nbytes, measured), pd.DataFrame(), "torch",
                      placed(links, job), cluster, job)
    assert read is not None and read.world == swept_hosts and read.cluster == swept
    assert math.isclose(read.efficiency, share, rel_tol=1e-6), (read.efficiency, share)


RECOMMEND_DATA = Path(__file__).parent.parent / "validation" / "2026-11-24-recommend"


@pytest.mark.heavy
@pytest.mark.long
@pytest.mark.netns
@pytest.mark.skipif(netns.unavailable_reason() is not None, reason="needs root, ip and tc")
def test_the_documented_flow_on_three_racks_answers_before_and_after_calibrating(tmp_path):
    """README's advice on a cluster of three racks of two: recommend from this machine's
    runs, sweep the all-reduce on the cluster (`comm`), recommend again. Each answers; the
    second reads the sweep (6 ranks) for every job size, the 2- and 4-host ones included."""
    results = tmp_path / "results"
    shutil.copytree(RECOMMEND_DATA, results)
    target = "netns:hosts=6,rate=1gbit,racks=3,uplink=600mbit"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness.cli", *args, "--results",
                               str(results)], capture_output=True, text=True, timeout=600)

    def ddp_steps() -> dict[int, float]:
        proc = cli("recommend", "--workload", "mlp:M", "--target", target, "--json")
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout)
        assert [v["status"] for v in answer["verdicts"]] == ["ok"]
        return {r["replicas"]: r["step_time_s"] for r in answer["sweep"]
                if r["strategy"] == "ddp" and r["status"] == "ok"}

    before = ddp_steps()
    assert sorted(before) == [2, 4, 6]
    proc = cli("comm", "--cluster", target, "--world", "6", "--sizes", "1MiB:1MiB",
               "--ops", "all_reduce", "--rounds", "1")
    assert proc.returncode == 0, proc.stderr
    after = ddp_steps()
    assert sorted(after) == [2, 4, 6]
    assert all(after[n] != before[n] for n in after)  # gloo's measured share, not the probe's
