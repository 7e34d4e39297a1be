"""Asynchronous parameter server: workers pull, compute and push on their own clocks.

Each worker loops: pull the K parameter shards (the touched bytes, ``sparsity``),
compute, push its gradient shards; each server applies a push the moment it lands, one at a
time (``optimizer_s / K`` each). Nobody waits for anybody, so a straggler slows only itself,
and a push may be *stale*: the staleness of a push is the number of updates its shard took
between the worker's pull and this push's update. Reported: throughput, median iteration time,
mean and max staleness.

Flows share links max-min fairly on a SimPy :class:`FluidNetwork`, so servers' ports queue
the pushes of many workers. Symmetry keeps big clusters cheap: beyond
``max_explicit_workers`` workers, W' = max_explicit_workers representatives run against
servers whose links and update rate are W/W' times slower (each representative stands for
W/W' workers: the mean-field reduction); throughput and staleness are scaled back by W/W'.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Generator, Sequence

import simpy

from harness.core.errors import SpecError
from harness.sim.calibration import Calibration, compute_seconds
from harness.sim.network import CountingEnvironment, FluidNetwork
from harness.sim.ps import server_ranks
from harness.sim.step_result import StepResult, worker_classes
from harness.sim.topology import (
    Hierarchy,
    Topology,
    degrade,
    link_table,
    n_devices,
    path,
    with_servers,
)
from workloads.spec import WorkloadSpec

Process = Generator[simpy.Event, object, None]


def simulate_async_ps(topology: Topology, workers: int, profile: WorkloadSpec,
                      calibration: Calibration | None = None, *, shards: int | None = None,
                      colocated: bool = False, stragglers: int = 0,
                      straggler_factor: float = 1.0, iterations: int = 16,
                      max_explicit_workers: int = 32,
                      shard_weights: Sequence[float] | None = None,
                      pull: str = "changed") -> StepResult:
    """Simulate ``iterations`` asynchronous steps per worker; see the module docstring."""
    started = time.perf_counter()
    if not 1 <= workers <= n_devices(topology):
        raise SpecError(f"workers={workers} must be from 1 to {n_devices(topology)}")
    if shard_weights is not None:
        shards = len(shard_weights)
    k = shards if shards is not None else max(1, -(-workers // 8))
    if k < 1 or (colocated and k > workers):
        raise SpecError(f"ps shards={k} must be from 1 to "
                        f"{workers if colocated else 'any number'}")
    compute, source = compute_seconds(profile, calibration)
    w = min(workers, max(max_explicit_workers, k if colocated else 1))
    scale = workers / w
    classes = worker_classes(workers, stragglers, straggler_factor)
    slow = 0 if len(classes) == 1 else max(1, round(stragglers / scale))
    factors = [1.0] * (w - slow) + [float(straggler_factor)] * slow

    topo = topology
    servers = server_ranks(w, k, colocated)
    if colocated:
        server_devices = [int(s) for s in servers]
    else:
        topo = with_servers(topology, k)
        assert isinstance(topology, Hierarchy)
        first = topology.devices + topology.servers
        server_devices = [first + j for j in range(k)]
    if scale > 1:
        for d in server_devices:
            topo = degrade(topo, d, scale)

    env = CountingEnvironment()
    table = link_table(topo)
    net = FluidNetwork(env, table.capacity.tolist())
    crossed = [0.0] * len(table.class_names)  # bytes of messages that crossed each class
    moved = [0.0]  # bytes of messages that left their device (a colocated shard's do not)
    weights = [1.0] * k if shard_weights is None else [float(x) for x in shard_weights]
    if min(weights) <= 0:
        raise SpecError(f"shard weights {weights} must be positive")
    pushed, pulled = profile.ps_bytes(workers, pull)
    shard_bytes = [pushed * x / sum(weights) for x in weights]
    pull_bytes = [pulled * x / sum(weights) for x in weights]
    update_s = profile.optimizer_s / k * scale
    version = [0] * k
    locks = [simpy.Resource(env, capacity=1) for _ in range(k)]
    staleness: list[int] = []
    iteration_s: list[float] = []

    def move(a: int, b: int, nbytes: float) -> Process:
        if a != b:
            moved[0] += nbytes
            links, latency = path(topo, a, b)
            for c in {int(table.klass[link]) for link in links}:
                crossed[c] += nbytes
            yield from net.deliver(links, nbytes, latency)

    def push(worker: int, shard: int, read: int) -> Process:
        yield from move(worker, server_devices[shard], shard_bytes[shard])
        with locks[shard].request() as turn:
            yield turn
            yield env.timeout(update_s)
            staleness.append(version[shard] - read)
            version[shard] += 1

    total = iterations * w  # iterations to simulate, all workers together
    window = {"start": 0.0}  # when the first w iterations (one round, the warm-up) are done
    finished = env.event()

    def worker(i: int, factor: float) -> Process:
        while not finished.triggered:
            begin = env.now
            yield env.all_of([env.process(move(server_devices[j], i, pull_bytes[j]))
                              for j in range(k)])
            read = list(version)
            yield env.timeout(compute * factor)
            yield env.all_of([env.process(push(i, j, read[j])) for j in range(k)])
            iteration_s.append(env.now - begin)
            if len(iteration_s) == w:
                window["start"] = env.now
            if len(iteration_s) == total and not finished.triggered:
                finished.succeed()

    for i, factor in enumerate(factors):
        env.process(worker(i, factor))
    env.run(until=finished)

    # throughput after the warm-up round: fast workers lap slow ones, as they would for real
    end = env.now
    rate = (total - w) / (end - window["start"]) if end > window["start"] else w / end
    throughput = rate * scale * profile.batch_size
    median = statistics.median(iteration_s)
    per_step = workers / len(iteration_s)  # from totals over the run to one step of all workers
    carried = [0.0] * len(table.class_names)
    for link, nbytes in enumerate(net.link_bytes):
        carried[int(table.klass[link])] += nbytes
    capacity = table.class_capacity()
    names = table.class_names
    slowest = compute * max(factors)
    return StepResult(
        strategy="parameter_server_async", workers=workers, step_time_s=median,
        compute_s=compute, optimizer_s=profile.optimizer_s / k,
        comm_s=max(0.0, median - compute), exposed_comm_s=max(0.0, median - compute),
        bytes_per_step=moved[0] * per_step, throughput_samples_s=throughput,
        collectives=0, events=env.events_processed, mode="detailed",
        class_bytes={n: crossed[i] * per_step for i, n in enumerate(names)},
        utilisation={n: carried[i] / (capacity[n] * end) if capacity[n] and end else 0.0
                     for i, n in enumerate(names)},
        wall_s=time.perf_counter() - started, compute_source=source,
        staleness_mean=statistics.fmean(staleness) * scale if staleness else 0.0,
        staleness_max=max(staleness) * scale if staleness else 0.0,
        notes=((f"{w} explicit workers stand for {workers}",) if scale > 1 else ())
        + ((f"slowest worker computes {slowest:.4g} s",) if slow else ()))
