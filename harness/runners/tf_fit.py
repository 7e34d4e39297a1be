"""Keras `fit` under a single-process TF strategy, child side (`--tf-loop fit`).

Kept apart from the custom loop (tf_runner): `model.compile` + `model.fit` as TensorFlow's
distribution guide trains, timed per step by a Keras callback. The model, data, optimizer and
global-batch mean loss are the custom loop's, so the weights must end where one device's do.
Keras 3 `fit` does not support MultiWorkerMirrored or ParameterServer, hence single-process
strategies only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from harness.core.case import LEARNING_RATE, Case, WorkerReport
from harness.runners.tf_setup import _step_errors

FIT_TIMING = ("per step: Keras fit's train function, from on_train_batch_begin to "
              "on_train_batch_end with the loss read back to the host")


def train_fit(case: Case, strategy: Any, rank: int, global_batch: int,
              workdir: Path) -> WorkerReport:
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
    np.savez(path, allow_pickle=False, **tw.weights(model))
    return {"step_times_s": timer.times[case.warmup:], "losses": losses, "rank": rank,
            "world": strategy.num_replicas_in_sync,
            "threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "grad_bytes": tw.weight_bytes(model), "timing": FIT_TIMING,
            "weights": str(path), "details": {"tf_loop": "fit", "timing": FIT_TIMING}}
