"""One data-parallel training step: compute, the exchange, and how much of the exchange
compute hides.

A step is forward (1/3 of compute), backward (2/3), the exchange, and the optimizer:

* all-reduce strategies (DDP, Mirrored, MultiWorkerMirrored): gradients fill buckets
  (``Execution.ddp_bucket_bytes``, 25 MiB as DDP) at an even pace through backward; each bucket is
  all-reduced as soon as every worker has it, one collective at a time (one NCCL stream), so
  communication overlaps the rest of backward;
* TensorFlow's custom loop under MirroredStrategy / MultiWorkerMirroredStrategy
  (``allreduce_after_backward``): the whole backward first (``strategy.run`` returns every
  gradient before ``apply_gradients`` reduces them), then one ring all-reduce of the dense
  gradients (one pack: ``CommunicationOptions.bytes_per_pack`` defaults to 0) and a ring
  all-gather of the embedding gradients' touched rows, which TF hands over as
  ``IndexedSlices`` (values and int64 indices) and gathers rather than all-reduces;
* FSDP: units of one block's parameters (``Execution.fsdp_unit_bytes``; a stated bucket, or
  DDP's where the workload has no blocks); each unit is all-gathered before its forward
  and again before its backward (prefetched one unit ahead), its gradient reduce-scattered
  after; the optimizer works on a 1/W shard;
* synchronous parameter server / central storage: compute, then push and pull the touched
  bytes (``sparsity``), the servers' optimizer in between (over every worker's
  gradient of the round, summed: W replicas' rows, split among the shards);
* embedding sharding (DLRM's hybrid): each replica asks the owners of the distinct rows it
  looks up for them (all-to-all of the counts, the (table, id) pairs, then the rows, each
  owner answering its share) before forward; after backward the rows' gradients go back to
  their owners (all-to-all) and the dense
  gradients are all-reduced (one ring), as harness/runners/torch_embedding_sharding runs it;

Workers are identical except for ``stragglers`` workers ``straggler_factor`` times slower.
By symmetry one SimPy process per class of workers (normal, slow) stands for all of them; a
collective starts when the last class has its data. Collective times come from the engine,
once per distinct message size.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sequence

import numpy as np
import simpy

from harness.core.errors import SpecError
from harness.sim.model.sparse_traffic import embedding_owner_shares
from harness.sim.network.engine import CollectiveResult, run_collective
from harness.sim.network.links import CountingEnvironment
from harness.sim.network.topology import (
    Hierarchy,
    Topology,
    n_devices,
    scale_bandwidth,
    with_servers,
)
from harness.sim.schedules.collectives import (
    all_to_all,
    ring_all_gather,
    ring_allreduce,
)
from harness.sim.schedules.ps import central_storage, phases, ps_sync
from harness.sim.schedules.schedule import Schedule
from harness.sim.step import ps_round
from harness.sim.step.fsdp import UnitPass, unit_timeline
from harness.sim.step.result import StepResult, worker_classes
from harness.sim.step.strategies import (
    AFTER_BACKWARD,
    ALLREDUCE,
    EMBEDDING_SHARDING,
    allreduce_schedule,
    channel_rings,
    fsdp_schedules,
)
from harness.sim.systems.calibration import Calibration, compute_seconds, optimizer_seconds
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.spec import WorkloadSpec

Process = Generator[simpy.Event, object, None]


def buckets(total: float, bucket: float) -> list[float]:
    """Sizes of consecutive buckets of at most ``bucket`` bytes covering ``total``."""
    full, rest = divmod(total, bucket)
    return [float(bucket)] * int(full) + ([rest] if rest > 0 else [])


class _Collectives:
    """Collective results per (schedule, size), computed once each."""

    def __init__(self, topology: Topology, mode: str, devices: list[int] | None = None):
        self.topology, self.mode, self.devices = topology, mode, devices
        self.cache: dict[tuple[str, float, float], CollectiveResult] = {}
        self.log: list[CollectiveResult] = []
        self.names: dict[int, str] = {}
        self.alive: list[Schedule] = []

    def time(self, schedule: Schedule, nbytes: float, share: float = 1.0) -> float:
        """``schedule``'s time for ``nbytes``; ``share``: the links' share it reaches
        against the topology's (an all-to-all's, where the library's differs)."""
        name = self.names.get(id(schedule))
        if name is None:  # a step calls this per bucket: describe each schedule once
            moves = hash(tuple(a.tobytes() for s in schedule.steps
                               for a in (s.src, s.dst, s.lo, s.size)))
            name = self.names[id(schedule)] = (
                f"{schedule.name}/{schedule.n_chunks}/{schedule.world}/{moves}")
            self.alive.append(schedule)  # keeps its id from being reused
        key = (name, nbytes, share)
        if key not in self.cache:
            topology = (self.topology if share == 1.0
                        else scale_bandwidth(self.topology, share))
            self.cache[key] = run_collective(schedule, topology, nbytes, mode=self.mode,
                                             devices=self.devices)
        self.log.append(self.cache[key])
        return self.cache[key].time_s


