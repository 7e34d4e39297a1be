"""Deterministic batches in numpy, so TF and torch (and every worker) see identical data.

`batch(spec, step, batch_size, seed)` depends only on its arguments: any worker regenerates
the global batch of a step and takes its `shard` (a contiguous slice), without coordination.
Synthetic data is learnable (labels come from a fixed random 'teacher' per seed), so a
training step lowers the loss; `source='real'` uses data that ships offline
(workloads.offline).

Batch keys: classification x (B, ...) float32, y (B,) int64; language model x, y (B, T)
int64 (y is x shifted by one); click dense (B, F) float32, ids (B, tables, hotness) int64,
y (B,) float32.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from workloads import offline
from workloads.configs import CNNConfig, MLPConfig, RecsysConfig, TransformerConfig
from workloads.costs import zipf_probabilities
from workloads.spec import WorkloadError, WorkloadSpec, choices_message

Batch = dict[str, np.ndarray]
SOURCES = ("synthetic", "real")
DATA_STREAM, TEACHER_STREAM = 1, 2  # weights use stream 0 (workloads.weights)
_SCATTER = 2_654_435_761  # a prime: rank -> rank * _SCATTER % rows spreads hot rows


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def _classification(shape: tuple[int, ...], classes: int, n: int, rng: np.random.Generator,
                    seed: int) -> Batch:
    x = rng.standard_normal((n, *shape), dtype=np.float32)
    flat = int(np.prod(shape))
    teacher = _rng(seed, TEACHER_STREAM).standard_normal((flat, classes), dtype=np.float32)
    y = np.argmax(x.reshape(n, flat) @ teacher, axis=1).astype(np.int64)
    return {"x": x, "y": y}


@functools.lru_cache(maxsize=8)
def _markov_cdf(seed: int, vocab: int) -> np.ndarray:
    """Cumulative next-token distributions of a sparse random Markov chain (one per seed)."""
    probs = _rng(seed, TEACHER_STREAM).dirichlet(np.full(vocab, 0.05), size=vocab)
    return np.cumsum(probs, axis=1)


def _language(config: TransformerConfig, n: int, rng: np.random.Generator, seed: int) -> Batch:
    cdf = _markov_cdf(seed, config.vocab)
    seq = np.empty((n, config.context + 1), np.int64)
    seq[:, 0] = rng.integers(0, config.vocab, n)
    u = rng.random((n, config.context))
    for t in range(config.context):
        nxt = (cdf[seq[:, t]] < u[:, t, None]).sum(axis=1)
        seq[:, t + 1] = np.minimum(nxt, config.vocab - 1)
    return {"x": np.ascontiguousarray(seq[:, :-1]), "y": np.ascontiguousarray(seq[:, 1:])}


@functools.lru_cache(maxsize=16)
def _zipf_cdf(rows: int, exponent: float) -> np.ndarray:
    return np.cumsum(zipf_probabilities(rows, exponent))


def _zipf_ids(rows: int, exponent: float, shape: tuple[int, ...],
              rng: np.random.Generator) -> np.ndarray:
    ranks = np.searchsorted(_zipf_cdf(rows, exponent), rng.random(shape), side="right")
    return (np.minimum(ranks, rows - 1) * _SCATTER) % rows


def _click(config: RecsysConfig, n: int, rng: np.random.Generator, seed: int) -> Batch:
    dense = rng.standard_normal((n, config.dense_features), dtype=np.float32)
    ids = np.stack([_zipf_ids(rows, config.zipf, (n, config.hotness), rng)
                    for rows in config.table_rows], axis=1).astype(np.int64)
    w = _rng(seed, TEACHER_STREAM).standard_normal(config.dense_features).astype(np.float32)
    id_effect = np.where((ids * 40_503) % 7 < 3, 1.0, -1.0).mean(axis=(1, 2))
    logit = 0.5 * dense @ w + 2.0 * id_effect
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return {"dense": dense, "ids": ids, "y": y}


def _synthetic(spec: WorkloadSpec, n: int, rng: np.random.Generator, seed: int) -> Batch:
    c = spec.config
    if isinstance(c, MLPConfig):
        return _classification((c.input_dim,), c.classes, n, rng, seed)
    if isinstance(c, CNNConfig):
        return _classification(c.image, c.classes, n, rng, seed)
    if isinstance(c, TransformerConfig):
        return _language(c, n, rng, seed)
    if isinstance(c, RecsysConfig):
        return _click(c, n, rng, seed)
    raise WorkloadError(f"workload {spec.name!r} has no built-in data (it brings its own)")


def _real(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> Batch:
    c = spec.config
    if isinstance(c, MLPConfig):
        return offline.digits_batch(n, rng, (c.input_dim,))
    if isinstance(c, CNNConfig):
        return offline.digits_batch(n, rng, c.image)
    if isinstance(c, TransformerConfig):
        return offline.text_batch(n, rng, c.context)
    raise WorkloadError(f"no offline real data for {spec.name!r} (use source 'synthetic')")


def batch(spec: WorkloadSpec, step: int, batch_size: int | None = None, seed: int = 0,
          source: str = "synthetic") -> Batch:
    """The global batch of `step`: the same arrays for the same arguments, in any process."""
    n = spec.batch_size if batch_size is None else batch_size
    if n < 1:
        raise WorkloadError(f"batch size {n} must be >= 1")
    if step < 0 or seed < 0:
        raise WorkloadError(f"step {step} and seed {seed} must be >= 0")
    if source not in SOURCES:
        raise WorkloadError(choices_message("data source", source, SOURCES))
    rng = _rng(seed, DATA_STREAM, step)
    return _synthetic(spec, n, rng, seed) if source == "synthetic" else _real(spec, n, rng)


def shard(global_batch: Any, rank: int, world: int) -> Any:
    """Replica `rank`'s contiguous slice of a global batch (batch must divide evenly).

    Works on a dict of arrays (built-in workloads) and on a tuple or list of arrays (what
    user workloads often return); every array is split along its first axis.
    """
    if isinstance(global_batch, Mapping):
        arrays = list(global_batch.values())
    elif isinstance(global_batch, tuple | list):
        arrays = list(global_batch)
    else:
        raise WorkloadError(f"cannot shard a batch of type {type(global_batch).__name__} "
                            "(use a dict, tuple or list of arrays)")
    if world < 1 or not 0 <= rank < world:
        raise WorkloadError(f"rank {rank} is not in a world of size {world}")
    sizes = {len(a) for a in arrays}
    if len(sizes) != 1:
        raise WorkloadError(f"batch arrays disagree on the batch size: {sorted(sizes)}")
    n = sizes.pop()
    if n % world:
        raise WorkloadError(f"global batch {n} does not split evenly over {world} replicas")
    per = n // world
    if isinstance(global_batch, Mapping):
        return {k: v[rank * per:(rank + 1) * per] for k, v in global_batch.items()}
    return type(global_batch)(a[rank * per:(rank + 1) * per] for a in arrays)


def batch_shard(spec: WorkloadSpec, step: int, global_batch: int, rank: int, world: int,
                seed: int = 0, source: str = "synthetic") -> Batch:
    """Shortcut: this replica's share of the global batch of `step`."""
    return shard(batch(spec, step, global_batch, seed, source), rank, world)
