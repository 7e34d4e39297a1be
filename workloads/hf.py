"""A model by its Hugging Face ``config.json``, as users already have it:

    hf:path/to/config.json,seq=8192[,batch=1][,dropout=0.1][,imbalance=1.2]

The file gives the architecture (layers, hidden, heads, kv heads, MLP width, vocabulary,
experts); the training sequence length is given (``seq=``), never taken from
``max_position_embeddings``, which is the longest the model accepts, not what it trains at.
Llama, Mistral, Mixtral, Qwen2/Qwen3 and their MoE models (heads wider than the model
included), Gemma (its GeGLU MLP and tied embedding), GPT-2, GPT-NeoX and DeepSeek-V2/V3
configs are read (DeepSeek's multi-head latent
attention by its ranks and head widths, its leading dense layers by
``first_k_dense_replace``); any other ``model_type`` is refused by name rather
than guessed. A sliding window shorter than the sequence is read (Mistral 7B v0.1's); layers
mixing windowed and full attention are refused. Every error is one line naming the file
and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from workloads.dims import TransformerDims, is_dims, parse_dims
from workloads.quantities import read_number
from workloads.spec import WorkloadError

PREFIX = "hf:"
_OPTIONS = ("seq", "batch", "dropout", "imbalance")  # imbalance: a MoE's busiest expert

# model_type -> the family whose keys and conventions it uses
_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
               "gemma")
#: model_type -> its gated MLP's activations (GeGLU's GELU costs what SwiGLU's SiLU does: the
#: same three matrices, one element-wise gate) and whether the embedding is tied where the
#: file does not say (transformers' GemmaConfig ties by default, LlamaConfig does not)
_GATED_ACTS = {"gemma": ("gelu", "gelu_pytorch_tanh")}
_TIED_BY_DEFAULT = ("gemma",)
_GPT2 = ("gpt2",)
_NEOX = ("gpt_neox",)
_DEEPSEEK = ("deepseek_v2", "deepseek_v3")


@dataclass(frozen=True)
class _Config:
    """A ``config.json`` as read: free-form JSON (each ``model_type`` has keys of its own,
    most of which are not read), and the file it came from, which every error names."""

    data: dict[str, Any]
    where: str

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


class _Fields(TypedDict, total=False):
    """The TransformerDims fields a config gives (the options give the rest)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    mlp: str
    tied: bool
    positions: str
    max_positions: int
    head_size: int
    experts: int
    top_k: int
    shared: int
    expert_ffn: int
    dense_layers: int
    q_rank: int
    kv_rank: int
    rope_dim: int
    qk_dim: int
    v_dim: int


def dims_of(text: str) -> TransformerDims | None:
    """The transformer ``text`` names by its dimensions (``transformer:k=v,...`` or
    ``hf:config.json,...``); None for any other name. The one entry every reader of a
    workload name uses for both."""
    if text.strip().lower().startswith(PREFIX):
        return parse_hf(text)
    return parse_dims(text) if is_dims(text) else None


def parse_hf(text: str) -> TransformerDims:
    """The model ``hf:PATH,seq=N,...`` names; WorkloadError (one line) naming what is wrong."""
    path_text, *items = [p.strip() for p in text.strip()[len(PREFIX):].split(",")]
    options: dict[str, str] = {}
    for item in filter(None, items):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in _OPTIONS:
            raise WorkloadError(f"hf: {item!r}: give {', '.join(k + '=' for k in _OPTIONS)} "
                                f"after the config's path")
        options[key.strip()] = value.strip()
    if "seq" not in options:
        raise WorkloadError(f"hf:{path_text}: give the training sequence length, "
                            f"hf:{path_text},seq=N (max_position_embeddings is the longest "
                            f"the model accepts, not what it trains at)")
    where = f"hf config {path_text}"
    config = _read(Path(path_text), where)
    kind = config.get("model_type")
    known = (*_LLAMA_LIKE, *_GPT2, *_NEOX, *_DEEPSEEK)
    if kind not in known:
        raise WorkloadError(f"{where}: model_type {kind!r} is not read (known: "
                            f"{', '.join(known)})")
    seq = _whole(options["seq"], "seq", "hf option")
    window = _window(config, seq, where)
    batch = _whole(options.get("batch", "1"), "batch", "hf option")
    dropout = _number(options.get("dropout", "0"), "dropout")
    imbalance = _number(options.get("imbalance", "1"), "imbalance")
    fields = (_gpt2(config, where) if kind in _GPT2 else _neox(config, where) if kind in _NEOX
              else _deepseek(config, where) if kind in _DEEPSEEK
              else _llama(config, where, str(kind)))
    return TransformerDims(seq=seq, batch=batch, dropout=dropout, imbalance=imbalance,
                           name=text.strip(), window=window, **fields)


