"""Memory per device, per strategy: parameters, gradients, optimizer state, activations.

"Fits" must mean what it says, so every part is counted where it lives:

* data parallelism: every replica holds the whole model state; FSDP shards parameters,
  gradients and optimizer state W ways; a parameter-server worker holds a working copy of
  the parameters and its gradients (the servers hold the optimizer state);
* pipeline parallelism: a stage holds its layers' state and the activations of the
  micro-batches between their forward and backward (M under GPipe, S - s under 1F1B);
* tensor parallelism: each layer's weights and most activations split T ways; the norms'
  inputs and outputs stay whole on every rank (Korthikanti et al. 2022, arXiv:2205.05198,
  section 4.1: without sequence parallelism, 4 of a block's per-token d-sized activations
  are replicated);
* full recomputation keeps only each layer's input per waiting micro-batch, plus one
  layer's activations while its backward runs (and costs one more forward).

Bytes per parameter, gradient and optimizer slot follow the precision
(``workloads/precision.py``): fp32 as the runners train, or mixed bf16/fp16 with an fp32
master copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.core.strategies import exchange_kind
from harness.sim.model.layered import (
    Layer,
    LayeredModel,
    Layout,
    held_params,
    recompute_mode,
    recomputed,
    stage_layers,
)
from harness.sim.schedules.pipeline import in_flight_per_chunk
from workloads.optimizers import OPTIMIZER_SLOTS
from workloads.precision import FP32, Precision
from workloads.spec import WorkloadSpec

#: Copies of the gradients a framework's strategy keeps: torch DDP also holds them in flat
#: buckets (``gradient_as_bucket_view=False``, the default). Measured: docs/SIMULATOR.md.
GRADIENT_COPIES = {("torch", "ddp"): 2}


@dataclass(frozen=True)
class Memory:
    """Bytes one device holds at its peak."""

    params: float
    grads: float
    optimizer: float
    activations: float  # kept for backward (Korthikanti et al.'s count)
    # under full recomputation, one layer's activations rebuilt while its backward runs:
    # transient, but held at the peak
    recompute_working: float = 0.0

    @property
    def total(self) -> float:
        return (self.params + self.grads + self.optimizer + self.activations
                + self.recompute_working)


def layout_state_bytes(precision: Precision, slots: int, zero: int,
                       grad_accumulation: str = "fused") -> tuple[int, int, int]:
    """Bytes per parameter of (weights, gradients, what the distributed optimizer shards) as
    the stacks that run such layouts keep them.

    * Megatron-LM (replicated or distributed optimizer): half-precision weights, and an fp32
      main gradient and master copy beside the optimizer's fp32 moments. fp16 also keeps its
      fp16 gradient: 20 bytes with Adam, 4 + 16/d with the distributed optimizer; bf16
      accumulates into the fp32 gradient directly: 18 bytes, 6 + 12/d; fp32: 16, 8 + 8/d
      (NVIDIA/Megatron-LM docs/distrib_optimizer.md, later docs/api-guide/dist_optimizer.md:
      bytes per parameter).
    * FSDP (torch's, torchtitan's mixed precision): fp32 weights and gradients sharded with
      the optimizer state, the half-precision copies only while a unit computes: 4 + 4 + 4
      per slot, all of it sharded.
    * Apex's DistributedFusedAdam as NeMo runs it (``grad_accumulation`` half:
      ``grad_sync_dtype`` bf16 with ``contiguous_grad_buffer``): the whole gradient buffer in
      the training precision, the fp32 master shard and the moments sharded: 4 + 12/d with
      Adam (NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py: ``StateBucket``
      keeps params_shard, exp_avg_shard and exp_avg_sq_shard in the optimizer's fp32 dtype,
      ``_init_grad_buffer`` the buffer in ``grad_sync_dtype``).
    """
    if zero == 3:
        return 4, 4, 4 * slots
    if grad_accumulation == "half" and precision.master_bytes:
        return precision.value_bytes, precision.value_bytes, 4 + 4 * slots
    if precision.name in ("fp16", "fp8"):
        return 2, 2, 4 + 4 + 4 * slots
    if precision.name == "bf16":
        return 2, 4, 4 + 4 * slots
    return 4, 4, 4 * slots


def optimizer_slots(optimizer: str) -> int:
    if optimizer not in OPTIMIZER_SLOTS:
        raise SpecError(f"unknown optimizer {optimizer!r} (choose from "
                        f"{', '.join(OPTIMIZER_SLOTS)})")
    return OPTIMIZER_SLOTS[optimizer]


def data_parallel_memory(params: float, exchange: str, replicas: int, slots: int = 2,
                         activation_bytes: float = 0.0, gradient_copies: int = 1,
                         precision: Precision = FP32, dense_fraction: float = 1.0,
                         table_gradient_bytes: float | None = None) -> Memory:
    """One data-parallel replica; ``exchange`` is the catalog's kind (sharded, ...);
    ``dense_fraction``: the parameters outside embedding tables (embedding sharding keeps
    1/replicas of the tables on each device, every dense layer whole).

    ``table_gradient_bytes``: where the tables' gradients are sparse (torch's
    ``sparse=True`` embeddings, TensorFlow's IndexedSlices), the bytes of the rows a step's
    lookups produce, which replace a dense gradient of the tables; DDP's buckets copy only
    the dense gradients. FSDP keeps the tables' gradients dense (it flattens parameters into
    dense shards), so its count is unchanged."""
    weight_b, grad_b, state_b = precision.model_state_bytes(slots)
    w, g, o = (float(params) * b for b in (weight_b, grad_b, state_b))
    if exchange == "sharded":
        n = max(1, replicas)
        return Memory(w / n, g / n, o / n, activation_bytes)
    tables = 1.0 - dense_fraction
    if exchange == "embedding":
        share = dense_fraction + tables / max(1, replicas)
        grads = (g * share if table_gradient_bytes is None
                 else g * dense_fraction + table_gradient_bytes)
        return Memory(w * share, grads, o * share, activation_bytes)
    copies = 1 if exchange == "parameter_server" else gradient_copies
    grads = (g * copies if table_gradient_bytes is None
             else g * dense_fraction * copies + table_gradient_bytes)
    return Memory(w, grads, 0.0 if exchange == "parameter_server" else o, activation_bytes)


def replica_memory(profile: WorkloadSpec, framework: str, strategy: str, replicas: int,
                   slots: int) -> Memory:
    """One replica of ``framework``'s ``strategy`` (a simulator name under "sim") among
    ``replicas``, holding ``profile``'s batch per replica of its activations per sample:
    what a strategy's exchange leaves on each device (``data_parallel_memory``)."""
    return data_parallel_memory(
        profile.params, exchange_kind(framework, strategy), replicas, slots,
        (profile.activation_bytes_per_sample or 0.0) * profile.batch_size,
        GRADIENT_COPIES.get((framework, strategy), 1), dense_fraction=profile.dense_fraction,
        table_gradient_bytes=profile.table_gradient_bytes)


