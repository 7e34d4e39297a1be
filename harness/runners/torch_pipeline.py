"""torch pipeline parallelism, child side: torch.distributed.pipelining over gloo.

One process per stage. Every stage builds the same full model from the same seed and keeps
its run of blocks (the embeddings with the first stage; the final norm, the head and the
loss with the last), so together the stages start from the weights one device starts from.
The head reuses the token embedding (a tied weight): the last stage keeps a copy, and the
two copies' gradients are summed between the first and the last stage every step, as
Megatron-LM does, so they stay one weight.

Measured per step: the step time, and each stage's busy time (inside its forward and
backward passes and the loss); the bubble is the idle fraction. After the last step the
stages' weights are gathered on the first stage under the full model's names, so the parent
compares them with one device trained on the same global batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.core.case import LEARNING_RATE, Case, WorkerReport
from harness.core.layout import Layout
from harness.measure import memory
from harness.measure.wire import WireMeter
from harness.runners import torch_workload as tw


class StagePart(nn.Module):
    """Stage ``index`` of ``stages`` of a built-in Transformer (workloads/torch_models.py):
    its run of blocks, equal runs or ``counts`` per stage (uneven stages)."""

    def __init__(self, full: nn.Module, index: int, stages: int,
                 counts: tuple[int, ...] = ()) -> None:
        super().__init__()
        blocks = list(full.blocks)
        counts = counts or (len(blocks) // stages,) * stages
        start = sum(counts[:index])
        self.first, self.last = index == 0, index == stages - 1
        if self.first:
            self.tok_emb, self.pos_emb = full.tok_emb, full.pos_emb
        self.blocks = nn.ModuleList(blocks[start:start + counts[index]])
        if self.last:
            self.ln_f = full.ln_f
            weight = full.tok_emb.weight
            self.head = weight if self.first else nn.Parameter(weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(positions)[None]
        for block in self.blocks:
            x = block(x)
        if self.last:
            return self.ln_f(x) @ self.head.T
        return x


class _Busy:
    """Seconds spent computing, summed over the calls of the wrapped functions."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed


def run(case: Case, index: int, workdir: Path) -> WorkerReport:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    layout = (Layout.from_columns(dict(case.options), case.replicas)
              or Layout(stages=case.replicas))
    stages, microbatches = case.replicas, layout.microbatches
    spec, config = tw.transformer(case)
    torch.manual_seed(case.seed)
    baseline = memory.current()
    full = tw.build(spec, case.seed)
    names = {id(p): n for n, p in full.named_parameters()}
    model_bytes = tw.grad_bytes(full)
    part = StagePart(full, index, stages, layout.stage_blocks)
    del full
    was_reset = memory.reset_peak()
    micro = case.global_batch // microbatches
    example = (torch.zeros(micro, config.context, dtype=torch.long) if index == 0
               else torch.zeros(micro, config.context, config.d_model))
    stage = PipelineStage(part, index, stages, torch.device("cpu"), input_args=(example,))
    busy = _Busy()
    stage.forward_one_chunk = busy.wrap(stage.forward_one_chunk)
    stage.backward_one_chunk = busy.wrap(stage.backward_one_chunk)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    kind = Schedule1F1B if layout.schedule == "1f1b" else ScheduleGPipe
    schedule = kind(stage, microbatches, loss_fn=busy.wrap(loss_fn))
    optimizer = torch.optim.SGD(part.parameters(), lr=LEARNING_RATE)
    tied = dist.new_group([0, stages - 1]) if stages > 1 else None  # every rank must call it
    times, losses, bubbles = [], [], []
    meter = WireMeter(active=index == 0)
    for step in range(case.total_steps):
        batch = tw.batch(spec, step, case.global_batch, case.seed)
        if step == case.warmup:
            meter.start()
        busy.seconds = 0.0
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        step_losses: list[torch.Tensor] = []
        if part.first:
            schedule.step(torch.as_tensor(batch["x"]))
        elif part.last:
            schedule.step(target=torch.as_tensor(batch["y"]), losses=step_losses)
        else:
            schedule.step()
        if tied is not None and (part.first or part.last):
            weight = part.tok_emb.weight if part.first else part.head
            grad = weight.grad if weight.grad is not None else torch.zeros_like(weight)
            dist.all_reduce(grad, group=tied)
            weight.grad = grad
        optimizer.step()
        loss = torch.stack(step_losses).mean() if step_losses else torch.zeros(())
        dist.broadcast(loss, src=stages - 1)  # every stage reports the same loss
        elapsed = time.perf_counter() - start
        if step >= case.warmup:
            times.append(elapsed)
            bubbles.append(max(0.0, 1.0 - busy.seconds / elapsed))
        losses.append(float(loss))
    meter.stop()
    gained = memory.peak_since(baseline, was_reset)  # before the weights are gathered
    mine = {names[id(p)]: p.detach().numpy().copy() for p in part.parameters()
            if id(p) in names}  # the last stage's head copy is the embedding's twin
    gathered: list[Any] = [None] * stages if index == 0 else []
    dist.gather_object(mine, gathered if index == 0 else None, dst=0)
    report: WorkerReport = {
        **meter.report(len(times)),
        "step_times_s": times, "losses": losses, "rank": index, "world": stages,
        "threads": torch.get_num_threads(),
        "grad_bytes": model_bytes,
        # what this stage sends per step: activations forward, gradients back (4-byte floats)
        "bytes_sent_per_step": 4.0 * case.global_batch * config.context * config.d_model
        * ((not part.last) + (not part.first)),
        "model_memory_bytes": gained,
        # the layout under harness.core.layout's column names, as the simulator stores it
        "details": layout.case_options(),
        "bubble_fraction": float(np.median(bubbles)) if bubbles else float("nan")}
    if index == 0:
        weights = {k: v for part_weights in gathered for k, v in part_weights.items()}
        path = workdir / "weights-pipeline-0.npz"
        np.savez(path, **weights)
        report["weights"] = str(path)
    dist.barrier()
    return report
