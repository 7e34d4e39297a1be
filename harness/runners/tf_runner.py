"""TensorFlow strategies, child side: one_device, mirrored, central_storage,
multi_worker_mirrored, parameter_server and tpu (launched only where a TPU is advertised).

Imported only inside a worker process of a TF case (DESIGN.md: `import tensorflow` lives in
TF-specific modules). Every strategy runs the same custom training loop (`strategy.run` +
`strategy.reduce`; Keras 3 `fit` does not support MultiWorkerMirrored or ParameterServer):
plain SGD at the torch runners' learning rate, each replica's loss summed over its examples and
divided by the global batch (`tf.nn.compute_average_loss`), so the summed replica gradients
equal the gradient of the mean over the global batch and a synchronous strategy must end with
the weights of one device trained on the global batch (the `reference` role).

Threads and logical CPU devices are configured before TensorFlow's runtime starts, which is
why the workload adapter (which imports Keras) is imported only inside `run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from harness.core.case import LEARNING_RATE, Case
from harness.measure.cpu import CpuMeter
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter

INTER_OP_THREADS = 2
SINGLE_PROCESS = ("one_device", "mirrored", "central_storage")
LOGICAL_DEVICE_NOTE = ("replicas are logical CPU devices of one process that share the same "
                       "{cores} cores: the timing measures the strategy's overhead and the run "
                       "checks correctness, not scaling")
PS_TIMING = ("per step the coordinator schedules one function per worker (each on its shard "
             "of that step's global batch) and joins; a step time is schedule + join measured "
             "at the coordinator")
COLLECTIVES = ("RING", "NCCL", "AUTO")


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _configure(local_processes: int, logical_cpus: int = 1) -> int:
    """Threads and devices, before anything starts TF's runtime; returns intra-op threads.

    GPUs are hidden: stratbench's TF cases are CPU cases (replicas are processes or logical
    CPU devices), which keeps a run the same on a machine that happens to have a GPU.
    """
    threads = max(1, _cores() // max(1, local_processes))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(INTER_OP_THREADS)
    tf.config.set_visible_devices([], "GPU")
    if logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)])
    return threads


def _cross_device_ops(case: Case) -> Any:
    """MirroredStrategy's all-reduce: TF's default on CPUs (collective ring) unless chosen."""
    name = case.options.get("cross_device_ops", "default")
    if name == "default":
        return None
    if name == "reduction_to_one_device":
        return tf.distribute.ReductionToOneDevice()
    if name == "hierarchical_copy":
        if case.replicas % 2:
            # measured (tests/test_tf_reductions.py): with 3 devices the all-reduce silently
            # leaves out the third replica's value
            raise ValueError("hierarchical_copy needs an even number of replicas: TF's "
                             "HierarchicalCopyAllReduce drops a device when the count is odd")
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=1)
    raise ValueError(f"unknown cross_device_ops {name!r} (choose from default, "
                     "reduction_to_one_device, hierarchical_copy)")


def _single_process_strategy(case: Case) -> tuple[Any, dict[str, Any]]:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:case.replicas]
    if case.strategy == "one_device":
        return tf.distribute.OneDeviceStrategy(devices[0]), {"devices": devices}
    details: dict[str, Any] = {"devices": devices, "logical_cpu_devices": len(devices),
                               "note": LOGICAL_DEVICE_NOTE.format(cores=_cores())}
    if case.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=_cross_device_ops(case))
        ops = getattr(strategy.extended, "_cross_device_ops", None)  # what TF picked
        details["cross_device_ops"] = type(ops).__name__
    else:
        strategy = tf.distribute.experimental.CentralStorageStrategy(devices)
        details["parameter_device"] = devices[0]
    return strategy, details


def _collective_timeout(case: Case) -> float:
    """Seconds a collective waits for a peer before it fails (never forever)."""
    return float(case.options.get("collective_timeout_s", max(10.0, case.timeout_s / 2)))


def _multi_worker_strategy(case: Case) -> tuple[Any, dict[str, Any]]:
    collective = str(case.options.get("collective", "RING")).upper()
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (choose from "
                         f"{', '.join(COLLECTIVES)})")
    timeout = _collective_timeout(case)
    impl = getattr(tf.distribute.experimental.CommunicationImplementation, collective)
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl,
                                                              timeout_seconds=timeout)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return strategy, {"collective": collective, "collective_timeout_s": timeout,
                      "workers": cluster["worker"]}


_BOILERPLATE = ("[[", "File ", "Detected at", "Graph execution error",
                "The error could be from a previous operation", "Restart your program",
                "The tasks have crashed")


class StepError(RuntimeError):
    """A TF op failed in a step; the message is the op error's telling line."""


