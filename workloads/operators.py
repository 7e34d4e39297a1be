"""A model as the operators a device runs: the record the device model times and sizes.

FLOPs alone cannot say how long a step takes on an accelerator: a 64-channel 1x1 conv reads
and writes as many bytes as it multiplies, BatchNorm and ReLU move every activation through
memory twice more, and a small model's step is many kernels of microseconds each. So a
workload also lists its forward operators, per sample, with the shapes that decide their
speed; ``harness/sim/systems/device_model.py`` times them (forward and backward), and every strategy
reads that one time.

Operators (one record, ``kind`` tells which fields matter):

* ``gemm``: a matrix product of ``rows`` x ``k`` by ``k`` x ``n``, ``rows`` per sample (the
  tokens of a sequence, the pixels of a conv's output: a conv is its implicit GEMM, as cuDNN
  runs it), ``repeat`` products of that shape per sample. Backward: two products of the
  same FLOPs (input gradient, weight gradient).
* ``elementwise``: ``values`` read plus written per sample forward (norms, activations,
  residual adds, dropout, pooling, softmax, the loss) and ``backward_values`` backward.
* ``gather``: embedding lookups moving ``values`` per sample each way.
* ``attention``: scaled dot-product attention over ``seq`` tokens, ``heads`` heads of
  ``head_dim`` (``causal``, ``dropout`` as trained): fused (one kernel, no T x T scores in
  memory, FlashAttention, torch's SDPA) or unfused (two batched GEMMs, softmax and dropout
  over the scores) as the framework runs it; the device model decides.

Conventions are those of ``workloads.costs``: a multiply-accumulate is 2 FLOPs; values are
counted in elements (the precision gives their bytes). ``conv``: the GEMM is a convolution
(frameworks' fp32 defaults differ for convs and matmuls: torch runs convs in TF32 on Ampere
and later, matmuls in full fp32).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace
from typing import Any

from workloads.configs import CNNConfig, MLPConfig, ModelConfig, RecsysConfig, TransformerConfig

GEMM, ELEMENTWISE, GATHER, ATTENTION = "gemm", "elementwise", "gather", "attention"
KINDS = (GEMM, ELEMENTWISE, GATHER, ATTENTION)


@dataclass(frozen=True)
class Op:
    """One forward operator of one sample (see the module docstring for each kind)."""

    name: str
    kind: str
    rows: float = 0.0  # gemm: M per sample; gather: rows looked up per sample
    n: int = 0
    k: int = 0
    repeat: int = 1  # gemm: products of this shape per sample (e.g. one per head)
    conv: bool = False
    input_values: float = 0.0  # a conv's input tensor per sample (its layout transposes)
    values: float = 0.0  # elementwise/gather: values read + written forward, per sample
    backward_values: float = 0.0
    kernels: int = 1  # forward kernel launches (per step, not per sample)
    backward_kernels: int = 1
    # the busiest rank's share over the mean (a router's expert imbalance): its time, never
    # its FLOPs, which stay the balanced model's
    load: float = 1.0
    # gemm: one of a layer's routed experts (``repeat`` = the experts, ``rows`` each one's
    # share of a sample's tokens): expert parallelism hands a rank 1/EP of the experts, each
    # with the rows of every rank of its group (``expert_sharded``)
    routed: bool = False
    # elementwise: computes in fp32 whatever the training precision, on an input of this
    # many values per sample cast up from it (and its gradient cast back): the loss, as
    # torch's autocast runs log_softmax and nll_loss in fp32 and Megatron-LM casts the
    # logits with .float() before its cross-entropy
    fp32_input: float = 0.0
    # gather: the table is kept, read and updated in fp32 whatever the training precision:
    # the rows are read at 4 bytes and the output written at the precision's; backward the
    # output's gradient is read at the precision's and each lookup's gradient row written
    # at 4 bytes with its int64 id (a sparse gradient, updated in place: no half copy)
    fp32_table: bool = False
    # attention
    heads: int = 0
    seq: int = 0
    head_dim: int = 0
    kv_heads: int = 0
    causal: bool = True
    dropout: float = 0.0
    # a sliding window: each query attends to the last ``window`` keys only (Mistral 7B
    # v0.1's 4,096); 0: every key (or every earlier one, causal)
    window: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"operator {self.name}: unknown kind {self.kind!r} "
                                f"(choose from {', '.join(KINDS)})")

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample (matmul-like work only, as workloads.costs counts)."""
        if self.kind == GEMM:
            return 2.0 * self.rows * self.n * self.k * self.repeat
        if self.kind == ATTENTION:  # q.k^T and the weighted sum of v, the full square
            return 4.0 * self.seq * self.keys * self.heads * self.head_dim
        return 0.0

    @property
    def keys(self) -> int:
        return attended_keys(self.seq, self.window)

    @property
    def scored_pairs(self) -> float:
        """Query-key pairs a fused kernel computes per head: causal attention skips the
        masked half (T^2 / 2), a causal sliding window every key older than it too
        (T w - w^2 / 2, the same continuous count: FlashAttention-2's ``window_size``,
        FlexAttention's block mask and Transformer Engine skip the blocks outside it)."""
        t, w = self.seq, self.keys
        return float(t * w - w * w / 2) if self.causal else float(t * w)


