"""The TensorFlow side (Keras 3): models, loss, canonical weights, a reference training loop.

The only module of the package that imports TensorFlow/Keras. Every model follows its
family's config in workloads.configs exactly: `named_weights` lists the variables under the
configs' canonical names and layouts, and `build_model` copies in the numpy initial weights
of workloads.weights, so a TF and a torch model built from one seed start out identical.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from workloads.configs import (
    CNNConfig,
    MLPConfig,
    ModelConfig,
    RecsysConfig,
    TransformerConfig,
)
from workloads.spec import CLICK, LANGUAGE_MODEL, WorkloadError, WorkloadSpec
from workloads.user import UserWorkload
from workloads.weights import init_weights

if keras.backend.backend() != "tensorflow":
    raise ImportError(f"workloads.tf_models needs KERAS_BACKEND=tensorflow, not "
                      f"{keras.backend.backend()!r}")

LN_EPS = 1e-5
_Z = "zeros"  # weights are created as zeros and then overwritten with the canonical ones


def _dense(units: int) -> keras.layers.Dense:
    return keras.layers.Dense(units, kernel_initializer=_Z, bias_initializer=_Z)


def _conv(filters: int, k: int, bias: bool) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(filters, k, padding="same", use_bias=bias, kernel_initializer=_Z,
                               bias_initializer=_Z)


def _group_norm(groups: int) -> keras.layers.GroupNormalization:
    return keras.layers.GroupNormalization(groups=groups, axis=-1, epsilon=LN_EPS)


def _layer_norm() -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=LN_EPS)


class MLP(keras.Model):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        self.dense_layers = [_dense(w) for w in config.widths[1:]]

    def call(self, x: Any) -> Any:
        for i, layer in enumerate(self.dense_layers):
            x = layer(x)
            if i < len(self.dense_layers) - 1:
                x = keras.ops.relu(x)
        return x

    def named_layers(self) -> list[tuple[str, Any]]:
        return [(f"layers.{i}", layer) for i, layer in enumerate(self.dense_layers)]


class ResidualBlock(keras.layers.Layer):
    def __init__(self, config: CNNConfig, c_in: int, c_out: int) -> None:
        super().__init__()
        self.norm1 = _group_norm(config.norm_groups(c_in))
        self.conv1 = _conv(c_out, 3, bias=False)
        self.norm2 = _group_norm(config.norm_groups(c_out))
        self.conv2 = _conv(c_out, 3, bias=False)
        self.proj = _conv(c_out, 1, bias=False) if c_in != c_out else None

    def call(self, x: Any) -> Any:
        a = keras.ops.relu(self.norm1(x))
        h = self.conv2(keras.ops.relu(self.norm2(self.conv1(a))))
        return h + (self.proj(a) if self.proj is not None else x)

    def named_layers(self, path: str) -> list[tuple[str, Any]]:
        out = [(f"{path}.norm1", self.norm1), (f"{path}.conv1", self.conv1),
               (f"{path}.norm2", self.norm2), (f"{path}.conv2", self.conv2)]
        return out + ([(f"{path}.proj", self.proj)] if self.proj is not None else [])


class CNN(keras.Model):
    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        self.stem = _conv(config.widths[0], 3, bias=True)
        self.where = [(s, b) for s, b, _, _ in config.block_channels()]
        self.res_blocks = [ResidualBlock(config, ci, co) for _, _, ci, co in
                           config.block_channels()]
        self.pool = keras.layers.AveragePooling2D(2)
        self.norm = _group_norm(config.norm_groups(config.widths[-1]))
        self.head = _dense(config.classes)

    def call(self, x: Any) -> Any:
        x = self.stem(x)
        for (s, b), block in zip(self.where, self.res_blocks, strict=True):
            if s > 0 and b == 0:
                x = self.pool(x)
            x = block(x)
        x = keras.ops.mean(keras.ops.relu(self.norm(x)), axis=(1, 2))
        return self.head(x)

    def named_layers(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [("stem", self.stem)]
        for (s, b), block in zip(self.where, self.res_blocks, strict=True):
            out += block.named_layers(f"stages.{s}.{b}")
        return [*out, ("norm", self.norm), ("head", self.head)]


class TransformerBlock(keras.layers.Layer):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.ln1 = _layer_norm()
        self.attn_qkv = _dense(3 * d)
        self.attn_out = _dense(d)
        self.ln2 = _layer_norm()
        self.fc1 = _dense(d * config.mlp_ratio)
        self.fc2 = _dense(d)

    def _attention(self, x: Any) -> Any:
        ops = keras.ops
        b, t, d = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        hd = d // self.heads

        def heads(z: Any) -> Any:
            return ops.transpose(ops.reshape(z, (b, t, self.heads, hd)), (0, 2, 1, 3))

        q, k, v = (heads(z) for z in ops.split(self.attn_qkv(x), 3, axis=-1))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(hd)
        causal = ops.tril(ops.ones((t, t), dtype="bool"))
        scores = ops.where(causal, scores, ops.full_like(scores, -1e9))
        out = ops.matmul(ops.softmax(scores, axis=-1), v)
        return ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (b, t, d))

    def call(self, x: Any) -> Any:
        x = x + self.attn_out(self._attention(self.ln1(x)))
        return x + self.fc2(keras.ops.gelu(self.fc1(self.ln2(x)), approximate=False))

    def named_layers(self, path: str) -> list[tuple[str, Any]]:
        return [(f"{path}.{n}", getattr(self, n))
                for n in ("ln1", "attn_qkv", "attn_out", "ln2", "fc1", "fc2")]


class Transformer(keras.Model):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.tok_emb = keras.layers.Embedding(config.vocab, config.d_model,
                                              embeddings_initializer=_Z)
        self.pos_emb = keras.layers.Embedding(config.context, config.d_model,
                                              embeddings_initializer=_Z)
        self.t_blocks = [TransformerBlock(config) for _ in range(config.layers)]
        self.ln_f = _layer_norm()

    def call(self, tokens: Any) -> Any:
        positions = keras.ops.arange(keras.ops.shape(tokens)[1])
        x = self.tok_emb(tokens) + self.pos_emb(positions)[None]
        for block in self.t_blocks:
            x = block(x)
        x = self.ln_f(x)
        return keras.ops.matmul(x, keras.ops.transpose(self.tok_emb.embeddings))  # tied head

    def named_layers(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [("tok_emb", self.tok_emb), ("pos_emb", self.pos_emb)]
        for i, block in enumerate(self.t_blocks):
            out += block.named_layers(f"blocks.{i}")
        return [*out, ("ln_f", self.ln_f)]


class Recsys(keras.Model):
    def __init__(self, config: RecsysConfig) -> None:
        super().__init__()
        self.tables = [keras.layers.Embedding(rows, config.dim, embeddings_initializer=_Z)
                       for rows in config.table_rows]
        self.bottom = _dense(config.dim)
        self.top = [_dense(w) for w in config.top_widths[1:]]

    def call(self, inputs: Any) -> Any:
        ids = inputs["ids"]
        pooled = [keras.ops.sum(table(ids[:, t, :]), axis=1)
                  for t, table in enumerate(self.tables)]
        x = keras.ops.concatenate([keras.ops.relu(self.bottom(inputs["dense"])), *pooled], -1)
        for i, layer in enumerate(self.top):
            x = layer(x)
            if i < len(self.top) - 1:
                x = keras.ops.relu(x)
        return x[:, 0]

    def named_layers(self) -> list[tuple[str, Any]]:
        out = [(f"tables.{t}", table) for t, table in enumerate(self.tables)]
        return [*out, ("bottom", self.bottom), *((f"top.{i}", d) for i, d in enumerate(self.top))]


def _model_class(config: ModelConfig) -> type:
    for cls, kind in ((MLP, MLPConfig), (CNN, CNNConfig), (Transformer, TransformerConfig),
                      (Recsys, RecsysConfig)):
        if isinstance(config, kind):
            return cls
    raise WorkloadError(f"no TF model for config {type(config).__name__}")


#: a batch (workloads.data.Batch) as numpy arrays or the tensors made of them
TensorBatch = dict[str, np.ndarray | tf.Tensor]


def model_inputs(spec: WorkloadSpec, batch: TensorBatch) -> Any:
    """What the model's call() takes from a batch dict."""
    if spec.task == CLICK:
        return {"dense": batch["dense"], "ids": batch["ids"]}
    return batch["x"]


