"""A synchronous parameter-server round worker by worker (harness/sim/step/ps_round.py), against
the closed forms of a round on one switch."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.network.engine import run_collective
from harness.sim.network.topology import with_servers
from harness.sim.schedules.ps import phases, ps_sync
from harness.sim.step.ps_round import round_time
from harness.sim.systems.spec import parse_topology

MB = 1e6
SWITCH = "switch:n={n},bw=8Mbit,lat=0us"  # 1 MB/s a link, each way


@settings(max_examples=15, deadline=None)
@given(workers=st.integers(2, 6), shards=st.integers(1, 3),
       compute=st.floats(0.0, 2.0), apply_s=st.floats(0.0, 1.0),
       push=st.floats(0.1, 4.0), pull=st.floats(0.1, 4.0))
def test_alike_workers_make_the_round_of_the_two_phases(workers, shards, compute, apply_s,
                                                        push, pull):
    """Dedicated servers with equal shards, every worker computing as long: every pull ends
    at once and every push starts at once, so the round is the phases' in series."""
    base = parse_topology(SWITCH.format(n=workers))
    topology = with_servers(base, shards)
    devices = [*range(workers), *range(workers, workers + shards)]
    push_s, pull_s = phases(ps_sync(workers, shards))
    bulk = (compute + run_collective(push_s, topology, push * MB, devices=devices).time_s
            + apply_s + run_collective(pull_s, topology, pull * MB, devices=devices).time_s)
    got = round_time(topology, devices, push_s, pull_s, (push * MB, pull * MB),
                     [compute] * workers, apply_s)
    assert got == pytest.approx(bulk, rel=1e-6)


def test_a_worker_beside_the_small_shard_pushes_into_the_big_shards_pull():
    """2 workers, ps0 (A = 2 MB) beside worker 0 and ps1 (B = 1 MB) beside worker 1, at
    1 MB/s each way, no compute: worker 0 has pulled B at 1 s and pushes B to ps1 while ps0's
    A is still going to worker 1 (the two share that direction), which ends at 3 s; worker
    1 pushes A back, alone, till 5 s. The phases say 2 + 2 = 4 s."""
    topology = parse_topology(SWITCH.format(n=2))
    push_s, pull_s = phases(ps_sync(2, 2, colocated=True, weights=[2.0, 1.0]))
    got = round_time(topology, None, push_s, pull_s, (3 * MB, 3 * MB), [0.0, 0.0], 0.5)
    assert got == pytest.approx(5.0 + 0.5, rel=1e-3)
    bulk = (run_collective(push_s, topology, 3 * MB).time_s
            + run_collective(pull_s, topology, 3 * MB).time_s)
    assert bulk == pytest.approx(4.0, rel=1e-3)


def test_a_slow_worker_holds_the_round_by_its_compute():
    """One dedicated server, three workers at 1 MB/s, alike but for one computing 3 s more:
    the others' pushes go in while it computes, so its own push is alone on the server's
    link: the round ends 3 - 2 s later, where the phases would have it 3 s later."""
    topology = with_servers(parse_topology(SWITCH.format(n=3)), 1)
    devices = [0, 1, 2, 3]
    push_s, pull_s = phases(ps_sync(3, 1))
    alike = round_time(topology, devices, push_s, pull_s, (MB, MB), [1.0, 1.0, 1.0], 0.0)
    slow = round_time(topology, devices, push_s, pull_s, (MB, MB), [1.0, 1.0, 4.0], 0.0)
    assert alike == pytest.approx(3.0 + 1.0 + 3.0, rel=1e-3)
    assert slow - alike == pytest.approx(3.0 - 2.0, rel=1e-3)