def checkpointed_activation_bytes(model: LayeredModel, fused_attention: bool = False
                                  ) -> float:
    """Bytes one sample keeps with every layer checkpointed (torch's activation checkpointing
    as FSDP and torchtitan wrap it): each layer's input, plus the whole activations of the one
    layer whose backward runs."""
    return (sum(layer.input_bytes_per_sample for layer in model.layers)
            + max(_split(layer, 1, fused_attention=fused_attention) for layer in model.layers))


def replica_activation_bytes(model: LayeredModel, fused_attention: bool = False) -> float:
    """Bytes one sample keeps for backward in a whole replica (no split, no recomputation):
    the count a model-parallel layout's devices add up to, so data- and model-parallel
    candidates are judged by one memory model."""
    return sum(_split(layer, 1, fused_attention=fused_attention) for layer in model.layers)


def kept_activations(workload: str, stated: float | None, precision: Precision,
                     fused_attention: bool, checkpointed: bool = False) -> float | None:
    """Bytes one sample of a whole data-parallel replica of ``workload`` keeps for backward
    on a device training at ``precision``. Where the workload has layers here, their count
    (``replica_activation_bytes``; ``checkpointed``: every layer checkpointed): activations
    at the precision's width, a fused attention (torch's SDPA, FlashAttention) keeping no
    T x T scores. Else the ``stated`` count, which ``workloads.costs`` keeps in fp32, at the
    precision's width; None where neither is known, or, ``checkpointed``, where it has no
    layers to checkpoint."""
    from harness.sim.model.structure import layered
    from workloads import WorkloadError
    from workloads.costs import ACTIVATION_BYTES

    try:
        model = layered(workload, precision)
    except WorkloadError:
        if checkpointed or stated is None:
            return None
        return stated * precision.value_bytes / ACTIVATION_BYTES
    return (checkpointed_activation_bytes(model, fused_attention) if checkpointed
            else replica_activation_bytes(model, fused_attention))


