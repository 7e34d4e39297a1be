"""The TF runners' one door into `workloads/`: spec, model, data, loss and weight names.

Kept apart so every TF strategy (and the one-device reference) builds and feeds its model the
same way. Importing this module imports TensorFlow and Keras (through workloads.tf_models), so
the runner imports it only after it has configured threads and logical devices.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import numpy as np
import tensorflow as tf

from harness.core.case import Case
from workloads import UserWorkload, WorkloadSpec, data, resolve_workload
from workloads import tf_models as models
from workloads.spec import CLICK

shard = data.shard
named_weights = models.named_weights
Workload = WorkloadSpec | UserWorkload


def spec(case: Case) -> Workload:
    workload = resolve_workload(case.workload)
    assert isinstance(workload, WorkloadSpec | UserWorkload), "profiles are never run"
    return workload


def build(workload: Workload, seed: int) -> Any:
    """The Keras model with the seed's initial weights, its variables created (call this
    inside `strategy.scope()` so the strategy owns them)."""
    if isinstance(workload, UserWorkload):
        model = models.check_model(workload.build_model(seed), workload.name)
        models.count_params(model, workload)  # builds an unbuilt user model
        return model
    return models.build_model(workload, seed)


def batch(workload: Workload, step: int, batch_size: int, seed: int) -> Any:
    if isinstance(workload, UserWorkload):
        return workload.make_batch(step, batch_size, seed)
    return data.batch(workload, step, batch_size, seed)


def to_tensors(batch: Any) -> Any:
    return tf.nest.map_structure(tf.convert_to_tensor, batch)


def _local_size(batch: Any) -> int:
    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0])


def scaled_loss(workload: Workload, model: Any, batch: Any, global_batch: int) -> tf.Tensor:
    """This replica's share of the global-batch mean loss: the sum of its per-example losses
    divided by the global batch (tf.nn.compute_average_loss), so that summing the replicas'
    gradients gives exactly the gradient of the mean over the global batch."""
    if isinstance(workload, UserWorkload):  # only a mean is known: rescale it
        return workload.loss_fn(model, batch) * (_local_size(batch) / global_batch)
    out = model(models.model_inputs(workload, batch), training=True)
    if workload.task == CLICK:
        labels = tf.cast(batch["y"], tf.float32)
        per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels, out)
    else:
        labels = tf.cast(batch["y"], tf.int64)
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out)
        if per_example.shape.rank > 1:  # language model: mean over positions per sequence
            per_example = tf.reduce_mean(per_example, axis=list(range(1, per_example.shape.rank)))
    return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)


def keras_loss(workload: WorkloadSpec) -> Any:
    """The Keras loss whose mean over a batch equals scaled_loss's global-batch mean (a
    language model's mean over positions and sequences is the mean of per-sequence means:
    every sequence has the same length)."""
    import keras

    if workload.task == CLICK:
        def click_loss(labels: Any, logits: Any) -> Any:
            # per example, on (batch, 1): fed (batch,) tensors, Keras 3 reduces the batch
            # away inside the loss and, under MirroredStrategy, no longer divides it by the
            # replicas (measured here: twice one device's update on 2 replicas)
            return keras.losses.binary_crossentropy(labels[:, None], logits[:, None],
                                                    from_logits=True)
        return click_loss
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def fit_dataset(workload: WorkloadSpec, steps: int, global_batch: int, seed: int) -> Any:
    """The same global batches as the custom loop, in order, as the (inputs, labels) dataset
    `model.fit` takes; the strategy splits each batch across its replicas."""
    batches = [data.batch(workload, step, global_batch, seed) for step in range(steps)]
    inputs = tf.nest.map_structure(lambda *a: np.concatenate(a),
                                   *[models.model_inputs(workload, b) for b in batches])
    labels = np.concatenate([b["y"] for b in batches])
    if workload.task == CLICK:
        labels = labels.astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(global_batch)


def weights(model: Any) -> dict[str, np.ndarray]:
    """Final weights under the workloads' canonical names (the same in every strategy)."""
    return {name: np.array(v.numpy()) for name, v in named_weights(model)}


def weight_bytes(model: Any) -> int:
    return sum(int(np.prod(v.shape)) * 4 for _, v in named_weights(model))


def inject_fault(case: Case, rank: int, step: int) -> None:
    """Test hooks for the fault table: a worker killed (SIGKILL) or frozen (SIGSTOP)."""
    if rank != int(case.options.get("die_rank", -1)):
        return
    if step == case.options.get("die_at_step"):
        print(f"InjectedFaultError: worker {rank} kills itself (SIGKILL) at step {step} "
              "(case option die_at_step)", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if step == case.options.get("hang_at_step"):
        print(f"injected fault: worker {rank} freezes itself (SIGSTOP) at step {step}",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


def schedule_server_fault(case: Case, role: str, index: int) -> None:
    """Test hook for servers that run no steps of their own (a parameter-server cluster's
    `ps` and `worker` tasks): SIGKILL this task `die_after_s` seconds after it starts."""
    if (role, index) != (case.options.get("die_role"), case.options.get("die_index", 0)):
        return
    delay = float(case.options["die_after_s"])

    def die() -> None:
        print(f"InjectedFaultError: {role}{index} kills itself (SIGKILL) after {delay:g} s "
              "(case option die_after_s)", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Timer(delay, die).start()