def simulate_step(strategy: str, topology: Topology, workers: int, profile: WorkloadSpec,
                  calibration: Calibration | None = None, *, stragglers: int = 0,
                  straggler_factor: float = 1.0, mode: str = "fast",
                  execution: Execution = DEFAULT_EXECUTION, library: str = "nccl",
                  runtime_s: float = 0.0, exchange_share: float = 1.0,
                  oneway_share: float = 1.0) -> StepResult:
    """Simulate one step of ``strategy`` (a simulator name) on the first ``workers`` devices.

    ``library``: whose collectives run them, "nccl" (GPUs) or "gloo" (CPUs, emulated hosts),
    where they differ in bytes (gloo's reduce-scatter is an all-reduce). ``execution``: how
    the device computes (the compute's precision and framework defaults) and the parameter
    servers' deployment (their shards, placement and what a worker pulls).
    ``runtime_s``: the framework runtime's own time per synchronous step beyond what the
    model times (RPC, Python bookkeeping, launch costs: harness/predict/step.py measures it on
    loopback), in series with the rest. ``exchange_share``: the links' share an all-to-all
    reaches against the topology's (embedding sharding's exchange), ``oneway_share`` what its
    messages one way beyond their reverse reach (``_exchange_time``).

    The topology should already carry the calibration's link costs (calibration.apply);
    here the calibration only supplies the compute time.
    """
    if not 1 <= workers <= n_devices(topology):
        raise SpecError(f"workers={workers} must be from 1 to the topology's "
                        f"{n_devices(topology)} devices")
    if strategy == "parameter_server_async":
        from harness.sim.step.async_ps import simulate_async_ps

        return simulate_async_ps(topology, workers, profile, calibration, execution=execution,
                                 stragglers=stragglers, straggler_factor=straggler_factor)
    for name, value in (("exchange_share", exchange_share), ("oneway_share", oneway_share)):
        if not (math.isfinite(value) and value > 0):
            raise SpecError(f"{name} {value} must be a positive number")
    started = time.perf_counter()
    compute, source = compute_seconds(profile, calibration, execution)
    classes = worker_classes(workers, stragglers, straggler_factor)
    env = CountingEnvironment()
    colls = _Collectives(topology, mode)
    update = optimizer_seconds(calibration)  # what the step spends in the optimizer
    optimizer = after = update  # after: the part of it that runs after the exchange
    element = execution.gradient_element_bytes
    if strategy in ALLREDUCE:
        finish = _allreduce_step(env, strategy, topology, workers, profile, compute, classes,
                                 colls, execution)
    elif strategy == AFTER_BACKWARD:
        finish = _after_backward_step(env, topology, workers, profile, compute, classes, colls,
                                      element)
    elif strategy == EMBEDDING_SHARDING:
        finish = _embedding_step(topology, workers, profile, compute, classes, colls,
                                 execution, exchange_share, oneway_share)
    elif strategy == "fsdp":
        optimizer = after = update / workers  # each rank updates its shard
        finish = _fsdp_step(env, topology, workers, profile, compute, classes, colls, library,
                            execution)
    elif strategy in ("parameter_server", "central_storage"):
        finish, colls, optimizer = _server_step(
            env, strategy, topology, workers, profile, compute, classes, mode, execution,
            update)
        after = 0.0
    else:
        raise SpecError(f"unknown simulator strategy {strategy!r}")
    env.run()
    slowest = compute * max(f for _, f in classes)
    step_time = finish() + after + runtime_s
    sent = sum(r.bytes_sent for r in colls.log)
    class_bytes, link_bytes, capacity = _class_totals(colls.log)
    return StepResult(
        strategy=strategy, workers=workers, step_time_s=step_time, compute_s=slowest,
        optimizer_s=optimizer, comm_s=sum(r.time_s for r in colls.log),
        exposed_comm_s=max(0.0, step_time - slowest - optimizer), bytes_per_step=sent,
        throughput_samples_s=workers * profile.batch_size / step_time,
        collectives=len(colls.log), class_bytes=class_bytes,
        utilisation={k: link_bytes[k] / (capacity[k] * step_time) if capacity[k] else 0.0
                     for k in link_bytes},
        events=env.events_processed + sum(r.events for r in colls.cache.values()), mode=mode,
        wall_s=time.perf_counter() - started, compute_source=source)