def attended_keys(seq: int, window: int) -> int:
    """The keys a query's row of scores spans: the window where one is narrower than the
    sequence (the full-square count Megatron-LM's FLOPs formula makes, per row)."""
    return min(seq, window) if window else seq


def expert_sharded(op: Op, expert: int) -> Op:
    """``op`` on one rank of ``expert``-way expert parallelism: a routed expert's GEMM runs
    1/EP of the experts, each on EP times the rows (the tokens every rank of the group sends
    it), so the FLOPs are the rank's share while each GEMM is EP times taller and reads
    1/EP of the weights (Megatron-Core's grouped GEMM over a rank's local experts); every
    other operator is unchanged."""
    if not op.routed or expert <= 1:
        return op
    local = max(1, op.repeat // expert)
    return replace(op, rows=op.rows * op.repeat / local, repeat=local)


#: An operator as a JSON-able record: its fields' own values (names, counts, sizes, flags).
OpRecord = dict[str, str | int | float | bool]


def to_records(ops: tuple[Op, ...]) -> list[OpRecord]:
    """Operators as JSON-able records (the fields that differ from the defaults)."""
    blank = Op("", GEMM)
    return [{f.name: getattr(op, f.name) for f in fields(Op)
             if f.name in ("name", "kind") or getattr(op, f.name) != getattr(blank, f.name)}
            for op in ops]


def from_records(records: Any) -> tuple[Op, ...]:
    """``to_records``' output back; ValueError (one line) for anything else."""
    if not isinstance(records, list):
        raise ValueError(f"operators must be a list of records, not {type(records).__name__}")
    known = {f.name for f in fields(Op)}
    out = []
    for record in records:
        if not isinstance(record, dict) or not set(record) <= known:
            raise ValueError(f"not an operator record: {record!r}")
        out.append(Op(**record))
    return tuple(out)


def total_forward_flops(ops: tuple[Op, ...]) -> float:
    return sum(op.forward_flops for op in ops)


def kernels(ops: tuple[Op, ...]) -> int:
    """Kernel launches of one training step's forward and backward passes."""
    return sum(op.kernels + op.backward_kernels for op in ops)


# Builders -------------------------------------------------------------------------------


def gemm(name: str, rows: float, n: int, k: int, *, repeat: int = 1, bias: bool = False,
         routed: bool = False) -> Op:
    """A GEMM; with ``bias`` the bias add is fused into it forward (cuBLAS epilogue, addmm)
    and its gradient is one more reduction kernel backward; ``routed``: ``Op.routed``."""
    return Op(name, GEMM, rows=float(rows), n=n, k=k, repeat=repeat, kernels=1,
              backward_kernels=2 + int(bias), routed=routed)


def conv(name: str, pixels: float, c_out: int, k: int, input_values: float, *,
         bias: bool = False) -> Op:
    """A convolution as its implicit GEMM: ``pixels`` output positions per sample, a
    reduction of ``k`` = kernel area x input channels, over an input of ``input_values``."""
    return Op(name, GEMM, rows=float(pixels), n=c_out, k=k, conv=True,
              input_values=float(input_values), kernels=1, backward_kernels=2 + int(bias))


def elementwise(name: str, values: float, backward_values: float | None = None,
                kernels: int = 1, backward_kernels: int | None = None) -> Op:
    """``values`` read + written forward; backward by default reads the incoming gradient
    and the saved input and writes the input's gradient: 1.5 x a one-in-one-out forward."""
    return Op(name, ELEMENTWISE, values=float(values),
              backward_values=float(1.5 * values if backward_values is None
                                    else backward_values),
              kernels=kernels, backward_kernels=kernels if backward_kernels is None
              else backward_kernels)


def norm(name: str, size: float) -> Op:
    """A Layer/Batch/RMS norm over ``size`` values: forward reads the input twice (the
    statistics, then the normalisation) and writes the output; backward reads the input and
    the output's gradient twice (the reductions, then the input's gradient) and writes it."""
    return elementwise(name, 3 * size, 5 * size)


def dense_stack(widths: tuple[int, ...], name: str = "dense", relu_last: bool = False
                ) -> list[Op]:
    """Linear layers (bias fused) with a ReLU between them."""
    out: list[Op] = []
    pairs = list(itertools.pairwise(widths))
    for i, (a, b) in enumerate(pairs):
        out.append(gemm(f"{name}{i}", 1, b, a, bias=True))
        if i < len(pairs) - 1 or relu_last:
            out.append(elementwise(f"{name}{i}.relu", 2 * b))
    return out


def cross_entropy(name: str, rows: float, classes: int) -> Op:
    """Softmax cross-entropy over ``classes`` per row, in fp32 (``Op.fp32_input``):
    log-softmax reads the logits twice and writes them; backward reads the probabilities and
    writes the logits' gradient."""
    return replace(elementwise(name, 3 * rows * classes, 2 * rows * classes, kernels=2,
                               backward_kernels=2), fp32_input=float(rows * classes))


def vocab_cross_entropy(name: str, rows: float, vocab: int) -> Op:
    """A language model's loss over its vocabulary as Megatron-LM computes it (its
    vocab-parallel cross-entropy, megatron/core/tensor_parallel/cross_entropy.py; the same
    passes since Megatron-LM 2020): the logits cast to fp32 (``.float()``, ``fp32_input``),
    then in place the row maximum (a read), the shift by it (a read and a write), ``exp``
    (a read and a write), the row sum (a read) and the division into the softmax kept for
    backward (a read and a write): 8 fp32 values per logit; backward scatters the target's
    -1 and scales the softmax by the loss's gradient in place (a read and a write)."""
    return replace(elementwise(name, 8 * rows * vocab, 2 * rows * vocab, kernels=5,
                               backward_kernels=2), fp32_input=float(rows * vocab))


def latent_attention(seq: int, hidden: int, heads: int, q_rank: int, kv_rank: int,
                     rope_dim: int, qk_dim: int, v_dim: int, *, dropout: float = 0.0,
                     causal: bool = True) -> list[Op]:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section 2.1; V3): the
    query from a ``q_rank``-wide latent (normed; straight from the hidden state where
    ``q_rank`` is 0), keys and values up-projected per head from a normed ``kv_rank``-wide
    latent, a ``rope_dim``-wide rotary key shared by the heads, then attention over
    ``qk_dim + rope_dim``-wide queries and keys and ``v_dim``-wide values, and the output
    projection. The kernel is timed at the mean of the two widths, which gives its FLOPs."""
    t, d, h, qk = seq, hidden, heads, qk_dim + rope_dim
    query = ([gemm("q_down", t, q_rank, d), norm("q_norm", t * q_rank),
              gemm("q_up", t, h * qk, q_rank)] if q_rank else [gemm("q", t, h * qk, d)])
    return [*query, gemm("kv_down", t, kv_rank + rope_dim, d), norm("kv_norm", t * kv_rank),
            gemm("kv_up", t, h * (qk_dim + v_dim), kv_rank),
            Op("attention", ATTENTION, heads=h, seq=t, head_dim=(qk + v_dim) // 2,
               kv_heads=h, causal=causal, dropout=dropout),
            gemm("proj", t, d, h * v_dim)]


def transformer_block(seq: int, hidden: int, heads: int, kv_width: int, ffn: int, *,
                      gated: bool, dropout: float, causal: bool = True,
                      bias: bool = True, experts: int = 0, top_k: int = 0, shared: int = 0,
                      expert_ffn: int = 0, imbalance: float = 1.0,
                      attention: list[Op] | None = None, head_dim: int = 0,
                      window: int = 0) -> list[Op]:
    """One pre-norm (or post-norm: the same operators) transformer block of ``seq`` tokens:
    norm, fused QKV projection, attention, output projection, residual add, norm, MLP
    (GELU: two matrices; SwiGLU: gate and up fused, then down), residual add; dropout after
    the attention's and the MLP's projections when trained with dropout. With ``experts``
    the MLP is routed: a router GEMM and its softmax, each token's rows copied to its
    ``top_k`` experts and back (permute, unpermute), the experts as grouped GEMMs of
    ``seq * top_k / experts`` rows each (the busiest ``imbalance`` x that, in time), and
    ``shared`` experts as a dense MLP. ``attention``: the projections and the kernel in
    place of the fused QKV ones (``latent_attention``); ``head_dim``: each head's width
    where it is not ``hidden / heads``; ``window``: a causal sliding window (``Op.window``)."""
    if experts:
        return _moe_block(seq, hidden, heads, kv_width, gated=gated, dropout=dropout,
                          causal=causal, bias=bias, experts=experts, top_k=top_k,
                          shared=shared, expert_ffn=expert_ffn, imbalance=imbalance,
                          attention=attention, head_dim=head_dim, window=window)
    t, d = seq, hidden
    hd = head_dim or d // heads
    q = heads * hd
    ops = [norm("ln1", t * d), *(attention or [
           gemm("qkv", t, q + 2 * kv_width, d, bias=bias),
           Op("attention", ATTENTION, heads=heads, seq=t, head_dim=hd,
              kv_heads=kv_width // hd, causal=causal, dropout=dropout, window=window),
           gemm("proj", t, d, q, bias=bias)])]
    if dropout:
        ops.append(elementwise("proj.dropout", 2 * t * d + t * d / 4))
    ops += [elementwise("residual1", 3 * t * d, 2 * t * d), norm("ln2", t * d)]
    if gated:
        ops += [gemm("gate_up", t, 2 * ffn, d, bias=bias),
                elementwise("swiglu", 3 * t * ffn, 5 * t * ffn)]
    else:
        ops += [gemm("fc1", t, ffn, d, bias=bias), elementwise("gelu", 2 * t * ffn)]
    ops.append(gemm("fc2", t, d, ffn, bias=bias))
    if dropout:
        ops.append(elementwise("fc2.dropout", 2 * t * d + t * d / 4))
    ops.append(elementwise("residual2", 3 * t * d, 2 * t * d))
    return ops


def _moe_block(seq: int, hidden: int, heads: int, kv_width: int, *, gated: bool,
               dropout: float, causal: bool, bias: bool, experts: int, top_k: int,
               shared: int, expert_ffn: int, imbalance: float = 1.0,
               attention: list[Op] | None = None, head_dim: int = 0,
               window: int = 0) -> list[Op]:
    t, d = seq, hidden
    dense = transformer_block(t, d, heads, kv_width, max(1, expert_ffn * shared),
                              gated=gated, dropout=dropout, causal=causal, bias=bias,
                              attention=attention, head_dim=head_dim, window=window)
    cut = next(i for i, op in enumerate(dense) if op.name == "ln2") + 1
    shared_mlp = dense[cut:-1] if shared else []
    routed = t * top_k  # token-rows through the experts
    rows = routed / experts  # each expert's share, balanced: one grouped GEMM for all
    width = (2 if gated else 1) * expert_ffn
    act = (elementwise("experts.swiglu", 3 * routed * expert_ffn, 5 * routed * expert_ffn)
           if gated else elementwise("experts.gelu", 2 * routed * expert_ffn))
    busiest = [replace(op, load=imbalance) for op in (
        gemm("experts.in", rows, width, d, repeat=experts, bias=bias, routed=True), act,
        gemm("experts.out", rows, d, expert_ffn, repeat=experts, bias=bias, routed=True))]
    return [*dense[:cut], gemm("router", t, experts, d),
            elementwise("router.softmax", 2 * t * experts), elementwise("permute", 2 * routed * d),
            *busiest, elementwise("unpermute", 3 * routed * d), *shared_mlp, dense[-1]]


def embedding(name: str, lookups: float, dim: int, fp32_table: bool = False) -> Op:
    """Gathering ``lookups`` rows of ``dim`` per sample (and scattering their gradients);
    ``fp32_table``: an fp32 table with a sparse gradient (``Op.fp32_table``)."""
    return Op(name, GATHER, rows=float(lookups), values=float(2 * lookups * dim),
              backward_values=float(2 * lookups * dim), kernels=1, backward_kernels=2,
              fp32_table=fp32_table)


def config_operators(config: ModelConfig) -> tuple[Op, ...]:
    """The forward operators of one sample of a built-in family's architecture (the layers
    workloads.configs describes and both frameworks build)."""
    if isinstance(config, MLPConfig):
        return (*dense_stack(config.widths), cross_entropy("loss", 1, config.classes))
    if isinstance(config, CNNConfig):
        return _cnn(config)
    if isinstance(config, TransformerConfig):
        t, d = config.context, config.d_model
        block = transformer_block(t, d, config.heads, d, config.mlp_ratio * d, gated=False,
                                  dropout=0.0)
        return (embedding("tokens", t, d), elementwise("positions", 3 * t * d, 2 * t * d),
                *(block * config.layers), norm("ln_f", t * d),
                gemm("head", t, config.vocab, d), cross_entropy("loss", t, config.vocab))
    if isinstance(config, RecsysConfig):
        lookups = len(config.table_rows) * config.hotness
        return (embedding("tables", lookups, config.dim),
                *dense_stack((config.dense_features, config.dim), "bottom", relu_last=True),
                elementwise("concat", 2 * config.top_widths[0], 2 * config.top_widths[0]),
                *dense_stack(config.top_widths, "top"),
                elementwise("loss", 4, 3))
    raise TypeError(f"not a model config: {config!r}")


def _cnn(config: CNNConfig) -> tuple[Op, ...]:
    """The built-in convnet: a 3x3 stem, pre-activation residual blocks (GroupNorm, ReLU,
    3x3 convs, a 1x1 projection where the width changes), a 2x2 pool between stages, then
    norm, ReLU, global average pool and the dense head."""
    h, w = config.resolution(0)
    c0 = config.widths[0]
    image = config.image[0] * config.image[1] * config.image[2]
    ops = [conv("stem", h * w, c0, 9 * config.image[2], image, bias=True)]
    for s, b, c_in, c_out in config.block_channels():
        if s > 0 and b == 0:
            ops.append(elementwise("pool", h * w * c_in * 1.25, h * w * c_in * 2.25))
        h, w = config.resolution(s)
        ops += [norm("norm1", h * w * c_in), elementwise("relu1", 2 * h * w * c_in),
                conv("conv1", h * w, c_out, 9 * c_in, h * w * c_in),
                norm("norm2", h * w * c_out), elementwise("relu2", 2 * h * w * c_out),
                conv("conv2", h * w, c_out, 9 * c_out, h * w * c_out)]
        if c_in != c_out:
            ops.append(conv("proj", h * w, c_out, c_in, h * w * c_in))
        ops.append(elementwise("add", 3 * h * w * c_out, 2 * h * w * c_out))
    c = config.widths[-1]
    return (*ops, norm("norm", h * w * c), elementwise("relu", 2 * h * w * c),
            elementwise("pool", h * w * c + c, h * w * c + c),
            gemm("head", 1, config.classes, c, bias=True),
            cross_entropy("loss", 1, config.classes))