def _window(config: _Config, seq: int, where: str) -> int:
    """The sliding window every layer attends over (Mistral 7B v0.1's 4,096: each token sees
    the last 4,096), or 0 where attention spans the sequence: no window, one at least as
    long as ``seq``, or one switched off (Qwen2's ``use_sliding_window`` false). Layers that
    mix windowed and full attention are refused: the blocks are one shape."""
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    if not isinstance(window, int) or isinstance(window, bool) or not 0 < window < seq:
        return 0
    layers = config.get("num_hidden_layers")
    kinds = set(config.get("layer_types") or ())
    if kinds == {"full_attention"}:
        return 0
    if kinds and kinds != {"sliding_attention"}:
        raise WorkloadError(f"{where}: field 'layer_types' mixes {', '.join(sorted(kinds))}: "
                            f"layers of windowed and full attention are not modelled")
    full = config.get("max_window_layers") if config.get("use_sliding_window") else None
    if isinstance(full, int) and isinstance(layers, int) and full >= layers:
        return 0  # Qwen2: the first max_window_layers layers attend fully
    if isinstance(full, int) and full > 0:
        raise WorkloadError(f"{where}: field 'max_window_layers' {full}: the first {full} "
                            f"layers attend fully, the rest over a window of {window}: layers "
                            f"of windowed and full attention are not modelled")
    return window