def _class_totals(log: Sequence[CollectiveResult]) -> tuple[dict[str, float], dict[str, float],
                                                          dict[str, float]]:
    """Over a step's collectives, per link class: the bytes that crossed it, the bytes its
    links carried, and its capacity."""
    class_bytes: dict[str, float] = {}
    link_bytes: dict[str, float] = {}
    capacity: dict[str, float] = {}
    for r in log:
        for k, v in r.class_bytes.items():
            class_bytes[k] = class_bytes.get(k, 0.0) + v
            link_bytes[k] = link_bytes.get(k, 0.0) + r.link_bytes[k]
            capacity[k] = r.class_capacity[k]
    return class_bytes, link_bytes, capacity


def _server_step(env: CountingEnvironment, strategy: str, topology: Topology, workers: int,
                 profile: WorkloadSpec, compute: float, classes: list[tuple[int, float]],
                 mode: str, execution: Execution, update: float
                 ) -> tuple[Callable[[], float], _Collectives, float]:
    """A synchronous parameter server's or central storage's round: its finish, the
    collectives it ran on, and the servers' update time (mid-exchange, none after it;
    ``update``: the optimizer's per step on one replica's gradient)."""
    ps = execution.ps
    colls = _Collectives(topology, mode)
    colocated = ps.colocated or strategy == "central_storage"
    shards = 1 if strategy == "central_storage" else ps.shard_count(workers, colocated)
    if not colocated:
        colls = _Collectives(with_servers(topology, shards), mode,
                             [*range(workers), *_server_devices(topology, shards)])
    # each server's own (push, pull) bytes where the runner's are known (for its one batch,
    # not a sum of several: ``WorkloadSpec.drawing``), else the step's bytes split as the
    # shards' sizes
    traffic = ps.traffic if strategy == "parameter_server" and profile.draws == 1 else None
    if traffic is not None and len(traffic[0]) != shards:
        traffic = None
    nbytes = ((sum(traffic[0]), sum(traffic[1])) if traffic
              else profile.ps_bytes(workers, ps.pull, execution.gradient_element_bytes))
    if strategy == "central_storage":
        push = back = phases(central_storage(workers))
    else:
        push_weights, pull_weights = traffic or (ps.shard_weights, ps.shard_weights)
        push = phases(ps_sync(workers, shards, colocated, weights=push_weights,
                              beside=ps.beside))
        back = phases(ps_sync(workers, shards, colocated, weights=pull_weights,
                              beside=ps.beside))
    # on the servers, mid-exchange: a round applies every worker's gradient (summed)
    optimizer = update * workers / shards
    finish = _ps_step(env, (push[0], back[1]), nbytes, compute, classes, colls, optimizer)
    return finish, colls, optimizer


#: Data-parallel strategies whose exchange runs with every micro-batch when a step
#: accumulates several: FSDP gathers the weights for each forward and backward and
#: reduce-scatters each backward's gradients (FSDP2's default; skipping the reduction,
#: ``set_requires_gradient_sync(False)``, keeps unsharded gradients, the memory FSDP exists
#: to save); embedding sharding sends each micro-batch's lookups to the tables' owners and
#: their rows and gradients back, forward and backward (its dense layers' all-reduce, once a
#: step in a run, is then counted with each micro-batch too: an overestimate of that part
#: only). The others accumulate locally and exchange once per step (DDP's ``no_sync``, a
#: parameter server's worker pushing its summed gradient).
EXCHANGES_EVERY_MICROBATCH = frozenset({"fsdp", EMBEDDING_SHARDING})


def accumulated_step(strategy: str, step_s: float, compute_s: float, optimizer_s: float,
                     times: int, add_s: float = 0.0) -> float:
    """A simulated step of one micro-batch per replica, as a step of ``times`` micro-batches
    (gradient accumulation): the ones before the simulated one add their compute, and each
    after the first its gradients into the accumulated ones (``add_s``); or, where the
    exchange runs with each micro-batch, the whole step but the optimizer's update (FSDP adds
    only its shard, 1/replicas of the values: not counted)."""
    if times <= 1:
        return step_s
    if strategy in EXCHANGES_EVERY_MICROBATCH:
        return times * (step_s - optimizer_s) + optimizer_s
    return step_s + (times - 1) * (compute_s + add_s)


def _server_devices(topology: Topology, shards: int) -> list[int]:
    assert isinstance(topology, Hierarchy)
    return [topology.devices + topology.servers + k for k in range(shards)]


