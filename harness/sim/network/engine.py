"""Timing a schedule on a topology, in two modes that must agree.

* ``fast``: every distinct Step is timed once as a whole: its flows are routed together
  (numpy), share links max-min fairly, and the step lasts until the last one lands; a Step
  standing for ``repeat`` rotated steps costs ``repeat`` times that (the rotation moves chunk
  numbers, not bytes or routes). Flows of ranks in equivalent positions finish in the same
  round, so rounds stay few however many ranks there are. One SimPy timeout per Step.
* ``detailed``: one SimPy process per transfer of every step instance, on a
  :class:`FluidNetwork` that re-shares the links at every start and finish, with routes from
  the plain-Python :func:`path`. Faithful and O(transfers): for small worlds and for tests.

Both use the same model: steps are bulk-synchronous; a flow's bytes leave at its fair rate and
it lands after the route's latency; the collective ends when the last step does.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from harness.sim.network.flow import fluid_step
from harness.sim.network.links import CountingEnvironment, FluidNetwork
from harness.sim.network.topology import Topology, link_table, n_devices, path, route
from harness.sim.schedules.schedule import Schedule, Step

MODES = ("fast", "detailed")

Process = Generator[simpy.Event, object, None]


@dataclass(frozen=True)
class CollectiveResult:
    """What one collective cost on one topology."""

    schedule: str
    nbytes: float
    time_s: float
    steps: int
    transfers: int
    bytes_sent: float  # sum over transfers of their bytes
    class_bytes: dict[str, float] = field(default_factory=dict)  # bytes that crossed a class
    link_bytes: dict[str, float] = field(default_factory=dict)  # sum over links of bytes carried
    class_capacity: dict[str, float] = field(default_factory=dict)  # sum of link capacities
    mode: str = "fast"
    events: int = 0
    wall_s: float = 0.0

    @property
    def algbw(self) -> float:
        """nccl-tests algorithm bandwidth S/t (bytes/s)."""
        return self.nbytes / self.time_s if self.time_s > 0 else float("inf")

    def utilisation(self, window_s: float | None = None) -> dict[str, float]:
        """Mean busy fraction of the links of each class over the collective (or a window)."""
        span = self.time_s if window_s is None else window_s
        return {c: (self.link_bytes.get(c, 0.0) / (cap * span) if cap > 0 and span > 0 else 0.0)
                for c, cap in self.class_capacity.items()}


def _placement(schedule: Schedule, topology: Topology,
               devices: Sequence[int] | np.ndarray | None) -> np.ndarray:
    place = np.arange(schedule.world) if devices is None else np.asarray(devices, np.int64)
    if place.size != schedule.world:
        raise ValueError(f"placement has {place.size} devices for {schedule.world} ranks")
    if schedule.world and (place.max() >= n_devices(topology) or place.min() < 0):
        raise ValueError(f"{schedule.name} needs {schedule.world} devices; the topology has "
                         f"{n_devices(topology)}")
    return place


def run_collective(schedule: Schedule, topology: Topology, nbytes: float, *,
                   mode: str = "fast", devices: Sequence[int] | np.ndarray | None = None
                   ) -> CollectiveResult:
    """Time ``schedule`` moving a buffer of ``nbytes`` per rank on ``topology`` (for an
    all-to-all, a row of its message matrix, its own message included: the mean row where
    the messages differ)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    place = _placement(schedule, topology, devices)
    buffer = nbytes * schedule.world if schedule.collective == "all_to_all" else nbytes
    started = time.perf_counter()
    env = CountingEnvironment()
    table = link_table(topology)
    stats = _Stats(len(table.class_names))
    runner = _fast if mode == "fast" else _detailed
    env.process(runner(env, schedule, topology, buffer, place, stats))
    env.run()
    names = table.class_names
    return CollectiveResult(
        schedule=schedule.name, nbytes=float(nbytes), time_s=float(env.now),
        steps=schedule.n_steps, transfers=stats.transfers, bytes_sent=stats.bytes_sent,
        class_bytes={n: float(stats.class_bytes[i]) for i, n in enumerate(names)},
        link_bytes={n: float(stats.link_bytes[i]) for i, n in enumerate(names)},
        class_capacity=table.class_capacity(), mode=mode, events=env.events_processed,
        wall_s=time.perf_counter() - started)


class _Stats:
    def __init__(self, classes: int) -> None:
        self.transfers = 0
        self.bytes_sent = 0.0
        self.class_bytes = np.zeros(classes)
        self.link_bytes = np.zeros(classes)


