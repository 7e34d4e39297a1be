"""Framework-neutral architectures: hyper-parameters and the exact list of weights.

Each family's config lists its weights (name, shape, how to initialise) in one canonical
order and layout (Keras layout: dense kernels are (in, out), conv kernels (kh, kw, in, out)).
Both framework builders are checked against this list, so the TF and torch models cannot
drift apart, and weights can be moved between them as plain numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# How a weight is initialised (see workloads.weights): a fan-in scaled normal kernel,
# constants, or a small uniform embedding.
KERNEL, ZEROS, ONES, EMBEDDING = "kernel", "zeros", "ones", "embedding"


@dataclass(frozen=True)
class WeightSpec:
    """One weight tensor: canonical name, canonical shape, initialiser and its scale."""

    name: str
    shape: tuple[int, ...]
    init: str
    fan_in: int = 1
    scale: float = 1.0

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _dense(path: str, n_in: int, n_out: int, scale: float = 1.0) -> list[WeightSpec]:
    return [WeightSpec(f"{path}.kernel", (n_in, n_out), KERNEL, n_in, scale),
            WeightSpec(f"{path}.bias", (n_out,), ZEROS)]


def _conv(path: str, k: int, c_in: int, c_out: int, bias: bool,
          scale: float = 1.0) -> list[WeightSpec]:
    out = [WeightSpec(f"{path}.kernel", (k, k, c_in, c_out), KERNEL, k * k * c_in, scale)]
    if bias:
        out.append(WeightSpec(f"{path}.bias", (c_out,), ZEROS))
    return out


def _norm(path: str, n: int) -> list[WeightSpec]:
    return [WeightSpec(f"{path}.gamma", (n,), ONES), WeightSpec(f"{path}.beta", (n,), ZEROS)]


def _embedding(path: str, rows: int, dim: int, scale: float) -> list[WeightSpec]:
    return [WeightSpec(f"{path}.embeddings", (rows, dim), EMBEDDING, rows, scale)]


@dataclass(frozen=True)
class MLPConfig:
    """Dense classifier: input_dim -> hidden... -> classes, ReLU between, biases everywhere."""

    input_dim: int
    hidden: tuple[int, ...]
    classes: int

    @property
    def widths(self) -> tuple[int, ...]:
        return (self.input_dim, *self.hidden, self.classes)

    def weights(self) -> tuple[WeightSpec, ...]:
        w = self.widths
        return tuple(s for i in range(len(w) - 1) for s in _dense(f"layers.{i}", w[i], w[i + 1]))


@dataclass(frozen=True)
class CNNConfig:
    """Pre-activation ResNet without BatchNorm (GroupNorm, so params match across frameworks).

    stem: 3x3 conv (bias) to widths[0]. Stage s (after a 2x2 average pool when s > 0) has
    blocks[s] blocks: a = relu(norm1(x)); h = conv2(relu(norm2(conv1(a)))); out = h + (proj(a)
    if channels change else x). 3x3 convs use 'same' padding and no bias (a norm follows).
    Head: relu(norm(x)), global average pool, dense to classes.
    """

    image: tuple[int, int, int]  # height, width, channels (NHWC, as the data is)
    widths: tuple[int, ...]
    blocks: tuple[int, ...]
    classes: int
    groups: int = 8

    def __post_init__(self) -> None:
        if len(self.widths) != len(self.blocks):
            raise ValueError("widths and blocks need one entry per stage")
        if any(w % self.norm_groups(w) for w in self.widths):
            raise ValueError("every width must be divisible by its group count")

    def norm_groups(self, channels: int) -> int:
        return min(self.groups, channels)

    def resolution(self, stage: int) -> tuple[int, int]:
        return self.image[0] >> stage, self.image[1] >> stage

    def block_channels(self) -> list[tuple[int, int, int, int]]:
        """(stage, block, c_in, c_out) for every residual block, in order."""
        out, c_in = [], self.widths[0]
        for s, (width, n) in enumerate(zip(self.widths, self.blocks, strict=True)):
            for b in range(n):
                out.append((s, b, c_in, width))
                c_in = width
        return out

    def weights(self) -> tuple[WeightSpec, ...]:
        n_blocks = sum(self.blocks)
        residual_scale = 1.0 / math.sqrt(n_blocks)
        out = _conv("stem", 3, self.image[2], self.widths[0], bias=True)
        for s, b, c_in, c_out in self.block_channels():
            p = f"stages.{s}.{b}"
            out += _norm(f"{p}.norm1", c_in)
            out += _conv(f"{p}.conv1", 3, c_in, c_out, bias=False)
            out += _norm(f"{p}.norm2", c_out)
            out += _conv(f"{p}.conv2", 3, c_out, c_out, bias=False, scale=residual_scale)
            if c_in != c_out:
                out += _conv(f"{p}.proj", 1, c_in, c_out, bias=False)
        out += _norm("norm", self.widths[-1])
        out += _dense("head", self.widths[-1], self.classes)
        return tuple(out)


@dataclass(frozen=True)
class TransformerConfig:
    """Decoder-only LM: token + learned position embeddings, pre-LN blocks, tied output head.

    Block: x += attn_out(causal_attention(attn_qkv(ln1(x)))); x += fc2(gelu(fc1(ln2(x)))).
    The fused qkv projection's output columns are [q | k | v], heads split each of them.
    Final LayerNorm, then logits = x @ tok_emb.T (tied, so no extra parameters).
    LayerNorm epsilon is 1e-5 and GELU is exact (erf) in both frameworks.
    """

    vocab: int
    context: int
    d_model: int
    layers: int
    heads: int
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError("d_model must be divisible by heads")

    def weights(self) -> tuple[WeightSpec, ...]:
        d, h = self.d_model, self.d_model * self.mlp_ratio
        residual_scale = 1.0 / math.sqrt(2 * self.layers)
        out = _embedding("tok_emb", self.vocab, d, 0.02)
        out += _embedding("pos_emb", self.context, d, 0.02)
        for i in range(self.layers):
            p = f"blocks.{i}"
            out += _norm(f"{p}.ln1", d)
            out += _dense(f"{p}.attn_qkv", d, 3 * d)
            out += _dense(f"{p}.attn_out", d, d, residual_scale)
            out += _norm(f"{p}.ln2", d)
            out += _dense(f"{p}.fc1", d, h)
            out += _dense(f"{p}.fc2", h, d, residual_scale)
        out += _norm("ln_f", d)
        return tuple(out)


@dataclass(frozen=True)
class EmbeddingTables:
    """A model's embedding tables as its exchange and memory see them: rows per table, the
    row width, the ids one sample looks up in each table. One record whether the tables
    are a built-in recommender's (``RecsysConfig.tables``) or a known model's (DLRM's)."""

    rows: tuple[int, ...]
    dim: int
    hotness: int = 1

    @property
    def params(self) -> int:
        return sum(self.rows) * self.dim

    @property
    def lookups_per_sample(self) -> int:
        return self.hotness * len(self.rows)


@dataclass(frozen=True)
class RecsysConfig:
    """Embedding-heavy click model (DLRM-like, simplified).

    Each sample has `hotness` ids per table (multi-hot), drawn from a Zipf(zipf) popularity
    law; each table's rows are sum-pooled. Dense features go through one ReLU layer to `dim`;
    [dense, pooled_0..pooled_T-1] is concatenated and fed to the top MLP (ReLU) -> 1 logit.
    A step touches only the looked-up rows: sparse gradients, where parameter servers shine.
    """

    table_rows: tuple[int, ...]
    dim: int
    hotness: int
    dense_features: int
    top: tuple[int, ...]
    zipf: float = 1.05

    @property
    def top_widths(self) -> tuple[int, ...]:
        return ((len(self.table_rows) + 1) * self.dim, *self.top, 1)

    @property
    def embedding_params(self) -> int:
        return self.tables.params

    @property
    def tables(self) -> EmbeddingTables:
        return EmbeddingTables(self.table_rows, self.dim, self.hotness)

    def weights(self) -> tuple[WeightSpec, ...]:
        out: list[WeightSpec] = []
        for t, rows in enumerate(self.table_rows):
            out += _embedding(f"tables.{t}", rows, self.dim, 0.05)
        out += _dense("bottom", self.dense_features, self.dim)
        w = self.top_widths
        for i in range(len(w) - 1):
            out += _dense(f"top.{i}", w[i], w[i + 1])
        return tuple(out)


ModelConfig = MLPConfig | CNNConfig | TransformerConfig | RecsysConfig
