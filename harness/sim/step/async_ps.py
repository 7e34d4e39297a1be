"""Asynchronous parameter server: workers pull, compute and push on their own clocks.

Each worker loops: pull the K parameter shards (the touched bytes, ``sparsity``),
compute, push its gradient shards; each server applies a push the moment it lands, one at a
time (``optimizer_s / K`` each). Nobody waits for anybody, so a straggler slows only itself,
and a push may be *stale*: the staleness of a push is the number of updates its shard took
between the worker's pull and this push's update. Reported: throughput, median iteration time,
mean and max staleness.

Flows share links max-min fairly on a SimPy :class:`FluidNetwork`, so servers' ports queue
the pushes of many workers. Symmetry keeps big clusters cheap (the mean-field reduction):
beyond ``max_explicit_workers`` workers, W' representatives spread evenly over the workers'
devices each stand for W/W' workers, and the shards of each weight are reduced by the same
factor, each representative server carrying its shards' bytes on links rescaled so that
they carry what one real server's do (a colocated server's worker reaches the shards it
stands for but does not hold through its NIC and back). Throughput is scaled back by W/W'
and staleness, counted in the other workers' updates, by (W - 1)/(W' - 1). Where classes
divide evenly on one switch the reduction is exact up to the fluid model's symmetry and a
test holds it within 2% of the explicit simulation; elsewhere the row's notes say that it
is not exact.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import simpy

from harness.core.errors import SpecError
from harness.sim.network.links import CountingEnvironment, FluidNetwork
from harness.sim.network.topology import (
    Hierarchy,
    LinkTable,
    Topology,
    Torus,
    link_table,
    loop_path,
    n_devices,
    path,
    rescale_device,
    scale_bandwidth,
    with_servers,
)
from harness.sim.schedules.ps import server_ranks
from harness.sim.step.result import StepResult, worker_classes
from harness.sim.systems.calibration import Calibration, compute_seconds, optimizer_seconds
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.spec import WorkloadSpec

Process = Generator[simpy.Event, object, None]

#: Representative workers by default. Colocated servers that take time to apply a push keep
#: twice as many: a server's own worker pushes to it without crossing the network, 1 push
#: in W' of its queue, which the reduction times as an average one, the coarser the fewer
#: representatives there are (tests/test_async_ps_reduction.py holds how far at 16 and 32).
EXPLICIT_WORKERS = {"dedicated": 16, "colocated": 32}

#: What a reduced simulation says of itself: the bound tests/test_async_ps_reduction.py holds
#: it to against the explicit simulation, where one is affordable.
MEAN_FIELD_NOTE = ("mean-field reduction (symmetric workers and shards): within 2% of the "
                   "explicit simulation's throughput and mean staleness where checked (up to "
                   "64 workers, 16 shards, servers' updates up to 2% of a step)")


INEXACT_NOTE = ("mean-field reduction, not exact here (leaves under a spine, a NIC or a host "
                "shared by a server and its workers, servers that take time to apply a push "
                "beside their workers or from stragglers or uneven shards, or classes of "
                "workers or shards that do not divide evenly): "
                "its error against the explicit simulation is not bounded")


@dataclass(frozen=True)
class ShardGroup:
    """A representative shard: ``stands_for`` real shards of equal weight, whose bytes it
    carries (``weight``: their weights together)."""

    weight: float
    stands_for: float


def representative_shards(weights: Sequence[float], scale: float) -> list[ShardGroup]:
    """The shards reduced as the workers are (``scale`` real workers per representative):
    each group of equal weight keeps one representative per ``scale`` shards (at least one),
    so a representative server stands for as many shards as a representative worker stands
    for workers and its links carry what one real server's do. Uneven weights keep one
    group per distinct weight, in the order they first appear."""
    counts = Counter(weights)
    out: list[ShardGroup] = []
    for weight, count in counts.items():
        reps = max(1, min(count, round(count / scale))) if scale > 1 else count
        out += [ShardGroup(weight * count / reps, count / reps)] * reps
    return out


def representatives(workers: int, most: int, counts: Sequence[int], per_host: int = 1
                    ) -> tuple[int, bool]:
    """How many representative workers to simulate, at most ``most``, and whether the
    reduction is exact: the largest count that divides the workers and reduces every class
    (``counts``: workers of each speed, colocated shards of each weight) by the same whole
    factor, spread evenly over hosts of ``per_host`` devices (as many on each host used);
    where no count from ``most`` / 2 up does, ``most`` itself, classes rounded."""
    top = min(workers, most)
    for w in range(top, max(1, top // 2) - 1, -1):
        spacing = workers // w
        if workers % w == 0 and (spacing % per_host == 0 or per_host % spacing == 0) \
                and all(c * w % workers == 0 for c in counts):
            return w, True
    return top, False


def representative_devices(topology: Topology, workers: int, w: int) -> list[int]:
    """Where ``w`` representatives of devices 0..workers-1 sit: spread evenly, so as many
    of a representative's peers share its host, leaf or NIC as of a real worker's; where
    hosts' devices share one NIC, in whole hosts spread evenly (the NIC is loaded as a real
    host's); on a torus, the first ``w`` (neighbours stay neighbours)."""
    if w == workers or isinstance(topology, Torus):
        return list(range(w))
    per_host = topology.per_host
    if per_host > 1 and topology.nic != "per_device" and w % per_host == 0 \
            and workers % per_host == 0:
        hosts, chosen = workers // per_host, w // per_host
        return [h * hosts // chosen * per_host + g for h in range(chosen)
                for g in range(per_host)]
    return [i * workers // w for i in range(w)]


def reduction(topology: Topology, workers: int, most: int, weights: Sequence[float],
              classes: Sequence[int], colocated: bool, updates: bool = False
              ) -> tuple[int, list[ShardGroup], bool]:
    """Representative workers and shards for a cluster, and whether the reduction is exact
    (the mean-field bound holds): every class reduced by one whole factor, on one switch
    whose devices have NICs of their own, colocated servers only on single-device hosts
    (a host's peers reach its server without the NIC: a share the representatives, spread
    over more hosts, do not keep), spaced evenly, one kind of shard, each standing for as
    many shards as its worker stands for workers, and applying pushes at once (``updates``:
    they take time, and a server's own worker's push, first in its queue, is timed as an
    average one); servers that take time to update are exact only for alike workers and
    shards."""
    counts = list(classes) + (list(Counter(weights).values()) if colocated else [])
    per_host = getattr(topology, "per_host", 1)
    w, exact = representatives(workers, most, counts, per_host)
    groups = representative_shards(weights, workers / w)
    if colocated and len(groups) > w:  # a server needs a worker to sit beside
        w, exact = min(workers, len(groups)), False
        groups = representative_shards(weights, workers / w)
    if w < workers:
        exact = exact and isinstance(topology, Hierarchy) and topology.spine is None \
            and (per_host == 1 or topology.nic == "per_device")
        # a push's turn in a queue is timed as its workers' average turn, which is theirs
        # where their pushes land together: alike workers, alike shards
        exact = exact and not (updates and (len(classes) > 1 or len(set(weights)) > 1))
        if colocated:
            exact = exact and per_host == 1 and not updates \
                and workers % len(weights) == 0 \
                and len(set(weights)) == 1 \
                and all(g.stands_for == workers / w for g in groups)
    return w, groups, exact


def simulate_async_ps(topology: Topology, workers: int, profile: WorkloadSpec,
                      calibration: Calibration | None = None, *,
                      execution: Execution = DEFAULT_EXECUTION, stragglers: int = 0,
                      straggler_factor: float = 1.0, iterations: int = 16,
                      max_explicit_workers: int | None = None) -> StepResult:
    """Simulate ``iterations`` asynchronous steps per worker; see the module docstring."""
    started = time.perf_counter()
    if not 1 <= workers <= n_devices(topology):
        raise SpecError(f"workers={workers} must be from 1 to {n_devices(topology)}")
    ps = execution.ps
    colocated = ps.colocated
    k = ps.shard_count(workers)
    weights = list(ps.weights(workers))
    compute, source = compute_seconds(profile, calibration, execution)
    update = optimizer_seconds(calibration)
    classes = worker_classes(workers, stragglers, straggler_factor)
    if max_explicit_workers is None:
        max_explicit_workers = EXPLICIT_WORKERS["colocated" if colocated else "dedicated"]
    w, groups, exact = reduction(topology, workers, max_explicit_workers, weights,
                                 [c for c, _ in classes], colocated,
                                 update > 0)
    scale = workers / w
    slow = 0 if len(classes) == 1 else max(1, round(stragglers / scale))
    factors = [1.0] * (w - slow) + [float(straggler_factor)] * slow
    topo, devices, server_devices = _placed(topology, workers, w, k, groups, colocated)
    run = _run(topo, devices, server_devices, groups, sum(weights), profile, k, workers,
               compute, factors, iterations, ps.pull, execution.gradient_element_bytes, update)
    # throughput after the warm-up round: fast workers lap slow ones, as they would for real
    end, total = run.end, iterations * w
    rate = (total - w) / (end - run.window_start) if end > run.window_start else w / end
    throughput = rate * scale * profile.batch_size
    median = statistics.median(run.iteration_s)
    # a push is stale by the other workers' updates: W - 1 of them, which w - 1 stand for
    others = (workers - 1) / (w - 1) if w > 1 else 0.0
    per_step = workers / len(run.iteration_s)  # from totals over the run to one step of all
    table, staleness = run.table, run.staleness
    carried = [0.0] * len(table.class_names)
    for link, nbytes in enumerate(run.link_bytes):
        carried[int(table.klass[link])] += nbytes
    capacity = table.class_capacity()
    names = table.class_names
    slowest = compute * max(factors)
    rep_k = len(groups)
    return StepResult(
        strategy="parameter_server_async", workers=workers, step_time_s=median,
        compute_s=compute, optimizer_s=update / k,
        comm_s=max(0.0, median - compute), exposed_comm_s=max(0.0, median - compute),
        bytes_per_step=run.moved * per_step, throughput_samples_s=throughput,
        collectives=0, events=run.events, mode="detailed",
        class_bytes={n: run.crossed[i] * per_step for i, n in enumerate(names)},
        utilisation={n: carried[i] / (capacity[n] * end) if capacity[n] and end else 0.0
                     for i, n in enumerate(names)},
        wall_s=time.perf_counter() - started, compute_source=source,
        staleness_mean=statistics.fmean(staleness) * others if staleness else 0.0,
        staleness_max=max(staleness) * others if staleness else 0.0,
        notes=((f"{w} explicit workers stand for {workers}",) if scale > 1 else ())
        + ((f"{rep_k} representative shards stand for {k}",) if rep_k < k else ())
        + ((MEAN_FIELD_NOTE if exact else INEXACT_NOTE,) if scale > 1 or rep_k < k else ())
        + ((f"slowest worker computes {slowest:.4g} s",) if slow else ()))


def _placed(topology: Topology, workers: int, w: int, k: int, groups: Sequence[ShardGroup],
            colocated: bool) -> tuple[Topology, list[int], list[int]]:
    """The topology the representatives run on, their workers' devices and their servers'.

    Each representative server carries its real shards' bytes; its own links carry them at
    the rate of the servers it stands for, loaded by the workers each representative worker
    stands for: ``scale`` / shards-it-stands-for times slower."""
    scale = workers / w
    rep_k = len(groups)
    topo = topology
    devices = representative_devices(topology, workers, w)
    if colocated:
        server_devices = [devices[int(s)] for s in server_ranks(w, rep_k, True)]
    else:  # every real server host is there; the representatives spread over them evenly
        topo = with_servers(topology, k)
        assert isinstance(topology, Hierarchy)
        first = topology.devices + topology.servers
        server_devices = [first + j * k // rep_k for j in range(rep_k)]
    for d, group in zip(server_devices, groups, strict=True):
        if scale != group.stands_for:
            topo = rescale_device(topo, d, scale / group.stands_for)
    if scale > 1 and isinstance(topo, Hierarchy) and topo.spine is not None:
        # a leaf's uplink carries the traffic of every worker and server in it, of which the
        # representatives there (spread evenly) carry 1 / scale
        topo = scale_bandwidth(topo, 1 / scale, only=topo.spine.name)
    return topo, devices, server_devices


@dataclass
class _Run:
    """What the representatives' run measured, totals over the run."""

    table: LinkTable
    link_bytes: list[float]
    end: float = 0.0
    window_start: float = 0.0  # when the first round (the warm-up) was done
    events: int = 0
    moved: float = 0.0  # bytes of messages that left their device (a colocated shard's do not)
    crossed: list[float] = field(default_factory=list)  # bytes that crossed each link class
    staleness: list[int] = field(default_factory=list)
    iteration_s: list[float] = field(default_factory=list)


def _run(topo: Topology, devices: list[int], server_devices: list[int],
         groups: Sequence[ShardGroup], total_weight: float, profile: WorkloadSpec, k: int,
         workers: int,
         compute: float, factors: list[float], iterations: int, pull: str, element: int,
         update: float) -> _Run:
    """The representatives pulling, computing and pushing on their own clocks, in SimPy."""
    w, rep_k = len(factors), len(groups)
    scale = workers / w
    env = CountingEnvironment()
    table = link_table(topo)
    net = FluidNetwork(env, table.capacity.tolist())
    run = _Run(table=table, link_bytes=[], crossed=[0.0] * len(table.class_names))
    pushed, pulled = profile.ps_bytes(workers, pull, element)
    shard_bytes = [pushed * g.weight / total_weight for g in groups]
    pull_bytes = [pulled * g.weight / total_weight for g in groups]
    # a representative server applies its shards' updates in parallel, as their servers do,
    # each server ``scale`` times as many as a representative worker pushes
    update_s = update / k * scale
    # a representative's push is its workers' pushes, applied one after another in its turn:
    # on average a real push of the turn is applied (scale + 1) / 2 updates in, when the
    # worker goes on, the server busy with the rest (so a queue of pushes that land together
    # is timed as the real one on average, not in batches of ``scale``)
    applied_s = update_s * (scale + 1) / (2 * scale)
    # a real worker beside a server holds one of the shards its representative server stands
    # for: the rest of that server's bytes cross the NIC, to and from the others like it
    loops = [1.0 - 1.0 / g.stands_for for g in groups]
    version = [0] * rep_k
    locks = [simpy.Resource(env, capacity=1) for _ in range(rep_k)]

    def move(a: int, b: int, nbytes: float, loop: float = 0.0) -> Process:
        """``nbytes`` from a to b; where they are one device, the ``loop`` share of them goes
        out through its NIC and back (to and from the other real workers and servers a
        representative stands for)."""
        if a == b:
            links, latency = loop_path(topo, a)
            nbytes *= loop if links else 0.0
        else:
            links, latency = path(topo, a, b)
        if nbytes > 0:
            run.moved += nbytes
            for c in {int(table.klass[link]) for link in links}:
                run.crossed[c] += nbytes
            yield from net.deliver(links, nbytes, latency)

    def push(worker: int, shard: int, read: int) -> Process:
        yield from move(worker, server_devices[shard], shard_bytes[shard], loops[shard])
        turn = locks[shard].request()
        yield turn
        yield env.timeout(applied_s)
        run.staleness.append(version[shard] - read)
        version[shard] += 1
        env.process(release(shard, turn))

    def release(shard: int, turn: simpy.Event) -> Process:
        yield env.timeout(update_s - applied_s)  # the rest of its workers' updates
        locks[shard].release(turn)

    total = iterations * w  # iterations to simulate, all workers together
    finished = env.event()

    def worker(i: int, factor: float) -> Process:
        while not finished.triggered:
            begin = env.now
            yield env.all_of([env.process(move(server_devices[j], devices[i],
                                                   pull_bytes[j], loops[j]))
                              for j in range(rep_k)])
            read = list(version)
            yield env.timeout(compute * factor)
            yield env.all_of([env.process(push(devices[i], j, read[j])) for j in range(rep_k)])
            run.iteration_s.append(env.now - begin)
            if len(run.iteration_s) == w:
                run.window_start = env.now
            if len(run.iteration_s) == total and not finished.triggered:
                finished.succeed()

    for i, factor in enumerate(factors):
        env.process(worker(i, factor))
    env.run(until=finished)
    run.end, run.events, run.link_bytes = env.now, env.events_processed, list(net.link_bytes)
    return run
