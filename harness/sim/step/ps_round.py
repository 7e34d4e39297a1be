"""A synchronous parameter-server round worker by worker: each pulls, computes and pushes
when it gets there, its flows sharing the links with everyone else's.

Timed as two bulk phases (every pull, then every push), a round is exact when the workers
are alike. They are not where servers sit beside workers or hold unequal shards: torch's
runner on 2 hosts puts ps0 (8.4 MB of mlp:M) beside worker 0 and ps1 (4.2 MB) beside worker
1, so worker 0 pulls 4.2 MB over the link and worker 1 8.4 MB. Worker 0 then computes and
pushes its 4.2 MB to ps1 the same way ps0's 8.4 MB is still coming to worker 1, and worker 1
pushes its 8.4 MB only after that pull: 12.6 MB one way, then 8.4 the other, where the two
phases' busiest directions give 8.4 + 8.4. Measured (2 hosts at 100 Mbit/s, probed 95.7):
1.82 s a step; the phases 1.48 s (-19%); this round 1.79 s (-2%).

A worker's step as our runners run it (harness/runners/torch_ps.py; TF's coordinator joins
each worker's step the same way): pull every server's shard at once, compute, push every
shard at once; a server applies the round once every worker's push is in, and the step ends
with the last server's update.

Beyond ``MAX_WORKERS`` the round is the phases' (data_parallel._ps_step): one worker's head
start is a small part of a round that many workers make together, and the flows, W x K of
them on the simulator's fluid network, would cost more than the rest of a prediction.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import simpy

from harness.sim.network.links import FluidNetwork
from harness.sim.network.topology import Topology, link_table, path
from harness.sim.schedules.schedule import Schedule

MAX_WORKERS = 32

Process = Generator[simpy.Event, object, None]


def transfers(schedule: Schedule, nbytes: float) -> list[tuple[int, int, float]]:
    """(source rank, destination rank, bytes) of every message of ``schedule`` moving a
    buffer of ``nbytes``."""
    chunk = nbytes / schedule.n_chunks if schedule.n_chunks else 0.0
    return [(int(a), int(b), float(size) * chunk)
            for s, _ in schedule.instances()
            for a, b, size in zip(s.src, s.dst, s.size, strict=True)]


def round_time(topology: Topology, devices: Sequence[int] | None, push: Schedule,
               pull: Schedule, nbytes: tuple[float, float], compute_s: Sequence[float],
               apply_s: float) -> float:
    """Seconds from the round's first pull to its last server's update: worker w (rank w,
    device ``devices[w]``, or w) pulls its messages of ``pull`` (``nbytes[1]`` a worker),
    computes ``compute_s[w]``, pushes its messages of ``push`` (``nbytes[0]``); a server
    applies (``apply_s``) once every push to it is in."""
    env = simpy.Environment()
    net = FluidNetwork(env, link_table(topology).capacity.tolist())
    pulls, pushes = transfers(pull, nbytes[1]), transfers(push, nbytes[0])
    arrived: dict[int, float] = {}  # server rank: when the last push to it was in

    def device(rank: int) -> int:
        return int(devices[rank]) if devices is not None else rank

    def move(src: int, dst: int, size: float) -> Process:
        a, b = device(src), device(dst)
        if a != b and size > 0:  # a colocated server's own worker moves nothing
            links, latency = path(topology, a, b)
            yield from net.deliver(links, size, latency)

    def landed(server: int, flow: simpy.Process) -> Process:
        yield flow
        arrived[server] = max(arrived.get(server, 0.0), env.now)

    def worker(w: int) -> Process:
        yield env.all_of([env.process(move(a, b, n)) for a, b, n in pulls if b == w])
        yield env.timeout(compute_s[w])
        yield env.all_of([env.process(landed(b, env.process(move(a, b, n))))
                          for a, b, n in pushes if a == w])

    for w in range(len(compute_s)):
        env.process(worker(w))
    env.run()
    return max(arrived.values(), default=env.now) + apply_s
