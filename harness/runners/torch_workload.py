"""The torch runners' one door into `workloads/`: spec, model, data, loss.

Kept apart so every torch strategy builds and feeds its model the same way, and so
user workloads can plug in here without touching the strategies.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from harness.core.case import Case
from harness.measure.cpu import CpuMeter
from harness.measure.wire import WireMeter
from workloads import UserWorkload, WorkloadSpec, data, resolve_workload
from workloads import torch_models as models
from workloads.configs import RecsysConfig, TransformerConfig

shard = data.shard
shard_units = models.shard_units  # [] for a user's model: sharded at its root
Workload = WorkloadSpec | UserWorkload


def spec(case: Case) -> Workload:
    workload = resolve_workload(case.workload)
    assert isinstance(workload, WorkloadSpec | UserWorkload), "profiles are never run"
    return workload


def transformer(case: Case) -> tuple[Workload, TransformerConfig]:
    """The workload of a model-parallel case and its architecture (plan admits only the
    transformer family there)."""
    workload = spec(case)
    config = getattr(workload, "config", None)
    assert isinstance(config, TransformerConfig), "plan admits the transformer family only"
    return workload, config


def build(workload: Workload, seed: int, sparse_embeddings: bool = False) -> nn.Module:
    if isinstance(workload, UserWorkload):
        return models.check_model(workload.build_model(seed), workload.name)
    return models.build_model(workload, seed, sparse=sparse_embeddings)


def batch(workload: Workload, step: int, batch_size: int, seed: int) -> Any:
    if isinstance(workload, UserWorkload):
        return workload.make_batch(step, batch_size, seed)
    return data.batch(workload, step, batch_size, seed)


def loss(workload: Workload, model: nn.Module, batch: Any) -> torch.Tensor:
    if isinstance(workload, UserWorkload):
        return workload.loss_fn(model, batch)
    return models.loss(workload, model, batch)


def sparse_updates(workload: Workload) -> bool:
    """Whether one device trains it as recommender training does: embedding tables whose
    gradients are the touched rows (sparse tensors) and an optimizer that updates only those
    rows. A dense one would update every row of every table each step (recsys:L: 128M rows
    of which 0.4% were looked up) and is not what a user runs on one device."""
    return isinstance(getattr(workload, "config", None), RecsysConfig)


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


def timed_step(spec: Workload, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batch: Any) -> tuple[float, float]:
    """One training step: (its loss, its seconds), the same for every strategy that trains
    a whole model per process."""
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    value_t = loss(spec, model, batch)
    value_t.backward()
    optimizer.step()
    value = float(value_t.detach())
    return value, time.perf_counter() - start


def timed_steps(case: Case, rank: int, batches: list[Any],
                step: Callable[[Any], tuple[float, float]], meter: WireMeter
                ) -> tuple[list[float], list[float], CpuMeter]:
    """The loop every torch strategy times: the fault hooks, the wire and CPU meters from
    the first step after warm-up; (each timed step's seconds, every step's loss, the CPU
    meter). ``step`` runs one batch and returns (its loss, its seconds)."""
    times, losses = [], []
    cpu = CpuMeter()
    for index, batch in enumerate(batches):
        inject_fault(case, rank, index)
        if index == case.warmup:
            meter.start()
            cpu.start()
        value, elapsed = step(batch)
        if index >= case.warmup:
            times.append(elapsed)
        losses.append(value)
    meter.stop()
    cpu.stop()
    return times, losses, cpu
