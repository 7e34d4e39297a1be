"""A model as a sequence of layers, and a model-parallel layout over it.

Data parallelism needs a model's totals (bytes, FLOPs); pipeline and tensor parallelism need
where they sit: a pipeline stage holds a contiguous run of layers and hands the last one's
output to the next stage; a tensor-parallel group splits each layer's matmuls and all-reduces
its output (Megatron-LM: two all-reduces per transformer block forward, two backward).

``harness/sim/model/structure.py`` derives these records from the built-in families and the known
models; the simulator reads only the numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.core.layout import (
    CONTEXT_COMM,
    GRAD_ACCUMULATION,
    GRAD_REDUCE,
    P2P,
    SHARDING,
    Layout,
    ends_lighter,
    runs,
    splits,
)
from harness.sim.schedules.pipeline import SCHEDULES
from workloads.operators import Op

RECOMPUTE = ("none", "selective", "full")


def recompute_mode(value: str | bool | None) -> str:
    """none | selective | full; a bare flag (True) means full, as ``--recompute`` always did."""
    if value is True:
        return "full"
    if value is None or value is False:
        return "none"
    if value not in RECOMPUTE:
        raise SpecError(f"unknown recompute {value!r} (choose from {', '.join(RECOMPUTE)})")
    return value


@dataclass(frozen=True)
class Layer:
    """One layer, per sample (one sequence for a language model)."""

    name: str
    params: int
    flops_per_sample: float  # training (forward + backward)
    activation_bytes_per_sample: float  # kept for the backward pass
    output_bytes_per_sample: float  # what it hands the next layer (crosses a stage boundary)
    input_bytes_per_sample: float = 0.0  # what recomputation keeps (the layer's input)
    tp_allreduces: int = 0  # all-reduces of the output per forward under tensor parallelism
    tp_units: int = 0  # what tensor parallelism splits (attention heads); 0: not split
    # the part of the kept activations every tensor-parallel rank holds whole (norms' I/O)
    replicated_activation_bytes_per_sample: float = 0.0
    # forward element-wise traffic (bytes read + written at memory bandwidth), split by
    # tensor parallelism, and the part every rank does whole without sequence parallelism
    elementwise_bytes_per_sample: float = 0.0
    replicated_elementwise_bytes_per_sample: float = 0.0
    # what selective recomputation re-runs (forward) and does not keep: the attention scores
    attention_flops_per_sample: float = 0.0
    # the keys and values of one sample (bytes): what context parallelism exchanges
    kv_bytes_per_sample: float = 0.0
    # a mixture of experts: the experts' parameters (expert parallelism shards them) and the
    # token rows one sample sends to its top-k experts (each all-to-all's bytes)
    expert_params: int = 0
    routed_bytes_per_sample: float = 0.0
    # the busiest expert's rows over the mean (a router's imbalance): its rank receives that
    # many times the balanced share in each all-to-all
    expert_load: float = 1.0
    attention_elementwise_bytes_per_sample: float = 0.0
    attention_activation_bytes_per_sample: float = 0.0
    # the layer's forward operators per sample (workloads.operators): what the device model
    # times; empty: timed from the figures above
    ops: tuple[Op, ...] = ()


@dataclass(frozen=True)
class LayeredModel:
    """``pre`` (embeddings) + ``blocks`` (the repeated layers stages divide) + ``post`` (the
    head and loss)."""

    name: str
    pre: tuple[Layer, ...]
    blocks: tuple[Layer, ...]
    post: tuple[Layer, ...]
    batch_size: int  # samples per step the model is usually trained with (per replica)
    bytes_per_element: int = 4
    # a weight the first and the last layer share (a tied embedding and head): with several
    # stages the last keeps a copy, and the two copies' gradients are summed every step
    tied_head_params: int = 0
    seq: int = 0  # tokens per sample (a language model's sequence; 0: not a sequence)
    experts: int = 0  # routed experts per MoE layer (0: dense)

    @property
    def layers(self) -> tuple[Layer, ...]:
        return (*self.pre, *self.blocks, *self.post)

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def flops_per_sample(self) -> float:
        return sum(layer.flops_per_sample for layer in self.layers)

    @property
    def activation_bytes_per_sample(self) -> float:
        return sum(layer.activation_bytes_per_sample for layer in self.layers)

    @property
    def heads(self) -> int:
        """The tensor-parallel degree must divide this (the smallest split unit)."""
        units = [layer.tp_units for layer in self.blocks if layer.tp_units]
        return math.gcd(*units) if units else 0


def check_layout(model: LayeredModel, layout: Layout, global_batch: int) -> None:
    """SpecError (one line) for a layout the model cannot take."""
    for name, value in (("data-parallel degree", layout.data), ("stages", layout.stages),
                        ("tensor-parallel degree", layout.tensor),
                        ("context-parallel degree", layout.context),
                        ("expert-parallel degree", layout.expert),
                        ("micro-batches", layout.microbatches)):
        if not isinstance(value, int) or value < 1:
            raise SpecError(f"{name} {value!r} must be an integer >= 1")
    if layout.schedule not in SCHEDULES:
        raise SpecError(f"unknown pipeline schedule {layout.schedule!r} (choose from "
                        f"{', '.join(SCHEDULES)})")
    if layout.p2p not in P2P:
        raise SpecError(f"unknown point-to-point mode {layout.p2p!r} (choose from "
                        f"{', '.join(P2P)})")
    if layout.grad_reduce not in GRAD_REDUCE:
        raise SpecError(f"unknown gradient reduction {layout.grad_reduce!r} (choose from "
                        f"{', '.join(GRAD_REDUCE)})")
    if layout.grad_accumulation not in GRAD_ACCUMULATION:
        raise SpecError(f"unknown gradient accumulation {layout.grad_accumulation!r} (choose "
                        f"from {', '.join(GRAD_ACCUMULATION)})")
    if layout.zero not in SHARDING:
        raise SpecError(f"zero={layout.zero} (choose from 0 replicated, 1 distributed "
                        f"optimizer, 3 fsdp)")
    if layout.ep_overlap and layout.expert > 1 and layout.stages > 1 and layout.virtual < 2:
        raise SpecError("the all-to-all overlap with pipeline stages needs virtual stages "
                        "(Megatron-Core's combined 1F1B runs the interleaved schedule)")
    if layout.virtual != 1 and layout.schedule != "interleaved":
        raise SpecError(f"{layout.virtual} virtual stages need the interleaved schedule")
    if layout.virtual < 1:
        raise SpecError(f"virtual stages {layout.virtual} must be >= 1")
    if layout.context > 1:
        if layout.context_comm not in CONTEXT_COMM:
            raise SpecError(f"unknown context-parallel exchange {layout.context_comm!r} "
                            f"(choose from {', '.join(CONTEXT_COMM)})")
        if not model.seq or not any(layer.kv_bytes_per_sample for layer in model.blocks):
            raise SpecError(f"{model.name} has no sequence with attention for context "
                            f"parallelism to split")
        if any(op.window for layer in model.blocks for op in layer.ops):
            raise SpecError(f"{model.name} attends over a sliding window: context "
                            f"parallelism over one is not modelled")
        if model.seq % (2 * layout.context):
            raise SpecError(f"context-parallel degree {layout.context}: the sequence of "
                            f"{model.seq} tokens must split into 2 x {layout.context} chunks "
                            f"(causal load balancing)")
    if layout.expert > 1:
        if not any(layer.expert_params for layer in model.blocks):
            raise SpecError(f"{model.name} has no experts for expert parallelism to shard")
        if layout.data % layout.expert:
            raise SpecError(f"expert-parallel degree {layout.expert} must divide the "
                            f"data-parallel degree {layout.data} (its ranks are data ranks)")
        if model.experts and model.experts % layout.expert:
            raise SpecError(f"expert-parallel degree {layout.expert} must divide the "
                            f"{model.experts} experts (each rank holds whole experts)")
    if layout.sequence_parallel and layout.tensor == 1:
        raise SpecError("sequence parallelism splits along the tensor-parallel group: give "
                        "a tensor-parallel degree above 1")
    blocks = len(model.blocks)
    chunks = layout.stages * layout.virtual
    what = (f"{layout.stages} stages" if layout.virtual == 1 else
            f"{layout.stages} stages x {layout.virtual} virtual stages")
    if layout.stage_blocks:
        given = layout.stage_blocks
        if not splits(given, blocks, chunks):
            raise SpecError(f"stage layers {runs(given)} must be {chunks} counts of at least "
                            f"1 ({what}) summing to the {blocks} layers of {model.name}")
    elif blocks % chunks:
        example = (f" (e.g. --stage-layers {runs(ends_lighter(blocks, chunks))}: fewer on "
                   f"the first and last, as Llama 3 405B was trained)"
                   if chunks <= blocks else "")
        raise SpecError(f"{what} do not divide the {blocks} layers of {model.name}: give "
                        f"the layers per stage{example}")
    if layout.schedule == "interleaved" and layout.microbatches % layout.stages:
        raise SpecError(f"the interleaved schedule needs micro-batches "
                        f"({layout.microbatches}) to be a multiple of the stages "
                        f"({layout.stages})")
    if layout.tensor > 1:
        heads = model.heads
        if not heads:
            raise SpecError(f"{model.name} has no layer tensor parallelism can split")
        if layout.tensor > heads or heads % layout.tensor:
            raise SpecError(f"tensor-parallel degree {layout.tensor} must divide the {heads} "
                            f"attention heads of {model.name}")
    per_pipeline, rest = divmod(global_batch, layout.data)
    if rest or per_pipeline < 1:
        raise SpecError(f"data-parallel degree {layout.data} does not divide the global "
                        f"batch of {global_batch}")
    if per_pipeline % layout.microbatches:
        raise SpecError(f"{layout.microbatches} micro-batches do not divide the batch of "
                        f"{per_pipeline} per pipeline")


def held_params(layer: Layer, expert: int) -> float:
    """A layer's parameters on one rank of ``expert``-way expert parallelism (before tensor
    parallelism and sharding): its routed experts 1/EP, the rest whole."""
    return layer.params - layer.expert_params + layer.expert_params / expert


def recomputed(model: LayeredModel, how: str) -> Callable[[Layer], str]:
    """What each layer recomputes under ``how``: full recomputation checkpoints the repeated
    blocks only (Megatron-LM's --checkpoint-activations / --recompute-granularity full,
    torchtitan's per-block activation checkpointing); the embedding and the head keep their
    activations and run once. Selective applies wherever attention is."""
    blocks = {id(layer) for layer in model.blocks}

    def of(layer: Layer) -> str:
        return "none" if how == "full" and id(layer) not in blocks else how

    return of


def stage_layers(model: LayeredModel, stages: int, counts: tuple[int, ...] = ()
                 ) -> list[tuple[Layer, ...]]:
    """Runs of blocks per stage, ``counts`` of them (equal runs where none are given);
    embeddings with the first, the head with the last. With V virtual stages per device,
    ``stages`` is devices x V and stage q runs on device q mod devices."""
    counts = counts or (len(model.blocks) // stages,) * stages
    edges = [0, *itertools.accumulate(counts)]
    out = [model.blocks[a:b] for a, b in itertools.pairwise(edges)]
    out[0] = (*model.pre, *out[0])
    out[-1] = (*out[-1], *model.post)
    return out

