"""The framework-neutral description of a workload: what runners, simulator and reports share.

A `WorkloadSpec` is a plain record (no TensorFlow, no torch): sizes, analytical costs and,
for built-in families, the architecture config that both framework builders follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads import costs
from workloads.configs import EmbeddingTables, ModelConfig, RecsysConfig

if TYPE_CHECKING:
    from workloads.operators import Op

FAMILIES = ("mlp", "cnn", "transformer", "recsys")
SIZES = ("S", "M", "L")
FRAMEWORKS = ("tf", "torch")
BYTES_PER_PARAM = 4  # gradients are exchanged as dense fp32
DEFAULT_BUCKET = 25 * 2**20  # DDP's default bucket_cap_mb

# Task kinds: what the batch holds and which loss applies.
CLASSIFICATION = "classification"  # x -> one of `classes`, softmax cross-entropy
LANGUAGE_MODEL = "language_model"  # tokens -> next token, mean cross-entropy over positions
CLICK = "click"  # dense + multi-hot ids -> click probability, binary cross-entropy


class WorkloadError(ValueError):
    """Bad workload input; the message is one line naming the bad value and the choices."""


def choices_message(kind: str, value: object, allowed: Sequence[str]) -> str:
    """The wording every 'unknown X' error uses (same as the CLI's)."""
    return f"unknown {kind} {value!r} (choose from {', '.join(allowed)})"


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload as everything outside the framework code sees it.

    `family`/`size` name a built-in (config set); user and profile workloads use
    family 'user' / 'profile', an empty size and their own `label`. `sparsity` is the
    expected fraction of gradient entries touched per step at `batch_size` (1.0 = dense).
    Known models (workloads.known) use family 'known', no size and no frameworks.
    """

    family: str
    size: str
    task: str
    batch_size: int  # default per-replica batch
    params: int
    flops_per_sample: float | None  # training FLOPs (forward + backward); None = unknown
    sparsity: float = 1.0
    config: ModelConfig | None = None
    frameworks: tuple[str, ...] = FRAMEWORKS
    label: str = ""
    step_time_s: float | None = None  # profile workloads may give compute time directly
    # Bytes one sample keeps for backward (no recomputation); None = unknown.
    activation_bytes_per_sample: float | None = None
    # the forward operators of one sample (workloads.operators), where known: what the
    # device model times; a built-in's come from its config
    ops: tuple[Op, ...] = ()
    # what a deployment may state beyond the model (the profile grammar's bytes, optimizer,
    # bucket): bytes per exchanged gradient element, the optimizer's time per step, DDP's
    # bucket or FSDP's unit
    bytes_per_element: int = BYTES_PER_PARAM
    optimizer_s: float = 0.0
    bucket_bytes: int = DEFAULT_BUCKET
    # embedding tables a known model states (a built-in recommender's are its config's)
    tables: EmbeddingTables | None = None
    # what the weights are updated with (a known model's cited setup; Adam otherwise)
    optimizer: str = "adam"

    @property
    def embedding_tables(self) -> EmbeddingTables | None:
        """The workload's embedding tables with sparse gradients, where it has any."""
        if self.tables is not None:
            return self.tables
        return self.config.tables if isinstance(self.config, RecsysConfig) else None

    @property
    def operators(self) -> tuple[Op, ...]:
        """This workload's operators: stated, or its architecture's."""
        if self.ops or self.config is None:
            return self.ops
        from workloads.operators import config_operators

        return config_operators(self.config)

    @property
    def name(self) -> str:
        return self.label or f"{self.family}:{self.size}"

    @property
    def grad_bytes(self) -> int:
        """Bytes of one dense fp32 gradient (what an all-reduce moves per step)."""
        return self.params * BYTES_PER_PARAM

    @property
    def touched_grad_bytes(self) -> float:
        """Bytes a sparse-aware exchange (parameter server) moves per step at `batch_size`."""
        return self.grad_bytes * self.sparsity

    def flops_per_step(self, batch_size: int | None = None) -> float | None:
        """Training FLOPs of one step of one replica."""
        if self.flops_per_sample is None:
            return None
        return self.flops_per_sample * (batch_size or self.batch_size)

    def expected_sparsity(self, batch_size: int | None = None) -> float:
        """Expected touched fraction for a batch of this size (1.0 for dense models)."""
        if self.config is None:
            return self.sparsity
        return costs.expected_touched_fraction(self.config, batch_size or self.batch_size)

    def sparsity_of(self, batch: Mapping[str, np.ndarray]) -> float:
        """The touched fraction of this actual batch (counts distinct looked-up rows)."""
        if self.config is None:
            return self.sparsity
        return costs.touched_fraction(self.config, batch)

    def as_profile(self) -> dict[str, Any]:
        """Keyword arguments for the simulator's WorkloadProfile (harness.sim.profile)."""
        return {"params": self.params, "batch_per_replica": self.batch_size,
                "bytes_per_element": BYTES_PER_PARAM, "flops_per_sample": self.flops_per_sample,
                "step_compute_s": self.step_time_s, "gradient_sparsity": self.sparsity,
                "name": self.family if self.size else self.name, "size": self.size}

    def summary(self) -> dict[str, Any]:
        """A flat JSON-able description (for `--json` and tables)."""
        return {"name": self.name, "family": self.family, "size": self.size, "task": self.task,
                "batch_size": self.batch_size, "params": self.params,
                "flops_per_sample": self.flops_per_sample, "grad_bytes": self.grad_bytes,
                "sparsity": self.sparsity, "frameworks": list(self.frameworks),
                "step_time_s": self.step_time_s,
                "activation_bytes_per_sample": self.activation_bytes_per_sample}