@contextlib.contextmanager
def _step_errors(step: int) -> Iterator[None]:
    """TF's op errors bury what happened ('Collective has timed out during execution.',
    'The following tasks are unhealthy (stopped sending heartbeats): ...') among graph
    locations and boilerplate: lift it into one clear line."""
    try:
        yield
    except tf.errors.OpError as exc:
        lines = [ln.strip() for ln in str(exc.message).splitlines() if ln.strip()]
        telling = [ln for ln in lines if not ln.startswith(_BOILERPLATE)]
        what = " ".join(telling[:2] if telling and telling[0].endswith(":") else telling[:1])
        raise StepError(f"step {step}: {type(exc).__name__}: {what or exc.message}") from exc


def _distribute(strategy: Any, batch: Any, replicas: int) -> Any:
    """Replica r gets shard r of the global batch (its global replica id under MWMS)."""
    from harness.runners import tf_workload as tw

    def shard(ctx: Any) -> Any:
        return tw.to_tensors(tw.shard(batch, ctx.replica_id_in_sync_group, replicas))

    return strategy.experimental_distribute_values_from_function(shard)


def _replica_copies_diff(model: Any) -> float:
    """Largest difference between the replicas' copies of any variable (0 when in sync)."""
    from harness.runners import tf_workload as tw

    worst = 0.0
    for _, v in tw.named_weights(model):
        copies = getattr(getattr(v, "value", v), "values", None)
        if copies and len(copies) > 1:
            first = copies[0].numpy()
            worst = max(worst, *(float(np.max(np.abs(c.numpy() - first), initial=0.0))
                                 for c in copies[1:]))
    return worst