def _dummy_batch(config: ModelConfig) -> Any:
    if isinstance(config, MLPConfig):
        return np.zeros((1, config.input_dim), np.float32)
    if isinstance(config, CNNConfig):
        return np.zeros((1, *config.image), np.float32)
    if isinstance(config, TransformerConfig):
        return np.zeros((1, config.context), np.int64)
    assert isinstance(config, RecsysConfig)
    return {"dense": np.zeros((1, config.dense_features), np.float32),
            "ids": np.zeros((1, len(config.table_rows), config.hotness), np.int64)}


def _config(spec: WorkloadSpec) -> ModelConfig:
    if spec.config is None:
        raise WorkloadError(f"workload {spec.name!r} is not a built-in family; use its "
                            "UserWorkload.build_model")
    return spec.config


def build_model(spec: WorkloadSpec, seed: int = 0) -> keras.Model:
    """The Keras model of a built-in workload, with the seed's canonical initial weights."""
    config = _config(spec)
    model = _model_class(config)(config)
    model(_dummy_batch(config))  # creates the variables
    set_weights(model, init_weights(config, seed))
    return model


def named_weights(model: keras.Model) -> list[tuple[str, Any]]:
    """(canonical name, variable) in canonical order; plain trainable weights for user models."""
    if not hasattr(model, "named_layers"):
        return [(v.path, v) for v in model.trainable_weights]
    return [(f"{path}.{v.name}", v) for path, layer in model.named_layers()
            for v in layer.trainable_weights]


