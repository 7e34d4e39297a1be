"""A decoder-only transformer by its dimensions, as users name the models they train.

    transformer:layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,vocab=128256,seq=8192

Keys: ``layers``, ``hidden``, ``heads``, ``vocab``, ``seq`` (required); ``kv_heads``
(grouped-query attention; default ``heads``), ``ffn`` (the MLP's width), ``mlp`` (``gelu``:
two matrices, GPT; ``swiglu``: three, gated, Llama), ``tied`` (``yes``: the head reuses the
token embedding), ``positions`` (``learned`` or ``rope``), ``dropout`` (a probability; 0:
none), ``batch`` (sequences per device, default 1); a mixture of experts: ``experts`` (routed
experts per MLP), ``top_k`` (experts per token), ``shared`` (experts every token uses) and
``expert_ffn`` (one expert's width, default ``ffn``): every expert's parameters are held,
each token computes through its top-k and the shared ones; ``imbalance`` (default 1, a
balanced router): the busiest expert's tokens over the mean, which its rank's expert GEMMs
take the time of (the model's FLOPs stay the balanced count); ``dense_layers``: that many
leading blocks keep a dense MLP of ``ffn`` (DeepSeek-V3's first 3). Multi-head latent
attention (DeepSeek-V2/V3, MLA), where ``kv_rank`` is given: keys and values up-projected per
head from a ``kv_rank``-wide latent (and queries from a ``q_rank``-wide one where given),
``qk_dim`` + ``rope_dim`` per head for queries and keys, ``v_dim`` for values.
``head_size``: each head's width where it is not ``hidden / heads`` (Qwen3's 128 with 64
heads of a 5,120-wide model: the attention is wider than the model).

GPT-style by default (GELU MLP of 4 x hidden, LayerNorm with biases, learned positions, a tied
head); giving ``ffn`` without ``mlp`` means a gated MLP with RMSNorm, no biases, rotary
positions and an untied head, as Llama and most current open models are built.

Per block and per sequence of ``seq`` tokens, the figures the simulator reads (the rules of
``workloads.costs``: a multiply-accumulate is 2 FLOPs, training = 3 x forward, a value is
kept for backward when some backward reads it), in values (multiply by the precision's bytes):
parameters, forward FLOPs, kept activations (and the part tensor parallelism leaves whole on
every rank: the norms' inputs and outputs), and the element-wise traffic of the forward pass
(norms, residual adds, the MLP's activation, softmax and dropout over the attention scores),
which runs at memory bandwidth rather than at the matmul rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from workloads.operators import (
    Op,
    attended_keys,
    elementwise,
    embedding,
    gemm,
    latent_attention,
    norm,
    transformer_block,
    vocab_cross_entropy,
)
from workloads.quantities import read_number
from workloads.spec import WorkloadError, choices_message

PREFIX = "transformer:"
_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "mlp", "tied",
         "positions", "dropout", "batch", "experts", "top_k", "shared", "expert_ffn",
         "imbalance", "dense_layers", "q_rank", "kv_rank", "rope_dim", "qk_dim", "v_dim",
         "head_size", "window")
_REQUIRED = ("layers", "hidden", "heads", "vocab", "seq")
MLPS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope")


@dataclass(frozen=True)
class TransformerDims:
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    kv_heads: int = 0  # 0: as many as heads (multi-head attention)
    ffn: int = 0  # 0: 4 x hidden
    mlp: str = "gelu"
    tied: bool = True
    positions: str = "learned"
    dropout: float = 0.0
    batch: int = 1
    name: str = ""
    experts: int = 0  # routed experts per MLP (0: a dense MLP)
    top_k: int = 0  # experts each token is routed to
    shared: int = 0  # experts every token goes through (DeepSeek's shared experts)
    expert_ffn: int = 0  # one expert's MLP width (0: ffn)
    max_positions: int = 0  # a learned position table's length (0: seq)
    # the busiest expert's token rows over the mean (1: a balanced router, as MoE benchmarks
    # force it); it slows the experts' GEMMs, never the model's FLOPs
    imbalance: float = 1.0
    dense_layers: int = 0  # leading blocks with a dense MLP of ffn (DeepSeek-V3's first 3)
    # multi-head latent attention (DeepSeek-V2/V3) where kv_rank > 0: the latents' widths,
    # and per head the query/key width without and with rotary positions, the value width
    q_rank: int = 0  # 0: queries projected straight from the hidden state
    kv_rank: int = 0
    rope_dim: int = 0
    qk_dim: int = 0
    v_dim: int = 0
    head_size: int = 0  # each head's width (0: hidden / heads)
    window: int = 0  # a causal sliding window of keys (Mistral 7B v0.1: 4,096); 0: none

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "vocab", "seq", "batch"):
            if getattr(self, key) < 1:
                raise WorkloadError(f"transformer {key}={getattr(self, key)} must be >= 1")
        if self.hidden % self.heads and not (self.head_size or self.latent):
            raise WorkloadError(f"transformer hidden={self.hidden} must be a multiple of "
                                f"heads={self.heads}")
        if self.heads % self.groups:
            raise WorkloadError(f"transformer kv_heads={self.kv_heads} must divide "
                                f"heads={self.heads}")
        if self.mlp not in MLPS:
            raise WorkloadError(choices_message("transformer mlp", self.mlp, MLPS))
        if self.positions not in POSITIONS:
            raise WorkloadError(choices_message("transformer positions", self.positions,
                                                POSITIONS))
        if not 0 <= self.dropout < 1:
            raise WorkloadError(f"transformer dropout={self.dropout} must be in [0, 1)")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise WorkloadError(f"transformer top_k={self.top_k} must be from 1 to "
                                f"experts={self.experts}")
        if not self.experts and (self.top_k or self.shared or self.expert_ffn
                                 or self.imbalance != 1.0):
            raise WorkloadError("transformer top_k, shared, expert_ffn and imbalance need "
                                "experts=E")
        if self.dense_layers and not (self.experts and 0 < self.dense_layers < self.layers):
            raise WorkloadError(f"transformer dense_layers={self.dense_layers} needs experts=E "
                                f"and must be below layers={self.layers}")
        if self.kv_rank and not (self.qk_dim >= 1 and self.v_dim >= 1):
            raise WorkloadError("transformer kv_rank (latent attention) needs qk_dim= and "
                                "v_dim= (the per-head widths)")
        if not self.kv_rank and (self.q_rank or self.rope_dim or self.qk_dim or self.v_dim):
            raise WorkloadError("transformer q_rank, rope_dim, qk_dim and v_dim need kv_rank= "
                                "(latent attention)")
        if self.kv_rank and self.head_size:
            raise WorkloadError("transformer head_size: latent attention's widths are qk_dim, "
                                "rope_dim and v_dim")
        if self.kv_rank and self.kv_heads not in (0, self.heads):
            raise WorkloadError(f"transformer kv_heads={self.kv_heads}: latent attention "
                                f"up-projects keys and values for every head")
        if self.window < 0:
            raise WorkloadError(f"transformer window={self.window} must be >= 0 (0: none)")
        if self.window and self.kv_rank:
            raise WorkloadError("transformer window: a sliding window over latent attention "
                                "is not modelled")
        if not 1.0 <= self.imbalance <= max(1, self.experts):
            raise WorkloadError(f"transformer imbalance={self.imbalance} must be from 1 (a "
                                f"balanced router) to experts={self.experts} (all on one)")

    @property
    def groups(self) -> int:
        return self.kv_heads or self.heads

    @property
    def width(self) -> int:
        """The MLP's hidden width."""
        return self.ffn or 4 * self.hidden

    @property
    def gated(self) -> bool:
        return self.mlp == "swiglu"

    @property
    def latent(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_rank > 0

    @property
    def kv_width(self) -> int:
        """One token's key (or value) width; under latent attention the mean of the two,
        each head's key ``qk_dim + rope_dim`` and value ``v_dim`` wide (what context
        parallelism passes around, and a kernel reads)."""
        if self.latent:
            return self.heads * (self.qk_dim + self.rope_dim + self.v_dim) // 2
        return self.groups * self.head_dim

    @property
    def head_dim(self) -> int:
        """The attention kernel's per-head width: under latent attention the mean of the
        query/key and value widths, so its FLOPs (2 T^2 per head per width of each of the
        two products) are the model's."""
        if self.latent:
            return (self.qk_dim + self.rope_dim + self.v_dim) // 2
        return self.head_size or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """The queries' (and the attention output's) width: heads x head width."""
        return self.heads * self.head_dim

    @property
    def attention_params(self) -> int:
        """The attention's weight matrices and (latent attention) its latents' norms:
        query, key, value and output projections."""
        d = self.hidden
        if not self.latent:
            return d * (self.q_width + 2 * self.kv_width) + self.q_width * d
        h, qk = self.heads, self.qk_dim + self.rope_dim
        q = (d * self.q_rank + self.q_rank + self.q_rank * h * qk if self.q_rank
             else d * h * qk)
        kv = d * (self.kv_rank + self.rope_dim) + self.kv_rank + self.kv_rank * h * (
            self.qk_dim + self.v_dim)
        return q + kv + h * self.v_dim * d

    @property
    def _attention_macs(self) -> int:
        """One token's multiply-accumulates through the attention's projections."""
        norms = (self.q_rank + self.kv_rank) if self.latent else 0
        return self.attention_params - norms

    @property
    def _attention_kept(self) -> int:
        """One token's values the attention keeps for backward besides the norms and the
        scores: queries, keys, values and its output (and the latents, normed and not)."""
        if not self.latent:
            return 2 * self.q_width + 2 * self.kv_width
        h, qk = self.heads, self.qk_dim + self.rope_dim
        return (2 * self.q_rank + (self.kv_rank + self.rope_dim) + self.kv_rank
                + 2 * h * qk + 2 * h * self.v_dim)

    def dense_block(self) -> TransformerDims:
        """The shape of a leading dense block (``dense_layers``): the same attention, a
        dense MLP of ``ffn``."""
        return replace(self, experts=0, top_k=0, shared=0, expert_ffn=0, imbalance=1.0,
                       dense_layers=0)

    @property
    def routed_layers(self) -> int:
        return self.layers - self.dense_layers

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.width

    @property
    def token_width(self) -> int:
        """The MLP width each token goes through: its top-k experts and the shared ones
        (the dense MLP's width without experts)."""
        return (self.top_k + self.shared) * self.expert_width if self.experts else self.width

    def _mlp_params(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def routed_expert_params(self) -> int:
        """One block's routed experts' parameters (what expert parallelism shards; the
        shared experts and the router stay with every rank)."""
        return self.experts * self._mlp_params(self.expert_width)

    # Per block, per sequence ------------------------------------------------------------

    @property
    def block_params(self) -> int:
        """Every parameter of one block: with experts, all of them (what memory holds)."""
        mlp = (self.router_params + self._mlp_params(self.expert_width)
               * (self.experts + self.shared) if self.experts else self._mlp_params(self.width))
        return self._block_params(mlp)

    @property
    def active_block_params(self) -> int:
        """The parameters one token passes through: with experts, its top-k and the shared
        ones and the router (what compute reads)."""
        mlp = (self.router_params + self._mlp_params(self.token_width) if self.experts
               else self._mlp_params(self.width))
        return self._block_params(mlp)

    def _block_params(self, mlp: int) -> int:
        d, f, kv = self.hidden, self.width, self.kv_width
        matrices = self.attention_params + mlp
        if self.gated:  # RMSNorm weights only, no biases (Llama)
            return matrices + 2 * d
        return matrices + (self.q_width + 2 * kv) + d + f + d + 4 * d  # biases, 2 LayerNorms

    @property
    def block_forward_flops(self) -> float:
        t = self.seq
        matrices = (self._attention_macs + self.router_params
                    + self._mlp_params(self.token_width))
        return float(2 * t * matrices + self.attention_forward_flops)

    @property
    def attention_forward_flops(self) -> float:
        """Scores q.k^T and their weighted sum of v: what selective recomputation repeats
        (the full square, as Megatron-LM counts it: each query's row spans the window where
        there is one)."""
        keys = attended_keys(self.seq, self.window)
        return float(4 * self.seq * keys * self.heads * self.head_dim)

    @property
    def block_activations(self) -> float:
        """Values kept per sequence: norms' inputs and outputs, q, k, v, the attention
        output, the MLP's inputs (GELU: fc1 out and GELU out; SwiGLU: gate, up and their
        product), heads x T attention probabilities per token (a non-fused kernel)."""
        d, t = self.hidden, self.seq
        mlp = (3 if self.gated else 2) * self.token_width
        return float(t * (4 * d + self._attention_kept + mlp) + self.attention_activations)

    @property
    def attention_activations(self) -> float:
        """The heads x T x T probabilities, and with dropout the dropped-out copy the
        weighted sum of v reads: what selective recomputation (and a fused attention kernel)
        does not keep."""
        return float(self.heads * self.seq * self.seq * (2 if self.dropout else 1))

    # One-byte dropout masks kept for backward (Korthikanti et al. 2022, arXiv:2205.05198,
    # section 4.1: the attention's mask over the scores, split by tensor parallelism; the
    # masks of the two dropouts on the residual stream, whole on every tensor-parallel rank
    # without sequence parallelism). In bytes, whatever the precision.

    @property
    def attention_mask_bytes(self) -> float:
        return float(self.heads * self.seq * self.seq) if self.dropout else 0.0

    @property
    def replicated_mask_bytes(self) -> float:
        return float(2 * self.seq * self.hidden) if self.dropout else 0.0

    @property
    def block_mask_bytes(self) -> float:
        return self.attention_mask_bytes + self.replicated_mask_bytes

    @property
    def block_replicated_activations(self) -> float:
        """Kept values every tensor-parallel rank holds whole without sequence parallelism:
        the two norms' inputs and outputs (Korthikanti et al. 2022, section 4.1)."""
        return float(self.seq * 4 * self.hidden)

    @property
    def block_elementwise(self) -> float:
        """Forward element-wise traffic split by tensor parallelism (values read + written):
        the MLP's activation (GELU: read f, write f; SwiGLU: read 2f, write f) and softmax
        over the scores (read, write), plus dropout over them (read, write) when trained
        with dropout."""
        t = self.seq
        mlp = (3 if self.gated else 2) * self.token_width
        scores = (4 if self.dropout else 2) * self.heads * t
        return float(t * (mlp + scores))

    @property
    def attention_elementwise(self) -> float:
        """The scores' share of ``block_elementwise``: re-run by selective recomputation."""
        return float(self.seq * (4 if self.dropout else 2) * self.heads * self.seq)

    @property
    def block_replicated_elementwise(self) -> float:
        """Forward element-wise traffic every tensor-parallel rank does whole without
        sequence parallelism: two norms (read, write) and two residual adds (read two,
        write one)."""
        return float(self.seq * 10 * self.hidden)

    # Whole model -------------------------------------------------------------------------

    @property
    def embedding_params(self) -> int:
        table = self.max_positions or self.seq
        positions = table * self.hidden if self.positions == "learned" else 0
        return self.vocab * self.hidden + positions

    @property
    def head_params(self) -> int:
        norm = (1 if self.gated else 2) * self.hidden
        return norm + (0 if self.tied else self.vocab * self.hidden)

    def _over_blocks(self, per_block: Callable[[TransformerDims], float]) -> float:
        """A per-block figure summed over the blocks: the leading dense ones and the rest."""
        dense = per_block(self.dense_block()) if self.dense_layers else 0.0
        return self.routed_layers * per_block(self) + self.dense_layers * dense

    @property
    def params(self) -> int:
        return int(self.embedding_params + self._over_blocks(lambda b: b.block_params)
                   + self.head_params)

    @property
    def active_params(self) -> int:
        """Parameters one token uses (all of them for a dense model): Mixtral's '12.9B
        active' of 46.7B."""
        return int(self.embedding_params + self._over_blocks(lambda b: b.active_block_params)
                   + self.head_params)

    @property
    def head_forward_flops(self) -> float:
        return float(2 * self.seq * self.hidden * self.vocab)

    @property
    def forward_flops(self) -> float:
        return self._over_blocks(lambda b: b.block_forward_flops) + self.head_forward_flops

    @property
    def head_activations(self) -> float:
        """The final norm's input and output and the softmax over the vocabulary."""
        return float(self.seq * (2 * self.hidden + self.vocab))

    @property
    def activations(self) -> float:
        return self._over_blocks(lambda b: b.block_activations) + self.head_activations

    def pre_ops(self) -> tuple[Op, ...]:
        """The token embedding (and learned positions) of one sequence."""
        t, d = self.seq, self.hidden
        pre = [embedding("tokens", t, d)]
        if self.positions == "learned":
            pre.append(elementwise("positions", 3 * t * d, 2 * t * d))
        return tuple(pre)

    def block_ops(self) -> tuple[Op, ...]:
        """One block's forward operators for one sequence (workloads.operators)."""
        attention = (latent_attention(self.seq, self.hidden, self.heads, self.q_rank,
                                      self.kv_rank, self.rope_dim, self.qk_dim, self.v_dim,
                                      dropout=self.dropout) if self.latent else None)
        return tuple(transformer_block(self.seq, self.hidden, self.heads, self.kv_width,
                                       self.width, gated=self.gated, dropout=self.dropout,
                                       bias=not self.gated, experts=self.experts,
                                       top_k=self.top_k, shared=self.shared,
                                       expert_ffn=self.expert_width,
                                       imbalance=self.imbalance, attention=attention,
                                       head_dim=self.head_dim, window=self.window))

    def post_ops(self) -> tuple[Op, ...]:
        """The final norm, the head and the loss."""
        t = self.seq
        return (norm("final_norm", t * self.hidden), gemm("head", t, self.vocab, self.hidden),
                vocab_cross_entropy("loss", t, self.vocab))

    def ops(self) -> tuple[Op, ...]:
        """The forward operators of one sequence: embedding, blocks, head."""
        dense = self.dense_block().block_ops() * self.dense_layers if self.dense_layers else ()
        return (*self.pre_ops(), *dense, *(self.block_ops() * self.routed_layers),
                *self.post_ops())

    def describe(self) -> str:
        parts = [f"{self.layers} layers", f"hidden {self.hidden}", f"{self.heads} heads"]
        if self.kv_heads and self.kv_heads != self.heads:
            parts.append(f"{self.kv_heads} kv heads")
        if self.head_size:
            parts.append(f"heads of {self.head_size}")
        if self.latent:
            parts.append(f"latent attention (q {self.q_rank or 'direct'}, kv {self.kv_rank}, "
                         f"qk {self.qk_dim}+{self.rope_dim}, v {self.v_dim})")
        if self.dense_layers:
            parts.append(f"first {self.dense_layers} dense ({self.mlp} MLP {self.width})")
        if self.experts:
            parts.append(f"{self.experts} experts of {self.mlp} MLP {self.expert_width}, top "
                         f"{self.top_k}" + (f", {self.shared} shared" if self.shared else ""))
        else:
            parts.append(f"{self.mlp} MLP {self.width}")
        parts += [f"vocab {self.vocab}", f"seq {self.seq}"]
        return ", ".join(parts)


def is_dims(text: str) -> bool:
    """``transformer:KEY=...`` (a model by its dimensions), not ``transformer:S``."""
    return text.strip().lower().startswith(PREFIX) and "=" in text


def parse_dims(text: str) -> TransformerDims:
    """The model ``transformer:k=v,...`` names; WorkloadError (one line, naming the key)."""
    body = text.strip()[len(PREFIX):]
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise WorkloadError(f"transformer: {item!r} is not KEY=VALUE")
        if key not in _KEYS:
            raise WorkloadError(choices_message("transformer key", key, _KEYS))
        if key in values:
            raise WorkloadError(f"transformer: {key} given twice")
        values[key] = value.strip()
    missing = [k for k in _REQUIRED if k not in values]
    if missing:
        raise WorkloadError(f"transformer needs {', '.join(k + '=' for k in missing)} "
                            f"(keys: {', '.join(_KEYS)})")
    ints = {k: _int(k, values[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn",
                                            "vocab", "seq", "batch", "experts", "top_k",
                                            "shared", "expert_ffn", "dense_layers", "q_rank",
                                            "kv_rank", "rope_dim", "qk_dim", "v_dim", "head_size",
                                            "window")
            if k in values}
    llama = "ffn" in values and "mlp" not in values
    mlp = values.get("mlp", "swiglu" if llama else "gelu")
    tied = values.get("tied", "no" if llama else "yes").lower()
    if tied not in ("yes", "no", "true", "false"):
        raise WorkloadError(f"transformer tied={tied!r} must be yes or no")
    dropout, imbalance = (_float(key, values.get(key, default))
                          for key, default in (("dropout", "0"), ("imbalance", "1")))
    return TransformerDims(**ints, mlp=mlp, tied=tied in ("yes", "true"),
                           positions=values.get("positions", "rope" if llama else "learned"),
                           dropout=dropout, imbalance=imbalance, name=text.strip())


def _float(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise WorkloadError(f"transformer {key}={text!r} is not a number") from None


def _int(key: str, text: str) -> int:
    value = read_number(text)
    if value is None or value != int(value):
        raise WorkloadError(f"transformer {key}={text!r} is not a whole number")
    return int(value)


def from_config(vocab: int, context: int, d_model: int, layers: int, heads: int,
                mlp_ratio: int, name: str, batch: int = 1) -> TransformerDims:
    """The built-in family's architecture (workloads.configs.TransformerConfig) in these
    terms: GPT-style, tied, learned positions, no dropout."""
    return TransformerDims(layers=layers, hidden=d_model, heads=heads, vocab=vocab,
                           seq=context, ffn=mlp_ratio * d_model, batch=batch, name=name)