def _leave_together(rank: int, workers: int, timeout_s: float) -> None:
    """Keep every worker alive until all have finished their steps, worker 0 last.

    A collective all-reduce's data is pulled by the receiver: a worker whose last step is
    done may exit while its slower peer still reads the last all-reduce from it, which then
    fails with 'Collective ops is aborted by: Socket closed' (seen here at the last step).
    So all meet at a barrier of TF's coordination service, then each other worker says it is
    leaving and exits, and worker 0, which hosts the service, leaves after them.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    ms = int(timeout_s * 1000)
    ctx.wait_at_barrier("stratbench/steps_done", ms)
    if rank == 0:
        for other in range(1, workers):
            ctx.get_config_key_value(f"stratbench/leaving/{other}", ms)
    else:
        ctx.set_config_key_value(f"stratbench/leaving/{rank}", "1")


OVERLAP_ROUNDS = 3


# The strategies whose exchange is a replica-context all-reduce of the gradients (across
# workers, or across one process's logical devices: to the central device for
# central_storage): the probe times that all-reduce alone. The parameter server, whose
# workers read and write the servers' variables inside the step, has its own probe
# (measure_ps_overlap).
OVERLAP_PROBED = frozenset({"multi_worker_mirrored", "mirrored", "central_storage"})


def measure_overlap(strategy: Any, workload: Any, model: Any, variables: list[Any],
                    batch: Any, global_batch: int, step_s: float) -> dict[str, float]:
    """How much of the gradient exchange hides under compute in TF's custom loop, measured:
    the gradients alone (no all-reduce), then those gradients alone all-reduced in the
    replica context (what apply_gradients does), each the median of a few rounds; overlap =
    (compute + exchange - step) / min(compute, exchange), as for torch DDP. Weights are left
    as they are."""
    from harness.runners import tf_workload as tw

    def gradients(b: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tw.scaled_loss(workload, model, b, global_batch)
        return tape.gradient(loss, variables)  # embedding ones stay IndexedSlices

    def local(value: Any) -> Any:  # this worker's own gradient (one replica per worker)
        return strategy.experimental_local_results(value)[0]

    def exchange() -> Any:  # the last gradients again: sparse ones as IndexedSlices
        grads = [tf.IndexedSlices(tf.identity(g.values), tf.identity(g.indices),
                                  g.dense_shape) if isinstance(g, tf.IndexedSlices)
                 else tf.identity(g) for g in mine]
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, grads)

    def done(values: Any) -> float:  # a number from every local tensor: waits for all
        local = [t for v in values for t in strategy.experimental_local_results(v)]
        return float(sum(float(tf.reduce_sum(getattr(t, "values", t))) for t in local))

    compute_fn = tf.function(lambda b: strategy.run(gradients, args=(b,)))
    exchange_fn = tf.function(lambda: strategy.run(exchange))
    mine = [local(g) for g in compute_fn(batch)]
    done(exchange_fn())  # traced once before timing
    compute, moved = [], []
    for _ in range(OVERLAP_ROUNDS):
        start = time.perf_counter()
        done(compute_fn(batch))
        compute.append(time.perf_counter() - start)
        start = time.perf_counter()
        done(exchange_fn())
        moved.append(time.perf_counter() - start)
    return measured_overlap(compute, moved, step_s)


def train_sync(case: Case, strategy: Any, rank: int, global_batch: int,
               workdir: Path, save_weights: bool) -> dict[str, Any]:
    """The timed loop of every synchronous strategy and of the one-device reference."""
    import keras

    from harness.runners import tf_workload as tw

    workload = tw.spec(case)
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = tw.build(workload, case.seed)
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        variables = [v for _, v in tw.named_weights(model)]
        optimizer.build(variables)

    def replica_step(batch: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tw.scaled_loss(workload, model, batch, global_batch)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    @tf.function
    def train_step(batch: Any) -> Any:
        per_replica = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    batches = [_distribute(strategy, tw.batch(workload, step, global_batch, case.seed),
                           replicas) for step in range(case.total_steps)]
    times: list[float] = []
    losses: list[float] = []
    meter = WireMeter(active=rank == 0)
    cpu = CpuMeter()
    for step, batch in enumerate(batches):
        tw.inject_fault(case, rank, step)
        if step == case.warmup:
            meter.start()
            cpu.start()
        start = time.perf_counter()
        with _step_errors(step):
            value = float(train_step(batch))  # float() waits for the step to finish
        elapsed = time.perf_counter() - start
        if step >= case.warmup:
            times.append(elapsed)
        losses.append(value)
    meter.stop()
    cpu.stop()
    overlap = (measure_overlap(strategy, workload, model, variables, batches[-1],
                               global_batch, float(np.median(times)))
               if case.strategy in OVERLAP_PROBED and replicas > 1 and times else {})
    if case.strategy == "multi_worker_mirrored" and replicas > 1:
        _leave_together(rank, replicas, _collective_timeout(case))
    report: dict[str, Any] = {"step_times_s": times, "losses": losses, "rank": rank,
                              "world": replicas, "threads": tf.config.threading
                              .get_intra_op_parallelism_threads(),
                              "grad_bytes": tw.weight_bytes(model),
                              "timing": "per step: strategy.run + reduce of the loss, until "
                                        "the loss is on the host", **meter.report(len(times)),
                              "details": {**overlap, **cpu.report(len(times))}}
    if replicas > 1 and case.strategy in ("mirrored", "central_storage"):
        report["replica_copies_max_diff"] = _replica_copies_diff(model)
    if save_weights:
        path = workdir / f"weights-tf-{case.strategy}-{rank}.npz"
        arrays: dict[str, Any] = tw.weights(model)
        np.savez(path, **arrays)
        report["weights"] = str(path)
    return report


FIT_TIMING = ("per step: Keras fit's train function, from on_train_batch_begin to "
              "on_train_batch_end with the loss read back to the host")


def train_fit(case: Case, strategy: Any, rank: int, global_batch: int,
              workdir: Path) -> dict[str, Any]:
    """`--tf-loop fit`: `model.compile` + `model.fit` under the strategy, as TensorFlow's
    distribution guide trains; the same model, data, optimizer and global-batch mean loss as
    the custom loop, so the weights must end where one device's do."""
    import keras

    from harness.runners import tf_workload as tw
    from workloads import WorkloadSpec

    workload = tw.spec(case)
    if not isinstance(workload, WorkloadSpec):
        raise ValueError("--tf-loop fit trains built-in workloads: a user workload gives a "
                         "loss function, not a Keras loss; use --tf-loop custom")
    with strategy.scope():
        model = tw.build(workload, case.seed)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
                      loss=tw.keras_loss(workload))

    class StepTimer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.started = 0.0
            self.times: list[float] = []
            self.means: list[float] = []  # Keras logs the epoch's running mean loss

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            tw.inject_fault(case, rank, batch)
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.means.append(float(logs["loss"]))  # float() waits for the step
            self.times.append(time.perf_counter() - self.started)

    timer = StepTimer()
    dataset = tw.fit_dataset(workload, case.total_steps, global_batch, case.seed)
    with _step_errors(len(timer.times)):
        model.fit(dataset, epochs=1, steps_per_epoch=case.total_steps, verbose=0,
                  shuffle=False, callbacks=[timer])
    means = timer.means
    losses = [means[0], *((k + 1) * means[k] - k * means[k - 1] for k in range(1, len(means)))]
    path = workdir / f"weights-tf-{case.strategy}-fit-{rank}.npz"
    arrays: dict[str, Any] = tw.weights(model)
    np.savez(path, **arrays)
    return {"step_times_s": timer.times[case.warmup:], "losses": losses, "rank": rank,
            "world": strategy.num_replicas_in_sync,
            "threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "grad_bytes": tw.weight_bytes(model), "timing": FIT_TIMING,
            "weights": str(path), "details": {"tf_loop": "fit", "timing": FIT_TIMING}}