def _step_flows(s: Step, place: np.ndarray, chunk_bytes: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source device, destination device and bytes of the transfers that leave their device."""
    src, dst = place[s.src], place[s.dst]
    moving = src != dst
    return src[moving], dst[moving], s.size[moving] * chunk_bytes


def _fast(env: simpy.Environment, schedule: Schedule, topology: Topology, nbytes: float,
          place: np.ndarray, stats: _Stats) -> Process:
    table = link_table(topology)
    chunk = nbytes / schedule.n_chunks if schedule.n_chunks else 0.0
    for s in schedule.steps:
        weight = None
        if s.fan > 1:
            weight = fan_weights(s, topology, place)
            if weight is None:  # the copies are not symmetric here: time them all
                s = s.expanded()
        src, dst, size = _step_flows(s, place, chunk)
        if src.size == 0:
            continue
        routes = route(topology, src, dst)
        duration, _, _ = fluid_step(routes.links, size, routes.latency, table.capacity,
                                    weight)
        times = s.repeat * (s.fan if weight is not None else 1)  # instances it stands for
        stats.transfers += src.size * times
        stats.bytes_sent += float(size.sum()) * times
        klass = np.where(routes.links >= 0, table.klass[np.maximum(routes.links, 0)], -1)
        for c in range(len(table.class_names)):
            on = klass == c
            stats.class_bytes[c] += float(size[on.any(axis=1)].sum()) * times
            stats.link_bytes[c] += float((on.sum(axis=1) * size).sum()) * times
        yield env.timeout(duration * s.repeat)


def fan_weights(s: Step, topology: Topology, place: np.ndarray) -> np.ndarray | None:
    """Per route slot of copy 0's flows, how many copies' flows cross that link: ``fan`` where
    every copy takes the same link (a worker's NIC that pushes to every server), 1 where each
    copy takes its own (a server's NIC). None when the copies are not symmetric images of
    copy 0 (servers under different leaves, a slow server): checked on copies 0, 1 and the
    last for every flow, and on every copy for the first and last flow."""
    def routes(flows: np.ndarray, copies: np.ndarray) -> np.ndarray | None:
        """copies x flows x slots of links, or None if some copy stays on its device."""
        a = place[s.src[flows][None, :] + copies[:, None] * s.fan_src]
        b = place[s.dst[flows][None, :] + copies[:, None] * s.fan_dst]
        if (a == b).any():
            return None
        return route(topology, a.reshape(-1), b.reshape(-1)).links.reshape(
            copies.size, flows.size, -1)

    sampled = routes(np.arange(len(s)), np.array(sorted({0, 1, s.fan - 1})))
    every = routes(np.array([0, len(s) - 1]), np.arange(s.fan))
    if sampled is None or every is None:
        return None
    first = sampled[0]
    shared = (sampled == first).all(axis=0)
    sets = [set(np.unique(x[~shared]).tolist()) for x in sampled]
    common = set(np.unique(first[shared & (first >= 0)]).tolist())
    if any(-1 in a for a in sets) or any(
            a & common or any(a & b for b in sets[i + 1:]) for i, a in enumerate(sets)):
        return None  # a hop some copies skip, or a link one copy owns is another's too
    capacity = link_table(topology).capacity
    base, mine = first[[0, len(s) - 1]], ~shared[[0, len(s) - 1]]
    if ((every != base) & ~mine).any() or (capacity[every[:, mine]] != capacity[base[mine]]).any():
        return None  # a copy leaves the shared path, or owns a faster or slower link
    owned = every[:, mine]  # copies x owned links: no link may belong to two copies
    if len(np.unique(owned)) != len(np.unique(owned[0])) * s.fan:
        return None
    return np.where(shared, float(s.fan), 1.0)


def _detailed(env: simpy.Environment, schedule: Schedule, topology: Topology, nbytes: float,
              place: np.ndarray, stats: _Stats) -> Process:
    table = link_table(topology)
    net = FluidNetwork(env, table.capacity.tolist())
    chunk = nbytes / schedule.n_chunks if schedule.n_chunks else 0.0
    klass = table.klass.tolist()

    for s, _k in schedule.instances():
        procs = []
        for i in range(len(s)):
            a, b = int(place[s.src[i]]), int(place[s.dst[i]])
            if a == b:
                continue
            links, latency = path(topology, a, b)
            size = float(s.size[i]) * chunk
            procs.append(env.process(net.deliver(links, size, latency)))
            stats.transfers += 1
            stats.bytes_sent += size
            classes = [klass[link] for link in links]
            for c in set(classes):
                stats.class_bytes[c] += size
            for c in classes:
                stats.link_bytes[c] += size
        if procs:
            yield env.all_of(procs)
