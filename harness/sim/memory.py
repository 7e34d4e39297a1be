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

fp32 throughout, as the runners train: 4 bytes per parameter, gradient and optimizer slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import SpecError
from harness.sim.layered import Layer, LayeredModel, Layout, stage_layers
from harness.sim.pipeline import peak_in_flight, stage_order

BYTES_PER_PARAM = 4
#: optimizer state slots per parameter
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
#: Copies of the gradients a framework's strategy keeps: torch DDP also holds them in flat
#: buckets (``gradient_as_bucket_view=False``, the default). Measured: docs/SIMULATOR.md.
GRADIENT_COPIES = {("torch", "ddp"): 2}


@dataclass(frozen=True)
class Memory:
    """Bytes one device holds at its peak."""

    params: float
    grads: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations


def optimizer_slots(optimizer: str) -> int:
    if optimizer not in OPTIMIZER_SLOTS:
        raise SpecError(f"unknown optimizer {optimizer!r} (choose from "
                        f"{', '.join(OPTIMIZER_SLOTS)})")
    return OPTIMIZER_SLOTS[optimizer]


def data_parallel_memory(params: float, exchange: str, replicas: int, slots: int = 2,
                         activation_bytes: float = 0.0, gradient_copies: int = 1) -> Memory:
    """One data-parallel replica; ``exchange`` is the catalog's kind (sharded, ...)."""
    p = float(params) * BYTES_PER_PARAM
    if exchange == "sharded":
        share = p / max(1, replicas)
        return Memory(share, share, share * slots, activation_bytes)
    if exchange == "parameter_server":
        return Memory(p, p, 0.0, activation_bytes)
    return Memory(p, p * gradient_copies, p * slots, activation_bytes)


def model_parallel_memory(model: LayeredModel, layout: Layout, microbatch: int,
                          optimizer: str = "adam", recompute: bool = False) -> Memory:
    """The fullest device of the layout: the stage with the most bytes."""
    slots = optimizer_slots(optimizer)
    orders = stage_order(layout.schedule, layout.stages, layout.microbatches)
    worst: Memory | None = None
    for stage, layers in enumerate(stage_layers(model, layout.stages)):
        count = sum(layer.params for layer in layers)
        if stage == layout.stages - 1 and layout.stages > 1:
            count += model.tied_head_params  # the head's copy of the embedding
        params = count * BYTES_PER_PARAM / layout.tensor
        waiting = peak_in_flight(orders[stage]) * microbatch
        if recompute:
            kept = waiting * sum(layer.input_bytes_per_sample for layer in layers)
            kept += microbatch * max(_split(layer, layout.tensor) for layer in layers)
        else:
            kept = waiting * sum(_split(layer, layout.tensor) for layer in layers)
        memory = Memory(params, params, params * slots, kept)
        if worst is None or memory.total > worst.total:
            worst = memory
    assert worst is not None
    return worst


def _split(layer: Layer, tensor: int) -> float:
    """One sample's kept activations of ``layer`` on one of ``tensor`` ranks."""
    whole = layer.replicated_activation_bytes_per_sample
    return whole + (layer.activation_bytes_per_sample - whole) / tensor