def model_parallel_memory(model: LayeredModel, layout: Layout, microbatch: int,
                          optimizer: str = "adam", recompute: str | bool = False,
                          precision: Precision = FP32, fused_attention: bool = False
                          ) -> Memory:
    """The fullest device of the layout: the device with the most bytes. Model state as the
    stacks that run such layouts keep it (``layout_state_bytes``: Megatron-LM's 20 / 18
    bytes, FSDP's fp32 shards); the distributed optimizer shards the optimizer state (master
    copy and fp32 gradient included where Megatron shards them) over the data-parallel axis,
    FSDP everything.
    Activations: the micro-batches waiting for their backward (the schedule's peak in
    flight; a chunk of an interleaved device holds 1/V of its layers), each keeping what
    ``recompute`` leaves: everything (none), all but the attention scores (selective), or
    each layer's input plus one layer's whole activations while its backward runs (full).
    Sequence parallelism splits the norms' activations too, context parallelism every
    activation (each rank holds 1/C of the sequence). A fused attention kernel
    (FlashAttention, torch's SDPA) keeps no T x T scores, as selective recomputation."""
    how = recompute_mode(recompute)
    again = recomputed(model, how)
    slots = optimizer_slots(optimizer)
    weight_b, grad_b, state_b = layout_state_bytes(precision, slots, layout.zero,
                                                    layout.grad_accumulation)
    P, V, T, D = layout.stages, layout.virtual, layout.tensor, layout.data
    C = layout.context  # a rank keeps 1/C of the sequence; state shards over data x context
    in_flight = in_flight_per_chunk(layout.schedule, P, layout.microbatches, V)
    chunks = stage_layers(model, P * V, layout.stage_blocks)
    worst: Memory | None = None
    for device in range(P):
        mine = [chunks[q] for q in range(device, P * V, P)]
        count = sum(held_params(layer, layout.expert) for layers in mine
                    for layer in layers)
        if device == P - 1 and P > 1:
            count += model.tied_head_params  # the head's copy of the embedding
        per_rank = count / T
        shard = D * C if layout.zero == 3 else 1
        state_shard = D * C if layout.zero else 1
        params = per_rank * weight_b / shard
        grads = per_rank * grad_b / shard
        state = per_rank * state_b / state_shard
        held = in_flight[device]
        kept = working = 0.0
        # a checkpointed layer's input: split along the sequence under sequence parallelism
        inputs = T if layout.sequence_parallel else 1
        for c, layers in enumerate(mine):
            waiting = held[c] * microbatch
            for layer in layers:
                if again(layer) == "full":  # a checkpointed block keeps its input
                    kept += waiting * layer.input_bytes_per_sample / inputs
                else:
                    kept += waiting * _split(layer, T, layout.sequence_parallel, again(layer),
                                             fused_attention)
        if how == "full":
            working = microbatch * max(_split(layer, T, layout.sequence_parallel, "none",
                                              fused_attention)
                                       for layers in mine for layer in layers)
        memory = Memory(params, grads, state, kept / C, working / C)
        if worst is None or memory.total > worst.total:
            worst = memory
    assert worst is not None
    return worst


def _split(layer: Layer, tensor: int, sequence_parallel: bool = False,
           recompute: str = "none", fused_attention: bool = False) -> float:
    """One sample's kept activations of ``layer`` on one of ``tensor`` ranks."""
    total = layer.activation_bytes_per_sample
    if recompute == "selective" or fused_attention:
        total -= layer.attention_activation_bytes_per_sample
    whole = layer.replicated_activation_bytes_per_sample
    return (whole / (tensor if sequence_parallel else 1)) + (total - whole) / tensor