def _read(path: Path, where: str) -> _Config:
    try:
        data = json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise WorkloadError(f"hf config {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"hf config {path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"hf config {path}: not a JSON object")
    return _Config(data, where)


def _field(config: _Config, key: str, where: str, default: Any = None) -> int:
    return _whole_field(config.get(key, default), key, where)


def _whole_field(value: Any, key: str, where: str) -> int:
    if value is None:
        raise WorkloadError(f"{where}: missing field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(f"{where}: field {key!r} must be a whole number, not {value!r}")
    return value


def _llama(config: _Config, where: str, kind: str = "llama") -> _Fields:
    heads = _field(config, "num_attention_heads", where)
    key = "hidden_activation" if "hidden_activation" in config else "hidden_act"
    act = config.get(key, "silu")
    gated = ("silu", "swiglu", *_GATED_ACTS.get(kind, ()))
    if act not in gated:
        raise WorkloadError(f"{where}: field {key!r} {act!r}: only {', '.join(gated)} (a gated "
                            f"MLP) is read for model_type {kind}")
    hidden = _field(config, "hidden_size", where)
    head_dim = config.get("head_dim")
    # attention wider (or narrower) than the model: Qwen3's 64 heads of 128 on 5,120
    width: _Fields = ({"head_size": _field(config, "head_dim", where)}
                      if head_dim is not None and head_dim * heads != hidden else {})
    for key, every in (("decoder_sparse_step", 1), ("mlp_only_layers", [])):
        if config.get(key, every) != every:
            raise WorkloadError(f"{where}: field {key!r} {config[key]!r}: only experts in "
                                f"every layer is read")
    moe: _Fields = {}
    experts = config.get("num_local_experts", config.get("num_experts"))
    if experts:
        moe = {"experts": _field(config, "num_local_experts" if "num_local_experts" in config
                                 else "num_experts", where),
               "top_k": _field(config, "num_experts_per_tok", where)}
        if "moe_intermediate_size" in config:
            moe["expert_ffn"] = _field(config, "moe_intermediate_size", where)
        if config.get("shared_expert_intermediate_size"):
            # Qwen2-MoE: one shared expert of its own width, read as that many expert widths
            expert_width = (moe.get("expert_ffn")
                            or _field(config, "intermediate_size", where))
            moe["shared"] = round(_field(config, "shared_expert_intermediate_size", where)
                                  / expert_width)
    return {"layers": _field(config, "num_hidden_layers", where),
            "hidden": hidden, "heads": heads,
            "kv_heads": _field(config, "num_key_value_heads", where, heads),
            "ffn": _field(config, "intermediate_size", where),
            "vocab": _field(config, "vocab_size", where), "mlp": "swiglu",
            "tied": bool(config.get("tie_word_embeddings", kind in _TIED_BY_DEFAULT)),
            "positions": "rope", **width, **moe}


def _deepseek(config: _Config, where: str) -> _Fields:
    """DeepSeek-V2/V3 (their configuration_deepseek.py's keys): multi-head latent attention
    and routed experts every ``moe_layer_freq`` layers after the first
    ``first_k_dense_replace`` dense ones (only every layer, 1, is read)."""
    if config.get("moe_layer_freq", 1) != 1:
        raise WorkloadError(f"{where}: field 'moe_layer_freq' {config['moe_layer_freq']!r}: "
                            f"only experts in every layer after the dense ones (1) is read")
    heads = _field(config, "num_attention_heads", where)
    kv_heads = config.get("num_key_value_heads", heads)
    if kv_heads != heads:
        raise WorkloadError(f"{where}: field 'num_key_value_heads' {kv_heads!r}: latent "
                            f"attention up-projects keys and values for all {heads} heads")
    fields: _Fields = {
              "layers": _field(config, "num_hidden_layers", where),
              "hidden": _field(config, "hidden_size", where), "heads": heads,
              "ffn": _field(config, "intermediate_size", where),
              "vocab": _field(config, "vocab_size", where), "mlp": "swiglu",
              "tied": bool(config.get("tie_word_embeddings", False)), "positions": "rope",
              # null in the Lite models: queries straight from the hidden state
              "q_rank": _whole_field(config.get("q_lora_rank") or 0, "q_lora_rank", where),
              "kv_rank": _field(config, "kv_lora_rank", where),
              "rope_dim": _field(config, "qk_rope_head_dim", where),
              "qk_dim": _field(config, "qk_nope_head_dim", where),
              "v_dim": _field(config, "v_head_dim", where)}
    experts = config.get("n_routed_experts")
    if experts:
        fields.update({"experts": _field(config, "n_routed_experts", where),
                   "top_k": _field(config, "num_experts_per_tok", where),
                   "shared": _field(config, "n_shared_experts", where, 0),
                   "expert_ffn": _field(config, "moe_intermediate_size", where),
                   "dense_layers": _field(config, "first_k_dense_replace", where, 0)})
    return fields


def _gpt2(config: _Config, where: str) -> _Fields:
    hidden = _field(config, "n_embd", where)
    return {"layers": _field(config, "n_layer", where), "hidden": hidden,
            "heads": _field(config, "n_head", where),
            "ffn": config.get("n_inner") or 4 * hidden,
            "vocab": _field(config, "vocab_size", where), "mlp": "gelu", "tied": True,
            "positions": "learned", "max_positions": _field(config, "n_positions", where)}


def _neox(config: _Config, where: str) -> _Fields:
    return {"layers": _field(config, "num_hidden_layers", where),
            "hidden": _field(config, "hidden_size", where),
            "heads": _field(config, "num_attention_heads", where),
            "ffn": _field(config, "intermediate_size", where),
            "vocab": _field(config, "vocab_size", where), "mlp": "gelu",
            "tied": bool(config.get("tie_word_embeddings", False)), "positions": "rope"}


def _whole(text: str, key: str, what: str) -> int:
    value = read_number(text)
    if value is None or value != int(value) or value < 1:
        raise WorkloadError(f"{what} {key}={text!r} must be a whole number >= 1")
    return int(value)


def _number(text: str, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise WorkloadError(f"hf option {key}={text!r} is not a number") from None
