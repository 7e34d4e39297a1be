"""TF parameter server, child side: ParameterServerStrategy + ClusterCoordinator.

The chief builds the model with its variables in K shards (FixedShardsPartitioner) on the ps
tasks and, per step, schedules one function per worker (each on its shard of the step's global
batch) and joins; the workers apply asynchronous SGD to the servers' variables (Keras 3's
optimizers do not take sharded variables). Worker and ps tasks are gRPC servers (`_serve`).
After the timed steps the chief runs the parameter server's own overlap probe
(`measure_ps_overlap`): its step has no exchange to switch off, so compute is told apart by
difference.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from harness.core.case import LEARNING_RATE, Case, WorkerReport
from harness.measure.stats import OVERLAP_ROUNDS
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter
from harness.runners.tf_setup import _step_errors

PS_TIMING = ("per step the coordinator schedules one function per worker (each on its shard "
             "of that step's global batch) and joins; a step time is schedule + join measured "
             "at the coordinator")


def _shard_variables(variable: Any) -> list[Any]:
    """The tf.Variables behind a Keras variable: the shards of a ShardedVariable, else one."""
    inner = getattr(variable, "value", variable)
    return list(getattr(inner, "variables", [inner]))


def _serve(case: Case, role: str, index: int) -> WorkerReport:
    """A parameter-server cluster's worker or ps task: a gRPC server until it is killed."""
    from harness.runners import tf_workload as tw

    tw.schedule_server_fault(case, role, index)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                                  protocol="grpc", start=True)
    server.join()  # never returns: the launcher kills servers when the chief ends
    return {}