def _compute(env: simpy.Environment, seconds: float,
             marks: list[tuple[float, simpy.Event]]) -> Process:
    """Run ``seconds`` of compute, firing each event once its fraction of the time is done."""
    done = 0.0
    for fraction, event in marks:
        yield env.timeout(seconds * fraction - done)
        done = seconds * fraction
        event.succeed()


def _allreduce_step(env: simpy.Environment, strategy: str, topology: Topology, workers: int,
                    profile: WorkloadSpec, compute: float, classes: list[tuple[int, float]],
                    colls: _Collectives, execution: Execution) -> Callable[[], float]:
    """Buckets fill at an even pace through backward; one collective at a time, each as soon
    as every worker has its bucket. No SimPy process per bucket: with one stream the bucket
    order is fixed, so each collective starts at max(previous end, bucket ready on the
    slowest worker), the same times the event loop gave (a 175B model has 28,000 buckets)."""
    total = profile.gradient_bytes(execution.gradient_element_bytes)
    sizes = buckets(total, execution.ddp_bucket_bytes) if workers > 1 else []
    slowest = compute * max(f for _, f in classes)
    schedules = {size: allreduce_schedule(strategy, topology, workers, size)
                 for size in set(sizes)}
    end, cum = 0.0, 0.0
    for size in sizes:
        cum += size
        ready = slowest * (1 / 3 + 2 / 3 * cum / total)
        end = max(end, ready) + colls.time(schedules[size], size)
    finish = max(end, slowest)
    return lambda: finish


def _after_backward_step(env: simpy.Environment, topology: Topology, workers: int,
                         profile: WorkloadSpec,
                         compute: float, classes: list[tuple[int, float]], colls: _Collectives,
                         element: int) -> Callable[[], float]:
    state = {"end": 0.0}
    dense, rows = profile.dense_bytes(element), profile.lookup_rows_bytes(element)
    allreduce = channel_rings(ring_allreduce, topology, workers)
    gather = channel_rings(ring_all_gather, topology, workers)

    def run() -> Process:
        yield env.timeout(compute * max(f for _, f in classes))
        if workers > 1 and dense > 0:
            yield env.timeout(colls.time(allreduce, dense))
        if workers > 1 and rows > 0:  # every replica's rows to every replica
            # TF gathers each table's IndexedSlices on its own: their lengths (they differ
            # between replicas), then the values, then the int64 indices
            tables = profile.sparse_tables
            index = rows * 8 / (profile.embedding_row_bytes + 8)
            for _ in range(tables):
                for size in (8.0, (rows - index) / tables, index / tables):
                    yield env.timeout(colls.time(gather, size * workers))
        state["end"] = env.now

    env.process(run())
    return lambda: state["end"]


def _exchange_time(colls: _Collectives, matrix: np.ndarray, share: float,
                   oneway: float = 1.0) -> float:
    """An all-to-all of ``matrix`` (bytes rank i sends rank j): what each pair sends both
    ways at ``share``, what one of them sends beyond the other at ``oneway`` (each against
    the topology's links; ``oneway``: the probed rate where they carry a library's share).

    The all-to-all's share is read from a uniform sweep, where every link carries as much
    both ways (each direction's acknowledgements, we take it, queue behind the other's data
    in the shaper's 100 ms queue). An exchange of unequal owners is lopsided (5 hosts in
    racks of 3 + 2, tables 2, 2, 2, 1, 1: the rows cross the uplink twice as heavily one
    way), and traffic one way reaches the probed rate on these links: the 5- and 4-host
    racked clusters' broadcasts (0-2% at every size) and parameter servers' pushes and pulls
    (1-2%) at the probed rate, where their all-to-alls, all-gathers and all-reduces, loaded
    both ways, lose 10-20% from 4 MiB."""
    moving = np.array(matrix, dtype=float)
    np.fill_diagonal(moving, 0.0)
    both = np.minimum(moving, moving.T)
    took = 0.0
    for part, at in ((both, share), (moving - both, oneway)):
        if part.sum() > 0:
            took += colls.time(all_to_all(len(part), part), part.sum() / len(part), at)
    return took


