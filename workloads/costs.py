"""Analytical costs of a model: parameters, training FLOPs, activation memory, touched fraction.

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
ACTIVATION_BYTES = 4  # activations are kept as fp32, like the gradients


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


def activation_elements(config: ModelConfig) -> int:
    """Values one sample's forward pass keeps for the backward pass (no recomputation).

    The rule: a tensor is kept when some backward reads it: the input of every layer with
    weights (matmul, conv), the input of every norm (Group/LayerNorm) and pooling window
    (torch's average and max pools save it), the output of every ReLU and of the loss's
    softmax, the input of GELU, the attention probabilities (heads x T x T per sequence, as a
    non-fused kernel keeps them; a fused flash kernel keeps O(T)); a tensor read by several
    counts once. Adds, means over axes, reshapes, sum-pooled embedding lookups and integer ids
    keep nothing counted; norm statistics (two values per row) and targets are left out.
    Per family:

    - mlp: input + every hidden ReLU output + the softmax over classes.
    - cnn: the image (stem input); per block, its input (norm1's), relu(norm1), conv1's
      output (norm2's input), relu(norm2); before stages s > 0, the pool's input; head:
      norm input, ReLU output, the averaged vector (dense input), softmax.
    - transformer: per token and block, ln1 input, ln1 output (qkv input), q, k, v, the
      attention output (projection input), ln2 input, ln2 output (fc1 input), fc1 output
      (GELU input), GELU output (fc2 input): (8 + 2 * mlp_ratio) * d, plus heads * T
      probabilities; then ln_f input and output (2 d) and the softmax over the vocabulary.
      The same count as Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 1 without dropout.
    - recsys: dense input, bottom ReLU output, the concatenation (top input), each top ReLU
      output, the logit (read by the binary cross-entropy).
    """
    if isinstance(config, MLPConfig):
        return sum(config.widths)
    if isinstance(config, CNNConfig):
        h, w = config.resolution(0)
        total = h * w * config.image[2]
        for s, b, c_in, c_out in config.block_channels():
            if s > 0 and b == 0:  # the 2x2 pool keeps the previous stage's output
                total += h * w * c_in
            h, w = config.resolution(s)
            total += h * w * 2 * (c_in + c_out)
        return total + 2 * h * w * config.widths[-1] + config.widths[-1] + config.classes
    if isinstance(config, TransformerConfig):
        t, d = config.context, config.d_model
        per_token = config.layers * ((8 + 2 * config.mlp_ratio) * d + config.heads * t)
        return t * (per_token + 2 * d + config.vocab)
    if isinstance(config, RecsysConfig):
        concat = (len(config.table_rows) + 1) * config.dim
        return config.dense_features + config.dim + concat + sum(config.top) + 1
    raise TypeError(f"not a model config: {config!r}")


def activation_bytes(config: ModelConfig) -> int:
    """Bytes of fp32 activations one sample keeps for backward (`activation_elements`)."""
    return ACTIVATION_BYTES * activation_elements(config)


@functools.lru_cache(maxsize=32)
def zipf_probabilities(rows: int, exponent: float) -> np.ndarray:
    """P(rank i) proportional to 1 / (i + 1)^exponent over `rows` ranks (read-only)."""
    p = np.arange(1, rows + 1, dtype=np.float64) ** -exponent
    p /= p.sum()
    p.flags.writeable = False
    return p


@functools.lru_cache(maxsize=4096)
def expected_unique_rows(rows: int, exponent: float, draws: int) -> float:
    """E[#distinct rows] after `draws` i.i.d. Zipf lookups: sum_i 1 - (1 - p_i)^draws
    (a sum over every row of a table: cached, as validation asks the same few thousand)."""
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
