"""The torch runners' one door into `workloads/`: spec, model, data, loss.

Kept apart so every torch strategy builds and feeds its model the same way, and so
user workloads can plug in here without touching the strategies.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
from torch import nn

from harness.plan import Case
from workloads import data
from workloads import torch_models as models
from workloads.catalog import parse_workload
from workloads.spec import WorkloadSpec

batch = data.batch
shard = data.shard
shard_units = models.shard_units


def spec(case: Case) -> WorkloadSpec:
    return parse_workload(case.workload)


def build(workload: WorkloadSpec, seed: int, sparse_embeddings: bool = False) -> nn.Module:
    return models.build_model(workload, seed, sparse=sparse_embeddings)


def loss(workload: WorkloadSpec, model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    return models.loss(workload, model, batch)


def sparse_parameter_names(model: nn.Module) -> set[str]:
    """Parameters whose gradients arrive as sparse tensors (embedding rows touched)."""
    names = set()
    for path, module in model.named_modules():
        if isinstance(module, nn.Embedding | nn.EmbeddingBag) and module.sparse:
            names.add(f"{path}.weight" if path else "weight")
    return names


def grad_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def inject_fault(case: Case, rank: int, step: int) -> None:
    """Test hooks for the fault table: a worker killed (SIGKILL) or frozen (SIGSTOP)."""
    if rank != int(case.options.get("die_rank", -1)):
        return
    if step == case.options.get("die_at_step"):
        os.kill(os.getpid(), signal.SIGKILL)
    if step == case.options.get("hang_at_step"):
        os.kill(os.getpid(), signal.SIGSTOP)
