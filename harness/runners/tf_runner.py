"""TensorFlow strategies, child side: one_device, mirrored, central_storage,
multi_worker_mirrored, parameter_server and tpu (launched only where a TPU is advertised).

Imported only inside a worker process of a TF case (DESIGN.md: `import tensorflow` lives in
TF-specific modules). `run` dispatches; this module holds the synchronous custom training loop
(`strategy.run` + `strategy.reduce`) that one_device, mirrored, central_storage,
multi_worker_mirrored, tpu and the reference run. Keras fit (`--tf-loop fit`) is in tf_fit, the
parameter server in tf_ps, threads, devices and strategy objects in tf_setup. The loop is
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
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from harness.core.case import (
    LEARNING_RATE,
    REFERENCE_ROLES,
    Case,
    WorkerReport,
    reference_threads,
)
from harness.core.strategies import TF_PS_SERVER_ROLES
from harness.core.strategies import strategy as find_strategy
from harness.measure.cpu import CpuMeter
from harness.measure.stats import OVERLAP_ROUNDS
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter
from harness.runners.tf_setup import (
    StrategyDetails,
    _collective_timeout,
    _configure,
    _multi_worker_strategy,
    _single_process_strategy,
    _step_errors,
    _tpu_strategy,
    cores,
)
from workloads.operators import OpRecord


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
        # worker 0 may read the key and leave before the service's answer reaches this worker
        # ("Socket closed ... InsertKeyValue", a comm sweep in CI under load): the key is in,
        # which is all leaving needs; had worker 0 failed instead, its own exit says so
        with contextlib.suppress(tf.errors.UnavailableError):
            ctx.set_config_key_value(f"stratbench/leaving/{rank}", "1")


# The strategies whose exchange is a replica-context all-reduce of the gradients (across
# workers, or across one process's logical devices: to the central device for
# central_storage): the probe times that all-reduce alone. The parameter server, whose
# workers read and write the servers' variables inside the step, has its own probe
# (tf_ps.measure_ps_overlap).
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
               workdir: Path, save_weights: bool) -> WorkerReport:
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
    report: WorkerReport = {"step_times_s": times, "losses": losses, "rank": rank,
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
        np.savez(path, allow_pickle=False, **tw.weights(model))
        report["weights"] = str(path)
    return report


def _operators(case: Case) -> list[OpRecord]:
    """The model as operators (runners/tf_operators.py): what a described device's compute
    is modelled from."""
    from harness.runners.tf_operators import trace_operators

    _, forward = _fresh_forward(case)
    return trace_operators(forward, case.global_batch)


def _saved_activations(case: Case) -> float:
    """Bytes a sample keeps for backward (runners/tf_operators.py): what a described
    device's memory reads."""
    from harness.runners.tf_operators import saved_activation_bytes

    model, forward = _fresh_forward(case)
    return saved_activation_bytes(model.trainable_variables, forward, case.global_batch)


def _fresh_forward(case: Case) -> tuple[Any, Any]:
    """(a fresh build of the case's model, its loss on the run's first batch as a closure):
    the trained model is not needed, only its shapes."""
    from harness.runners import tf_workload as tw

    workload = tw.spec(case)
    model = tw.build(workload, case.seed)
    batch = tw.to_tensors(tw.batch(workload, 0, case.global_batch, case.seed))
    return model, lambda: tw.scaled_loss(workload, model, batch, case.global_batch)


def _run_tpu(case: Case, workdir: Path) -> WorkerReport:
    """Every core of the TPU is a replica; the per-replica batch stays the case's."""
    _configure(1)
    strategy, details = _tpu_strategy()
    cores = strategy.num_replicas_in_sync
    case = dataclasses.replace(case, replicas=cores)
    report = train_sync(case, strategy, 0, case.global_batch, workdir, save_weights=True)
    report["replicas"] = cores  # the parent records what ran, not what was planned
    return _with_details(report, details)


def _with_details(report: WorkerReport, details: StrategyDetails) -> WorkerReport:
    report["details"] = {**details, **report.pop("details", {})}
    return report


def run(case: Case, role: str, index: int, workdir: Path) -> WorkerReport:
    if case.strategy not in ("multi_worker_mirrored", "parameter_server", "comm"):
        os.environ.pop("TF_CONFIG", None)  # a stray cluster must not change a local case
    if role in REFERENCE_ROLES:  # one device, global batch: the correctness baseline
        _configure(1, threads=reference_threads(role, cores()))
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        return train_sync(case, strategy, 0, case.global_batch, workdir, save_weights=True)
    if case.strategy == "tpu":
        return _run_tpu(case, workdir)
    record = find_strategy("tf", case.strategy)
    if record is not None and not record.multi_process:  # one process, logical devices
        logical = case.replicas if case.strategy != "one_device" else 1
        _configure(1, logical)
        strategy, details = _single_process_strategy(case)
        if strategy.num_replicas_in_sync != case.replicas:
            raise RuntimeError(f"{case.strategy} has {strategy.num_replicas_in_sync} replicas, "
                               f"the case asks for {case.replicas}")
        if case.options.get("tf_loop") == "fit":
            from harness.runners.tf_fit import train_fit

            return _with_details(train_fit(case, strategy, 0, case.global_batch, workdir),
                                 details)
        report = train_sync(case, strategy, 0, case.global_batch, workdir, save_weights=True)
        if case.strategy == "one_device" and report["step_times_s"]:
            try:
                details["operators"] = _operators(case)
                # and what it keeps for backward: a described device's memory reads it
                details["activation_bytes_per_sample"] = _saved_activations(case)
            except Exception as exc:  # the record is optional; the measured run stands
                details["operators_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return _with_details(report, details)
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
        from harness.runners.tf_ps import _serve, train_parameter_server

        shards = int(case.options.get("ps_shards", 1))
        _configure(1 + case.replicas + shards)
        if role in TF_PS_SERVER_ROLES:
            return _serve(case, role, index)
        return train_parameter_server(case, workdir)
    raise ValueError(f"no TF runner for strategy {case.strategy!r}")