def _embedding_step(topology: Topology, workers: int, profile: WorkloadSpec,
                    compute: float, classes: list[tuple[int, float]], colls: _Collectives,
                    execution: Execution = DEFAULT_EXECUTION, share: float = 1.0,
                    oneway: float = 1.0) -> Callable[[], float]:
    """Each replica's distinct rows (``sparse_rows_bytes``: their values and an int64 id
    each) asked of their owners in the owners' shares (``execution.owner_shares``, else a
    built-in model's by its runner's placement, else evenly), its own share never leaving it: the
    requests (a (table, id) pair of int64 per row) and the rows' gradients go to the owners,
    the rows come back from them; everything in series, as one rank runs it. ``share``: the
    links' share the all-to-alls reach against the all-reduce's, ``oneway`` what traffic one
    way reaches (``_exchange_time``)."""
    slowest = compute * max(f for _, f in classes)
    if workers < 2:
        return lambda: slowest
    element = execution.gradient_element_bytes
    rows = (profile.sparse_rows_bytes(element) / (profile.embedding_row_bytes + 8)
            if profile.embedding_row_bytes else 0.0)
    values = rows * profile.embedding_row_bytes
    shares = execution.owner_shares or embedding_owner_shares(
        profile.name, profile.batch_size, workers)
    if shares is not None and len(shares) != workers:
        raise SpecError(f"{len(shares)} owner shares for {workers} workers")
    # row i: what rank i asks of each owner
    asked = np.tile(np.asarray(shares, dtype=float) if shares is not None
                    else np.full(workers, 1.0 / workers), (workers, 1))
    took = 0.0
    if rows:
        took += colls.time(all_to_all(workers), 8.0 * workers, share)  # the counts
        took += _exchange_time(colls, asked * 16.0 * rows, share, oneway)  # the requests
        took += _exchange_time(colls, asked.T * values, share, oneway)  # the rows
        took += _exchange_time(colls, asked * values, share, oneway)  # their gradients
    if profile.dense_bytes(element) > 0:
        took += colls.time(channel_rings(ring_allreduce, topology, workers),
                           profile.dense_bytes(element))
    finish = slowest + took
    return lambda: finish


def _fsdp_step(env: simpy.Environment, topology: Topology, workers: int,
               profile: WorkloadSpec, compute: float,
               classes: list[tuple[int, float]], colls: _Collectives,
               library: str = "nccl", execution: Execution = DEFAULT_EXECUTION
               ) -> Callable[[], float]:
    """Units of ``fsdp_unit_bytes`` on FSDP's one timeline (``harness/sim/fsdp``), each
    unit's compute its share of the slowest worker's, its collectives as ``library`` runs
    them (``fsdp_schedules``), its bytes at the element ``execution`` exchanges."""
    total = execution.sharded_bytes(profile)
    factor = max(f for _, f in classes)
    gather, scatter = fsdp_schedules(topology, workers, library)

    def comm(schedule: Schedule, size: float) -> float:
        return colls.time(schedule, size) if workers > 1 else 0.0

    def unit_pass(unit: float) -> UnitPass:
        gathers = [comm(gather, unit) for _ in range(2)]  # forward, backward: both logged
        return UnitPass(forward_s=compute * factor / 3 * unit / total,
                        backward_s=compute * factor * 2 / 3 * unit / total,
                        gather_s=gathers[0], scatter_s=comm(scatter, unit))

    units = buckets(total, execution.fsdp_unit_bytes(profile))
    end = unit_timeline([unit_pass(unit) for unit in units])
    return lambda: end


def _ps_step(env: simpy.Environment, exchange: tuple[Schedule, Schedule],
             nbytes: tuple[float, float], compute: float, classes: list[tuple[int, float]],
             colls: _Collectives, server_optimizer: float) -> Callable[[], float]:
    """Compute, then each worker's push (``nbytes[0]``) by ``exchange[0]``, the servers'
    update, and its pull (``nbytes[1]``) by ``exchange[1]``: in series as two bulk phases, or
    worker by worker up to ps_round.MAX_WORKERS (``ps_round``: where workers are not alike,
    one's push overlaps another's pull). The phases are timed either way: their bytes are
    the step's."""
    state = {"end": 0.0}
    workers = sum(count for count, _ in classes)

    def run() -> Process:
        if workers > 1:
            push, pull = colls.time(exchange[0], nbytes[0]), colls.time(exchange[1], nbytes[1])
            if workers <= ps_round.MAX_WORKERS:
                yield env.timeout(ps_round.round_time(
                    colls.topology, colls.devices, exchange[0], exchange[1], nbytes,
                    [compute * f for count, f in classes for _ in range(count)],
                    server_optimizer))
            else:
                yield env.timeout(compute * max(f for _, f in classes) + push
                                  + server_optimizer + pull)
        else:
            yield env.timeout(compute * max(f for _, f in classes) + server_optimizer)
        state["end"] = env.now

    env.process(run())
    return lambda: state["end"]
