"""torch tensor parallelism, child side: DTensor's Megatron-style split of each block.

T ranks (one per process, one per emulated host) each hold 1/T of every block's attention
(its heads) and MLP (its hidden units): the fused qkv projection and fc1 split by output
columns (ColwiseParallel), attn_out and fc2 by input rows (RowwiseParallel), whose outputs
are all-reduced: two all-reduces per block forward, two backward. The embeddings, the norms
and the tied head stay whole on every rank: they see the same all-reduced inputs, so their
gradients agree without any exchange.

The fused qkv weight is laid out [q | k | v], heads contiguous within each; a column split
of that would give rank 0 all of q's first columns and none of its k or v. So its output
rows are permuted first, [q_r | k_r | v_r] for each rank r in turn, and permuted back when
the weights are compared with one device's.
"""

from __future__ import annotations

import contextlib
import functools
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
from workloads.configs import TransformerConfig


def qkv_order(d: int, heads: int, ranks: int) -> np.ndarray:
    """Output-row order of the fused qkv projection that puts each rank's heads' q, k and v
    in its contiguous 1/T of the rows."""
    per_rank = d // ranks  # columns of q (and of k, of v) a rank's heads own
    return np.concatenate([np.arange(part * d + r * per_rank, part * d + (r + 1) * per_rank)
                           for r in range(ranks) for part in range(3)])


def _local_attention(block: nn.Module, local_heads: int, x: torch.Tensor) -> torch.Tensor:
    """The block's attention on this rank's heads (attn_out takes it as its shard)."""
    b, t, _ = x.shape
    qkv = block.attn_qkv(x)  # (b, t, 3 d / T), laid out [q_r | k_r | v_r]
    width = qkv.shape[-1] // 3
    q, k, v = (z.reshape(b, t, local_heads, width // local_heads).transpose(1, 2)
               for z in qkv.split(width, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(b, t, width)


class _Waits:
    seconds = 0.0


@contextlib.contextmanager
def _collective_time() -> Any:
    """Seconds this process spent in its all-reduces, torch.profiler's events: DTensor's are
    functional (issued, then waited for: the wait is where the rank idles); a plain
    c10d all-reduce (nested in the functional one when both appear) otherwise."""
    from torch.profiler import ProfilerActivity, profile

    waits = _Waits()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield waits
    spent = {e.key: e.cpu_time_total for e in prof.key_averages()}
    functional = (spent.get("_c10d_functional::all_reduce", 0.0)
                  + spent.get("_c10d_functional::wait_tensor", 0.0))
    waits.seconds = (functional or spent.get("c10d::allreduce_", 0.0)) / 1e6


def _parallelize(model: nn.Module, config: TransformerConfig, ranks: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (ranks,))
    order = torch.as_tensor(qkv_order(config.d_model, config.heads, ranks))
    for block in model.blocks:
        with torch.no_grad():
            block.attn_qkv.weight.copy_(block.attn_qkv.weight[order])
            block.attn_qkv.bias.copy_(block.attn_qkv.bias[order])
        parallelize_module(block, mesh, {"attn_qkv": ColwiseParallel(),
                                         "attn_out": RowwiseParallel(),
                                         "fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        # a plain function on the instance (not a submodule: it refers back to the block)
        object.__setattr__(block, "_attention",
                           functools.partial(_local_attention, block, block.heads // ranks))


def _full_weights(model: nn.Module, config: TransformerConfig, ranks: int
                  ) -> dict[str, np.ndarray]:
    """Every weight whole and in one device's layout (collectives: every rank calls this)."""
    from torch.distributed.tensor import DTensor

    inverse = np.argsort(qkv_order(config.d_model, config.heads, ranks))
    out: dict[str, np.ndarray] = {}
    for name, p in model.named_parameters():
        value = (p.full_tensor() if isinstance(p, DTensor) else p).detach().numpy().copy()
        if ".attn_qkv." in name:
            value = value[inverse]
        out[name] = value
    return out


def run(case: Case, index: int, workdir: Path) -> WorkerReport:
    ranks = case.replicas
    spec, config = tw.transformer(case)
    torch.manual_seed(case.seed)
    baseline = memory.current()
    model = tw.build(spec, case.seed)
    model_bytes = tw.grad_bytes(model)
    _parallelize(model, config, ranks)
    was_reset = memory.reset_peak()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    times, losses = [], []
    waiting = float("nan")
    meter = WireMeter(active=index == 0)
    for step in range(case.total_steps):
        batch = tw.batch(spec, step, case.global_batch, case.seed)  # every rank: all of it
        if step == case.warmup:
            meter.start()
        profiled = step == case.warmup - 1  # the last untimed step: where waits are counted
        with _collective_time() if profiled else contextlib.nullcontext() as waits:
            value, elapsed = tw.timed_step(spec, model, optimizer, batch)
        if profiled and waits is not None:
            waiting = min(1.0, waits.seconds / elapsed)
        if step >= case.warmup:
            times.append(elapsed)
        losses.append(value)
    meter.stop()
    report: WorkerReport = {
        **meter.report(len(times)),
        "step_times_s": times, "losses": losses, "rank": index, "world": ranks,
        "threads": torch.get_num_threads(), "grad_bytes": model_bytes,
        "model_memory_bytes": memory.peak_since(baseline, was_reset),
        # each block all-reduces its activations twice forward (attention and MLP outputs)
        # and twice back (their inputs' gradients): 4 per block, as the profiler counts
        "bytes_sent_per_step": 4 * config.layers * 2 * (ranks - 1) / ranks
        * 4.0 * case.global_batch * config.context * config.d_model,
        "bytes_sent_method": "algorithm: 4 activation all-reduces per block, "
                             "ring 2(n-1)/n x their bytes",
        "details": Layout(tensor=ranks).case_options(),
        # the rank's share of a step spent in the tensor all-reduces (its idle time: with
        # one stage, the only bubble there is); from the last warm-up step, profiled
        "bubble_fraction": waiting}
    weights = _full_weights(model, config, ranks)
    if index == 0:
        path = workdir / "weights-tensor_parallel-0.npz"
        np.savez(path, allow_pickle=False, **weights)
        report["weights"] = str(path)
    dist.barrier()
    return report