def _shard_variables(variable: Any) -> list[Any]:
    """The tf.Variables behind a Keras variable: the shards of a ShardedVariable, else one."""
    inner = getattr(variable, "value", variable)
    return list(getattr(inner, "variables", [inner]))


def _serve(case: Case, role: str, index: int) -> dict[str, Any]:
    """A parameter-server cluster's worker or ps task: a gRPC server until it is killed."""
    from harness.runners import tf_workload as tw

    tw.schedule_server_fault(case, role, index)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                                  protocol="grpc", start=True)
    server.join()  # never returns: the launcher kills servers when the chief ends
    return {}


def train_parameter_server(case: Case, workdir: Path) -> dict[str, Any]:
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


class TPUUnreachableError(RuntimeError):
    """The environment names a TPU that TPUClusterResolver cannot attach to."""


def _tpu_strategy() -> tuple[Any, dict[str, Any]]:
    """Attach to the TPU the environment names: TPU_NAME (a Cloud TPU node or Colab's
    address), else the chips of this TPU VM ('local')."""
    name = os.environ.get("TPU_NAME", "" if "COLAB_TPU_ADDR" in os.environ else "local")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        tf.config.experimental_connect_to_cluster(resolver)
        topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as exc:  # advertised, but not there: say which TPU and why
        raise TPUUnreachableError(f"TPU {name!r} is advertised by the environment but "
                                  f"could not be reached: {type(exc).__name__}: {exc}") from exc
    strategy = tf.distribute.TPUStrategy(resolver)
    return strategy, {"tpu": name, "tpu_cores": int(topology.num_tasks
                                                    * topology.num_tpus_per_task),
                      "note": "TPU matmuls use bfloat16 passes by default: the weights "
                              "differ from the CPU reference by more than float32 rounding"}


def _run_tpu(case: Case, workdir: Path) -> dict[str, Any]:
    """Every core of the TPU is a replica; the per-replica batch stays the case's."""
    _configure(1)
    strategy, details = _tpu_strategy()
    cores = strategy.num_replicas_in_sync
    case = dataclasses.replace(case, replicas=cores)
    report = train_sync(case, strategy, 0, case.global_batch, workdir, save_weights=True)
    report["replicas"] = cores  # the parent records what ran, not what was planned
    return _with_details(report, details)


def _with_details(report: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    report["details"] = {**details, **report.pop("details", {})}
    return report


def run(case: Case, role: str, index: int, workdir: Path) -> dict[str, Any]:
    if case.strategy not in ("multi_worker_mirrored", "parameter_server", "comm"):
        os.environ.pop("TF_CONFIG", None)  # a stray cluster must not change a local case
    if role == "reference":  # one device, global batch: the correctness baseline
        _configure(1)
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        return train_sync(case, strategy, 0, case.global_batch, workdir, save_weights=True)
    if case.strategy == "tpu":
        return _run_tpu(case, workdir)
    if case.strategy in SINGLE_PROCESS:
        logical = case.replicas if case.strategy != "one_device" else 1
        _configure(1, logical)
        strategy, details = _single_process_strategy(case)
        if strategy.num_replicas_in_sync != case.replicas:
            raise RuntimeError(f"{case.strategy} has {strategy.num_replicas_in_sync} replicas, "
                               f"the case asks for {case.replicas}")
        if case.options.get("tf_loop") == "fit":
            return _with_details(train_fit(case, strategy, 0, case.global_batch, workdir),
                                 details)
        return _with_details(train_sync(case, strategy, 0, case.global_batch, workdir,
                                        save_weights=True), details)
    if case.strategy == "comm":
        from harness.runners import tf_comm

        _configure(case.replicas)
        strategy, _ = _multi_worker_strategy(case)
        report = tf_comm.run(case, strategy, index)
        _leave_together(index, case.replicas, _collective_timeout(case))
        return report
    if case.strategy == "multi_worker_mirrored":
        _configure(case.replicas)
        strategy, details = _multi_worker_strategy(case)
        return _with_details(train_sync(case, strategy, index, case.global_batch, workdir,
                                        save_weights=index == 0), details)
    if case.strategy == "parameter_server":
        shards = int(case.options.get("ps_shards", 1))
        _configure(1 + case.replicas + shards)
        if role in ("worker", "ps"):
            return _serve(case, role, index)
        return train_parameter_server(case, workdir)
    raise ValueError(f"no TF runner for strategy {case.strategy!r}")

