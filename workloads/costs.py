"""Analytical costs of a model: parameters, training FLOPs, touched gradient fraction.

Closed forms from the hyper-parameters only, so the simulator and the planner can use them
without building a model. Tests check `param_count` against the weight list of
`workloads.configs` and against the real TF and torch models.

FLOPs convention: a multiply-accumulate is 2 FLOPs; only matmuls/convolutions (and the
embedding sums) are counted: norms, activations, softmax, pooling and adds are ignored (a few
percent). Attention counts the full T x T score matrix, as kernels compute it, causal or not.
Training FLOPs = 3 x forward (the backward pass costs about twice the forward: gradients
with respect to both activations and weights).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping

import numpy as np

from workloads.configs import CNNConfig, MLPConfig, ModelConfig, RecsysConfig, TransformerConfig

TRAIN_FLOPS_FACTOR = 3


def _dense_params(widths: tuple[int, ...]) -> int:
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def _dense_flops(widths: tuple[int, ...]) -> int:
    return sum(2 * a * b for a, b in itertools.pairwise(widths))


def param_count(config: ModelConfig) -> int:
    """Trainable parameters, in closed form per family."""
    if isinstance(config, MLPConfig):
        return _dense_params(config.widths)
    if isinstance(config, CNNConfig):
        total = 9 * config.image[2] * config.widths[0] + config.widths[0]  # stem
        for _, _, c_in, c_out in config.block_channels():
            total += 2 * c_in + 9 * c_in * c_out + 2 * c_out + 9 * c_out * c_out
            total += c_in * c_out if c_in != c_out else 0  # 1x1 projection
        return total + 2 * config.widths[-1] + _dense_params((config.widths[-1], config.classes))
    if isinstance(config, TransformerConfig):
        d, r = config.d_model, config.mlp_ratio
        per_block = (4 + 2 * r) * d * d + (9 + r) * d  # 12 d^2 + 13 d when r = 4
        return (config.vocab + config.context) * d + config.layers * per_block + 2 * d
    if isinstance(config, RecsysConfig):
        return (config.embedding_params + _dense_params((config.dense_features, config.dim))
                + _dense_params(config.top_widths))
    raise TypeError(f"not a model config: {config!r}")


def forward_flops(config: ModelConfig) -> int:
    """Forward FLOPs for one sample (one sequence for the transformer)."""
    if isinstance(config, MLPConfig):
        return _dense_flops(config.widths)
    if isinstance(config, CNNConfig):
        h, w = config.resolution(0)
        total = 2 * h * w * 9 * config.image[2] * config.widths[0]
        for s, _, c_in, c_out in config.block_channels():
            h, w = config.resolution(s)
            macs = 9 * c_in * c_out + 9 * c_out * c_out + (c_in * c_out if c_in != c_out else 0)
            total += 2 * h * w * macs
        return total + _dense_flops((config.widths[-1], config.classes))
    if isinstance(config, TransformerConfig):
        t, d, r = config.context, config.d_model, config.mlp_ratio
        matmul = 2 * t * (4 + 2 * r) * d * d  # qkv 3d^2, out d^2, mlp 2 r d^2 per token
        attention = 2 * 2 * t * t * d  # scores q.k^T and the weighted sum of v
        return config.layers * (matmul + attention) + 2 * t * d * config.vocab
    if isinstance(config, RecsysConfig):
        pooling = len(config.table_rows) * config.hotness * config.dim
        return (pooling + _dense_flops((config.dense_features, config.dim))
                + _dense_flops(config.top_widths))
    raise TypeError(f"not a model config: {config!r}")


def training_flops(config: ModelConfig) -> int:
    """Forward + backward FLOPs per sample: 3 x forward."""
    return TRAIN_FLOPS_FACTOR * forward_flops(config)


@functools.lru_cache(maxsize=32)
def zipf_probabilities(rows: int, exponent: float) -> np.ndarray:
    """P(rank i) proportional to 1 / (i + 1)^exponent over `rows` ranks (read-only)."""
    p = np.arange(1, rows + 1, dtype=np.float64) ** -exponent
    p /= p.sum()
    p.flags.writeable = False
    return p


def expected_unique_rows(rows: int, exponent: float, draws: int) -> float:
    """E[#distinct rows] after `draws` i.i.d. Zipf lookups: sum_i 1 - (1 - p_i)^draws."""
    p = zipf_probabilities(rows, exponent)
    return float(np.sum(-np.expm1(draws * np.log1p(-p))))


def _touched_fraction(config: RecsysConfig, touched_rows: list[float]) -> float:
    dense = param_count(config) - config.embedding_params
    touched = dense + config.dim * sum(touched_rows)
    return float(touched / param_count(config))


def expected_touched_fraction(config: ModelConfig, batch_size: int) -> float:
    """Expected fraction of gradient entries a step of `batch_size` samples touches.

    Dense families touch everything (1.0). Recsys touches its dense layers plus the distinct
    looked-up rows of each table: E[rows] follows from the Zipf lookup distribution.
    """
    if not isinstance(config, RecsysConfig):
        return 1.0
    draws = batch_size * config.hotness
    rows = [expected_unique_rows(n, config.zipf, draws) for n in config.table_rows]
    return _touched_fraction(config, rows)


def touched_fraction(config: ModelConfig, batch: Mapping[str, np.ndarray]) -> float:
    """The fraction of gradient entries this very batch touches (distinct ids per table)."""
    if not isinstance(config, RecsysConfig):
        return 1.0
    ids = np.asarray(batch["ids"])
    rows = [float(np.unique(ids[:, t, :]).size) for t in range(len(config.table_rows))]
    return _touched_fraction(config, rows)
