"""Collective micro-benchmarks through MultiWorkerMirroredStrategy, child side.

The TF twin of torch_comm: one worker process per rank, each (operation, size) point a
compiled `strategy.run` of one replica-context collective, warmed up, then timed over a number
of back-to-back calls that every rank derives from the size alone (TF has no barrier to agree
on a count at run time). A collective cannot finish on one rank before every rank has joined
it, so back-to-back calls measure the collective, not the ranks' skew; the parent takes the
slowest rank's time per point, as nccl-tests does. Like torch_comm, the sweep runs COMM_ROUNDS
times, interleaved, and a point's time is the median of its rounds.

MultiWorkerMirroredStrategy's replica context exposes all-reduce and all-gather only:
broadcast, reduce-scatter and point-to-point (PS push/pull) have no public TF API here, so
the TF sweep has no such points (docs/ARCHITECTURE.md says so).
"""

from __future__ import annotations

import time
from typing import Any

import tensorflow as tf

from harness.core.case import COMM_ROUNDS, Case, CommPoint, WorkerReport
from harness.core.strategies import library
from harness.measure.stats import summarize_rounds

OPS = library("tf").sweep_ops
BYTES_PER_POINT = 16 * 2**20  # about this many bytes moved per point and round
MIN_ITERS, MAX_ITERS = 1, 10


def iterations(nbytes: int) -> int:
    """Calls timed for one point: the same on every rank, fewer for big messages."""
    return int(min(MAX_ITERS, max(MIN_ITERS, BYTES_PER_POINT // max(1, nbytes))))


def _collective(strategy: Any, name: str, nbytes: int) -> Any:
    """A compiled function running `name` once on an `nbytes` buffer (the gathered size for
    all-gather, as torch_comm and nccl-tests size it)."""
    world = strategy.num_replicas_in_sync
    elems = max(world, nbytes // 4) // world * world
    length = elems if name == "all_reduce" else elems // world
    with strategy.scope():
        buf = tf.ones([length], tf.float32)

    def replica(x: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        if name == "all_reduce":
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)
        return ctx.all_gather(x, axis=0)

    @tf.function
    def once() -> Any:
        return strategy.run(replica, args=(buf,))

    if name not in OPS:
        raise ValueError(f"unknown TF collective {name!r} (choose from {', '.join(OPS)})")
    return once


def _time(strategy: Any, fn: Any, iters: int) -> float:
    fn()  # warm-up: tracing, connections, buffers
    start = time.perf_counter()
    for _ in range(iters):
        out = fn()
    strategy.experimental_local_results(out)[0].numpy()  # the last result is on the host
    return (time.perf_counter() - start) / iters


def run(case: Case, strategy: Any, rank: int) -> WorkerReport:
    world = strategy.num_replicas_in_sync
    grid = [(name, int(nbytes)) for name in case.options.get("ops", OPS)
            if name in OPS  # a torch-only operation: nothing to time here
            for nbytes in case.options["sizes"]]
    compiled = {key: _collective(strategy, *key) for key in grid}  # traced once per point
    rounds: dict[tuple[str, int], list[float]] = {key: [] for key in grid}
    for _ in range(int(case.options.get("rounds", COMM_ROUNDS))):
        for name, nbytes in grid:
            rounds[(name, nbytes)].append(
                _time(strategy, compiled[(name, nbytes)], iterations(nbytes)))
    points: list[CommPoint] = [
        {"op": name, "bytes": nbytes, "world": world, **summarize_rounds(times)}
        for (name, nbytes), times in rounds.items()]
    return {"step_times_s": [], "losses": [], "rank": rank, "points": points}