def get_weights(model: keras.Model) -> list[np.ndarray]:
    return [np.array(v.numpy()) for _, v in named_weights(model)]


def set_weights(model: keras.Model, arrays: Sequence[np.ndarray]) -> None:
    named = named_weights(model)
    if len(arrays) != len(named):
        raise WorkloadError(f"got {len(arrays)} arrays for {len(named)} weights")
    for (name, v), a in zip(named, arrays, strict=True):
        if tuple(v.shape) != tuple(np.shape(a)):
            raise WorkloadError(f"weight {name}: shape {np.shape(a)} != {tuple(v.shape)}")
        v.assign(np.asarray(a, np.float32))


def check_model(model: Any, name: str) -> keras.Model:
    if not isinstance(model, keras.Model):
        raise WorkloadError(f"user workload {name!r}: build_model returned "
                            f"{type(model).__name__}, expected a keras.Model")
    return model


def count_params(model: keras.Model, workload: UserWorkload | None = None) -> int:
    """Trainable parameters; builds an unbuilt user model with one forward pass first."""
    if workload is not None:
        check_model(model, workload.name)
        if not model.trainable_weights:
            workload.loss_fn(model, workload.make_batch(0, workload.batch_size, 0))
    return sum(math.prod(v.shape) for v in model.trainable_weights)


def per_example_loss(spec: WorkloadSpec, model: keras.Model, batch: TensorBatch
                     ) -> tf.Tensor:
    """Loss per sample, shape (B,) (LM: mean over positions), for tf.distribute loops that
    scale by the global batch (tf.nn.compute_average_loss)."""
    out = model(model_inputs(spec, batch), training=True)
    if spec.task == CLICK:
        labels = tf.convert_to_tensor(batch["y"], tf.float32)
        return tf.nn.sigmoid_cross_entropy_with_logits(labels, out)
    labels = tf.convert_to_tensor(batch["y"], tf.int64)
    per_item = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out)
    return tf.reduce_mean(per_item, axis=-1) if spec.task == LANGUAGE_MODEL else per_item


def loss(spec: WorkloadSpec, model: keras.Model, batch: TensorBatch) -> tf.Tensor:
    """Mean loss of a built-in workload on a batch (softmax or sigmoid cross-entropy)."""
    return tf.reduce_mean(per_example_loss(spec, model, batch))


def _loss_fn(workload: WorkloadSpec | UserWorkload) -> Any:
    if isinstance(workload, UserWorkload):
        return workload.loss_fn
    return lambda model, batch: loss(workload, model, batch)


def gradients(workload: WorkloadSpec | UserWorkload, model: keras.Model,
              batch: Any) -> tuple[float, list[Any]]:
    """(loss, gradients in named_weights order); embedding gradients are tf.IndexedSlices."""
    variables = [v for _, v in named_weights(model)]
    with tf.GradientTape() as tape:
        value = _loss_fn(workload)(model, batch)
    return float(value), tape.gradient(value, variables)


def train_steps(model: keras.Model, workload: WorkloadSpec | UserWorkload,
                batches: Sequence[Any], lr: float = 0.05) -> list[float]:
    """Plain SGD, one step per batch; returns each step's loss (before its update).

    The reference single-process loop: tests use it, and runners compare against it.
    Built-in workloads run the step as a tf.function; user workloads run eagerly.
    """
    loss_fn = _loss_fn(workload)
    if isinstance(workload, UserWorkload):
        count_params(model, workload)  # builds the model if needed
    optimizer = keras.optimizers.SGD(learning_rate=lr)
    variables = [v for _, v in named_weights(model)]
    optimizer.build(variables)

    def step(batch: Any) -> Any:
        with tf.GradientTape() as tape:
            value = loss_fn(model, batch)
        optimizer.apply_gradients(zip(tape.gradient(value, variables), variables, strict=True))
        return value

    run = step if isinstance(workload, UserWorkload) else tf.function(step)
    losses = []
    for batch in batches:
        if not isinstance(workload, UserWorkload):
            batch = {k: tf.convert_to_tensor(v) for k, v in batch.items()}
        losses.append(float(run(batch)))
    return losses
