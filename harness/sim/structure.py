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

from harness.sim.layered import Layer, LayeredModel
from workloads import costs
from workloads.configs import MLPConfig, TransformerConfig
from workloads.known import TRANSFORMERS, known_key
from workloads.spec import WorkloadError

E = costs.ACTIVATION_BYTES
TOKEN_ID_BYTES = 8  # int64 ids: what the first stage reads


def transformer(config: TransformerConfig, name: str, batch_size: int) -> LayeredModel:
    t, d, r, h, v = config.context, config.d_model, config.mlp_ratio, config.heads, config.vocab
    stream = float(t * d * E)  # the residual stream of one sequence
    embedding = Layer("embedding", params=(v + t) * d, flops_per_sample=0.0,
                      activation_bytes_per_sample=0.0, output_bytes_per_sample=stream,
                      input_bytes_per_sample=float(t * TOKEN_ID_BYTES), tp_allreduces=1)
    block_flops = costs.TRAIN_FLOPS_FACTOR * (2 * t * (4 + 2 * r) * d * d + 4 * t * t * d)
    block = Layer("block", params=(4 + 2 * r) * d * d + (9 + r) * d,
                  flops_per_sample=float(block_flops),
                  activation_bytes_per_sample=float(t * ((8 + 2 * r) * d + h * t) * E),
                  output_bytes_per_sample=stream, input_bytes_per_sample=stream,
                  tp_allreduces=2, tp_units=h,
                  replicated_activation_bytes_per_sample=float(t * 4 * d * E))
    head = Layer("head", params=2 * d,
                 flops_per_sample=float(costs.TRAIN_FLOPS_FACTOR * 2 * t * d * v),
                 activation_bytes_per_sample=float(t * (2 * d + v) * E),
                 output_bytes_per_sample=0.0, input_bytes_per_sample=stream,
                 replicated_activation_bytes_per_sample=float(t * 2 * d * E))
    blocks = tuple(Layer(f"block{i}", block.params, block.flops_per_sample,
                         block.activation_bytes_per_sample, block.output_bytes_per_sample,
                         block.input_bytes_per_sample, block.tp_allreduces, block.tp_units,
                         block.replicated_activation_bytes_per_sample)
                   for i in range(config.layers))
    # the head reuses the token embedding: a pipeline's last stage keeps a copy (Megatron-LM)
    return LayeredModel(name, (embedding,), blocks, (head,), batch_size,
                        tied_head_params=v * d)


def mlp(config: MLPConfig, name: str, batch_size: int) -> LayeredModel:
    widths = config.widths
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        last = i == len(widths) - 2
        layers.append(Layer(f"dense{i}", params=a * b + b,
                            flops_per_sample=float(costs.TRAIN_FLOPS_FACTOR * 2 * a * b),
                            activation_bytes_per_sample=float((a + (b if last else 0)) * E),
                            output_bytes_per_sample=float(b * E),
                            input_bytes_per_sample=float(a * E)))
    return LayeredModel(name, (), tuple(layers), (), batch_size)


def layered(text: str) -> LayeredModel:
    """The layers of the workload ``text`` names; WorkloadError (one line) for one that has
    no layer structure here."""
    key = known_key(text)
    if key in TRANSFORMERS:
        from workloads.known import get_known

        return transformer(TRANSFORMERS[key], key, get_known(key).batch_size)
    from workloads.resolve import resolve_workload

    workload = resolve_workload(text)
    config = getattr(workload, "config", None)
    batch = int(getattr(workload, "batch_size", 1))
    if isinstance(config, TransformerConfig):
        return transformer(config, text, batch)
    if isinstance(config, MLPConfig):
        return mlp(config, text, batch)
    raise WorkloadError(f"{text} has no layer structure here: pipeline and tensor parallelism "
                        f"take the transformer family (transformer:S|M|L), "
                        f"{', '.join(TRANSFORMERS)} or the mlp family")
