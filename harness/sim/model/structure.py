"""Models cut into layers: what pipeline and tensor parallelism need to know of a workload.

The adapter from workloads (architecture configs) to the simulator's layered records, as
``harness/calibrate/workload.py`` is for data parallelism. The per-layer figures follow the
same rules as ``workloads.costs`` (a multiply-accumulate is
2 FLOPs, training = 3 x forward, fp32 activations kept by the rule of
``costs.activation_elements``), so each model's layers add up exactly to its totals there;
a test checks it. Built from the architecture configs, never from a framework.

* transformer (the built-in family and the catalog's GPT-2 XL and GPT-3 175B): the token and
  position embeddings, one layer per block, then the final norm, the tied head and the loss.
  Tensor parallelism splits a block as Megatron-LM does (attention by heads, the MLP by its
  hidden units), with two all-reduces of the block's output forward and two backward; the
  embedding is split by vocabulary (one all-reduce forward).
* mlp: one layer per dense layer; tensor parallelism is not offered.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from harness.sim.model.layered import Layer, LayeredModel
from workloads import costs
from workloads.catalog import parse_workload
from workloads.configs import CNNConfig, MLPConfig, RecsysConfig, TransformerConfig
from workloads.dims import TransformerDims, from_config
from workloads.hf import dims_of
from workloads.known import DIMS_MODELS, TRANSFORMERS, known_key
from workloads.operators import cross_entropy, elementwise, gemm
from workloads.precision import FP32, Precision
from workloads.spec import WorkloadError

TOKEN_ID_BYTES = 8  # int64 ids: what the first stage reads


def transformer(config: TransformerConfig | TransformerDims, name: str, batch_size: int,
                precision: Precision = FP32) -> LayeredModel:
    """A decoder-only transformer (the built-in family's config or a model by its
    dimensions) in layers, its bytes at ``precision``."""
    dims = (config if isinstance(config, TransformerDims) else
            from_config(config.vocab, config.context, config.d_model, config.layers,
                        config.heads, config.mlp_ratio, name))
    E = precision.value_bytes
    t, d, v = dims.seq, dims.hidden, dims.vocab
    stream = float(t * d * E)  # the residual stream of one sequence
    embedding = Layer("embedding", params=dims.embedding_params, flops_per_sample=0.0,
                      activation_bytes_per_sample=0.0, output_bytes_per_sample=stream,
                      input_bytes_per_sample=float(t * TOKEN_ID_BYTES), tp_allreduces=1,
                      replicated_elementwise_bytes_per_sample=2.0 * stream,
                      ops=dims.pre_ops())
    block = _block(dims, E)
    head = Layer("head", params=dims.head_params,
                 flops_per_sample=costs.TRAIN_FLOPS_FACTOR * dims.head_forward_flops,
                 # the final norm's input and output in the training precision, the
                 # softmax over the vocabulary in fp32 (the loss computes in fp32:
                 # workloads.operators.cross_entropy)
                 activation_bytes_per_sample=float(t * 2 * d * E + t * v * FP32.value_bytes),
                 output_bytes_per_sample=0.0, input_bytes_per_sample=stream,
                 replicated_activation_bytes_per_sample=float(t * 2 * d * E),
                 elementwise_bytes_per_sample=float(2 * t * v * E),
                 replicated_elementwise_bytes_per_sample=2.0 * stream,
                 ops=dims.post_ops())
    # leading dense blocks first (DeepSeek-V3's), then the rest
    shapes = [_block(dims.dense_block(), E)] * dims.dense_layers + [block] * dims.routed_layers
    blocks = tuple(replace(shape, name=f"block{i}") for i, shape in enumerate(shapes))
    # a tied head reuses the token embedding: a pipeline's last stage keeps a copy (Megatron)
    return LayeredModel(name, (embedding,), blocks, (head,), batch_size,
                        bytes_per_element=E, tied_head_params=v * d if dims.tied else 0,
                        seq=t, experts=dims.experts)


def _block(dims: TransformerDims, E: int) -> Layer:
    """One block of ``dims`` as a layer, its bytes at ``E`` per value."""
    t = dims.seq
    stream = float(t * dims.hidden * E)
    return Layer("block", params=dims.block_params,
                 flops_per_sample=costs.TRAIN_FLOPS_FACTOR * dims.block_forward_flops,
                 activation_bytes_per_sample=dims.block_activations * E
                 + dims.block_mask_bytes,
                 output_bytes_per_sample=stream, input_bytes_per_sample=stream,
                 tp_allreduces=2, tp_units=dims.groups,
                 replicated_activation_bytes_per_sample=dims.block_replicated_activations * E
                 + dims.replicated_mask_bytes,
                 elementwise_bytes_per_sample=dims.block_elementwise * E,
                 replicated_elementwise_bytes_per_sample=dims.block_replicated_elementwise * E,
                 attention_flops_per_sample=dims.attention_forward_flops,
                 attention_elementwise_bytes_per_sample=dims.attention_elementwise * E,
                 attention_activation_bytes_per_sample=dims.attention_activations * E
                 + dims.attention_mask_bytes,
                 kv_bytes_per_sample=float(2 * t * dims.kv_width * E),
                 expert_params=dims.routed_expert_params,
                 routed_bytes_per_sample=float(t * dims.top_k * dims.hidden * E),
                 expert_load=dims.imbalance,
                 ops=dims.block_ops())


def mlp(config: MLPConfig, name: str, batch_size: int, precision: Precision = FP32
        ) -> LayeredModel:
    E = precision.value_bytes
    widths = config.widths
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        last = i == len(widths) - 2
        ops = (gemm(f"dense{i}", 1, b, a, bias=True),
               cross_entropy("loss", 1, b) if last else elementwise("relu", 2 * b))
        layers.append(Layer(f"dense{i}", params=a * b + b,
                            flops_per_sample=float(costs.TRAIN_FLOPS_FACTOR * 2 * a * b),
                            activation_bytes_per_sample=float((a + (b if last else 0)) * E),
                            output_bytes_per_sample=float(b * E),
                            input_bytes_per_sample=float(a * E), ops=ops))
    return LayeredModel(name, (), tuple(layers), (), batch_size, bytes_per_element=E)


def layered(text: str, precision: Precision = FP32) -> LayeredModel:
    """The layers of the workload ``text`` names, bytes at ``precision``; WorkloadError (one
    line) for one that has no layer structure here."""
    key = known_key(text)
    if key in TRANSFORMERS:
        from workloads.known import get_known

        return transformer(TRANSFORMERS[key], key, get_known(key).batch_size, precision)
    if key in DIMS_MODELS:
        return transformer(DIMS_MODELS[key], key, DIMS_MODELS[key].batch, precision)
    dims = dims_of(text)
    if dims is not None:
        return transformer(dims, text.strip(), dims.batch, precision)
    from workloads.resolve import resolve_workload

    workload = resolve_workload(text)
    config = getattr(workload, "config", None)
    batch = int(getattr(workload, "batch_size", 1))
    if isinstance(config, TransformerConfig):
        return transformer(config, text, batch, precision)
    if isinstance(config, MLPConfig):
        return mlp(config, text, batch, precision)
    raise WorkloadError(f"{text} has no layer structure here: pipeline and tensor parallelism "
                        f"take the transformer family (transformer:S|M|L), "
                        f"{', '.join([*TRANSFORMERS, *DIMS_MODELS])}, a transformer by its "
                        f"dimensions (transformer:layers=...,hidden=...) or the mlp family")


def fsdp_unit_params(text: str) -> int:
    """One FSDP unit's parameters for the workload ``text``: one of its blocks, as the
    runners here wrap them (``workloads.torch_models.shard_units``: each transformer block,
    each MLP layer) and torchtitan wraps each TransformerBlock. A built-in convnet or
    recommender, whose blocks (residual blocks; embedding tables) differ in size, is as
    many equal units as the runner wraps, its root (stem or dense layers, and head) one of
    them, so FSDP pays each unit's gather and reduce-scatter as often as the run does. 0
    where it has no blocks here (units are then DDP's bucket: ``Execution.fsdp_unit_bytes``)."""
    try:
        model = layered(text)
    except WorkloadError:
        return _wrapped_unit_params(text)
    return int(max((layer.params for layer in model.blocks), default=0))


def _wrapped_unit_params(text: str) -> int:
    try:
        spec = parse_workload(text)
    except WorkloadError:
        return 0
    if isinstance(spec.config, CNNConfig):
        units = len(spec.config.block_channels())
    elif isinstance(spec.config, RecsysConfig):
        units = len(spec.config.table_rows)
    else:
        return 0
    return math.ceil(spec.params / (units + 1))  # + the root