def train_parameter_server(case: Case, workdir: Path) -> WorkerReport:
    """The chief: ParameterServerStrategy + ClusterCoordinator, variables in K shards."""
    from harness.runners import tf_workload as tw

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec().as_dict()
    shards, workers = len(cluster.get("ps", [])), len(cluster.get("worker", []))
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(shards)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    workload = tw.spec(case)
    with strategy.scope():
        model = tw.build(workload, case.seed)
    named = tw.named_weights(model)
    # Keras 3's optimizers do not take sharded variables: plain SGD on each shard, sparse
    # (scatter_sub of the touched rows) where the gradient is sparse.
    variables = [s for _, v in named for s in _shard_variables(v)]
    per_worker = case.per_replica_batch

    def replica_step(batch: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            loss = tw.scaled_loss(workload, model, batch, per_worker)
        grads = tape.gradient(loss, variables)
        pushed = tf.constant(0, tf.int64)
        for grad, var in zip(grads, variables, strict=True):
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                var.scatter_sub(tf.IndexedSlices(LEARNING_RATE * grad.values, grad.indices,
                                                 grad.dense_shape))
                pushed += (tf.size(grad.values, tf.int64) * grad.values.dtype.size
                           + tf.size(grad.indices, tf.int64) * grad.indices.dtype.size)
            else:
                var.assign_sub(LEARNING_RATE * grad)
                pushed += tf.size(grad, tf.int64) * grad.dtype.size
        return loss, pushed

    @tf.function
    def worker_fn(batch: Any) -> Any:
        return strategy.run(replica_step, args=(batch,))

    times: list[float] = []
    losses: list[float] = []
    pushed: list[float] = []
    meter = WireMeter(active=True)  # the chief
    for step in range(case.total_steps):
        global_batch = tw.batch(workload, step, case.global_batch, case.seed)
        shards_of_step = [tw.to_tensors(tw.shard(global_batch, r, workers))
                          for r in range(workers)]
        if step == case.warmup:
            meter.start()
        start = time.perf_counter()
        with _step_errors(step):
            results = [coordinator.schedule(worker_fn, args=(b,)) for b in shards_of_step]
            coordinator.join()
        elapsed = time.perf_counter() - start
        fetched = [r.fetch() for r in results]
        losses.append(float(np.mean([loss for loss, _ in fetched])))
        if step >= case.warmup:
            times.append(elapsed)
            pushed.append(float(np.mean([b for _, b in fetched])))
    meter.stop()
    overlap = (measure_ps_overlap(coordinator, strategy, workload, model, variables,
                                  shards_of_step, per_worker, float(np.median(times)))
               if times and not isinstance(workload, tw.UserWorkload) else {})
    layout = {name: [[s.device, list(s.shape)] for s in _shard_variables(v)]
              for name, v in named}
    return {"step_times_s": times, "losses": losses, "rank": 0, "world": workers,
            "threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "grad_bytes": tw.weight_bytes(model),
            "bytes_pushed_per_step": float(np.median(pushed)) if pushed else 0.0,
            **meter.report(len(times)),
            "timing": PS_TIMING,
            "details": {"ps_shards": shards, "workers": workers,
                        "partitioner": f"FixedShardsPartitioner({shards})",
                        "sharded_variables": sum(len(s) > 1 for s in layout.values()),
                        "variable_shards": layout, "timing": PS_TIMING, **overlap,
                        "update": "asynchronous SGD, each worker's gradient of its "
                                  "per-worker mean loss applied on the ps as it arrives"}}


# Passes beyond the first that the parameter server's compute probe times (measure_ps_overlap):
# with one, 4 hosts at 250 Mbit/s put the difference (20-30 ms of compute) under the noise of
# the 1.3 s pull both calls share.
EXTRA_PASSES = 4


def measure_ps_overlap(coordinator: Any, strategy: Any, workload: Any, model: Any,
                       variables: list[Any], batches: list[Any], per_worker: int,
                       step_s: float) -> dict[str, float | None]:
    """The parameter server's overlap, measured. Its step has no exchange to switch off (the
    workers read and write the servers' variables inside the step), so compute alone is
    told apart by difference: every worker at once, as in a step, pulls every variable once
    and runs one, then 1 + EXTRA_PASSES, forward/backward passes on the pulled values (keras
    StatelessScope; each pass on the batch rolled by one more row, so that Grappler cannot
    merge them); several passes, because the pull they share is the larger and noisier part
    on a slow link. Exchange alone pulls what a step pulls and pushes zeros of what it
    pushes (dense variables whole, embedding shards the rows a real gradient touched),
    every pull before any push as in a step, the zeros a run-time zero times the pulled
    values so that no pass folds the push away; the weights are left as they are. Where the
    passes' difference is under that noise (mlp:S computes in under a millisecond), compute
    reads 0 and the overlap None: no ratio is better than one over noise."""
    import keras

    from harness.runners import tf_workload as tw

    keras_vars = list(model.variables)

    def passes(batch: Any, count: int) -> Any:
        values = [tf.convert_to_tensor(v.value) for v in keras_vars]
        total = tf.constant(0.0)
        for i in range(count):
            rolled = tf.nest.map_structure(lambda t, i=i: tf.roll(t, i, axis=0), batch)
            with tf.GradientTape() as tape:
                tape.watch(values)
                with keras.StatelessScope(state_mapping=list(zip(keras_vars, values,
                                                                 strict=True))):
                    loss = tw.scaled_loss(workload, model, rolled, per_worker)
            grads = [g for g in tape.gradient(loss, values) if g is not None]
            total += tf.add_n([tf.reduce_sum(getattr(g, "values", g)) for g in grads])
        return total

    kinds: list[str] = []  # per variable, what a step pushes: "dense", "rows" or nothing

    def touched(batch: Any) -> list[Any]:  # each shard's rows a real gradient touches
        with tf.GradientTape() as tape:
            loss = tw.scaled_loss(workload, model, batch, per_worker)
        grads = tape.gradient(loss, variables)
        kinds[:] = ["rows" if isinstance(g, tf.IndexedSlices) else "dense" if g is not None
                    else "" for g in grads]  # at trace time: the step's structure
        return [tf.cast(g.indices, tf.int64) if isinstance(g, tf.IndexedSlices)
                else tf.zeros([0], tf.int64) for g in grads]

    def exchange(rows: list[Any], scale: Any) -> Any:
        # every pull before any push, as a step's forward needs them all and its pushes
        # follow backward
        pulled = {i: var.sparse_read(rows[i]) if kind == "rows" else var.read_value()
                  for i, (var, kind) in enumerate(zip(variables, kinds, strict=True)) if kind}
        with tf.control_dependencies(list(pulled.values())):
            for i, value in pulled.items():
                if kinds[i] == "rows":
                    variables[i].scatter_sub(tf.IndexedSlices(value * scale, rows[i],
                                                              variables[i].shape))
                else:
                    variables[i].assign_sub(value * scale)
        return tf.add_n([tf.reduce_sum(v) for v in pulled.values()])

    def on_workers(fn: Any, args: list[tuple[Any, ...]]) -> float:
        start = time.perf_counter()
        for a in args:
            coordinator.schedule(fn, args=a)
        coordinator.join()
        return time.perf_counter() - start

    def replicated(fn: Any) -> Any:
        return tf.function(lambda *a: strategy.run(fn, args=a))

    first = [coordinator.schedule(replicated(touched), args=(b,)) for b in batches]
    coordinator.join()
    rows = [[tf.constant(np.asarray(ix, np.int64)) for ix in r.fetch()] for r in first]
    one = replicated(lambda b: passes(b, 1))
    more = replicated(lambda b: passes(b, 1 + EXTRA_PASSES))
    moved_fn = replicated(exchange)
    batch_args = [(b,) for b in batches]
    row_args = [(r, tf.constant(0.0)) for r in rows]
    for fn, args in ((one, batch_args), (more, batch_args), (moved_fn, row_args)):
        on_workers(fn, args)  # traced and warmed before timing
    compute, moved = [], []
    for _ in range(OVERLAP_ROUNDS):
        single = on_workers(one, batch_args)
        added = on_workers(more, batch_args) - single
        compute.append(max(0.0, added / EXTRA_PASSES))
        moved.append(on_workers(moved_fn, row_args))
    result: dict[str, float | None] = {**measured_overlap(compute, moved, step_s)}
    if not result["compute_only_s"]:
        result["measured_overlap"] = None
    return result
