"""Embedding sharding (DLRM-style hybrid parallelism) over torch.distributed on gloo.

The dense layers are data-parallel (every rank a replica, their gradients all-reduced); the
embedding tables are sharded: each row lives on one rank. A step on each rank:
1. the distinct rows its samples look up are asked of their owners (all-to-all of ids);
2. the owners answer with the rows (all-to-all of rows); the rank pools them and runs the
   dense layers forward and backward on its share of the batch;
3. each row's gradient goes back to its owner (all-to-all), which updates the touched rows
   (sparse SGD), adding what every rank sent; the dense gradients are all-reduced.
So a step moves the looked-up rows twice and the small dense part once, never a whole
table: the exchange of a parameter server without its servers.

Tables go whole to a rank (table-wise) where there are at least as many tables as ranks
and their rows balance; else every table is cut row-wise, row r to rank r mod W
(interleaved: a Zipf law's popular rows, the low ids, spread over every rank instead of
piling on the first). The rule is ``core.sharding.plan_shards``, which the simulator reads
too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from harness.core.case import LEARNING_RATE, Case, WorkerReport
from harness.core.sharding import ShardPlan, plan_shards
from harness.measure.stats import OVERLAP_ROUNDS
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter
from harness.runners import torch_workload as tw
from workloads import torch_models as models
from workloads.configs import RecsysConfig
from workloads.data import Batch


def _all_to_all(send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                width: int) -> torch.Tensor:
    out = torch.empty((sum(recv_counts), width) if width else (sum(recv_counts),),
                      dtype=send.dtype)
    dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts)
    return out


class ShardedTables:
    """This rank's rows of every table, and the three all-to-alls of a step."""

    def __init__(self, full: list[torch.Tensor], plan: ShardPlan, rank: int) -> None:
        self.plan, self.rank, self.world = plan, rank, plan.world
        self.dim = int(full[0].shape[1])
        self.shards = []
        for t, weight in enumerate(full):
            if plan.owner[t] >= 0:
                shard = weight if plan.owner[t] == rank else weight[:0]
            else:
                shard = weight[rank::self.world]
            self.shards.append(shard.detach().clone())
        self.bytes_moved = 0

    def _requests(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor],
                                                    torch.Tensor, list[int]]:
        """Per table the distinct ids and where each lookup finds its row; the distinct ids
        of every table in one list sorted by owner (with their table), and the counts."""
        uniques, inverses, keys, owners = [], [], [], []
        for t in range(len(self.shards)):
            unique, inverse = torch.unique(ids[:, t, :], return_inverse=True)
            uniques.append(unique)
            inverses.append(inverse)
            keys.append(torch.stack([torch.full_like(unique, t), unique], dim=1))
            owners.append(self.plan.owners(t, unique))
        owner = torch.cat(owners)
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=self.world).tolist()
        self._order = order
        return uniques, inverses, torch.cat(keys)[order], counts

    def lookup(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """The pooled rows of this rank's samples, one (batch, dim) tensor per table, as
        leaves whose gradients `push` sends back."""
        uniques, inverses, keys, send_counts = self._requests(ids)
        counts = torch.tensor(send_counts, dtype=torch.long)
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts)
        self._send_counts, self._recv_counts = send_counts, recv.tolist()
        asked = _all_to_all(keys, send_counts, self._recv_counts, 2)  # (table, id) pairs
        self._asked = asked
        rows = torch.empty((len(asked), self.dim))
        for t, shard in enumerate(self.shards):
            mine = asked[:, 0] == t
            if mine.any():
                rows[mine] = shard[self.plan.local_index(t, asked[mine, 1])]
        answered = _all_to_all(rows, self._recv_counts, self._send_counts, self.dim)
        self.bytes_moved = keys.numel() * keys.element_size() + rows.numel() * 4
        received = torch.empty_like(answered)
        received[self._order] = answered
        self._leaves = []
        pooled, start = [], 0
        for unique, inverse in zip(uniques, inverses, strict=True):
            leaf = received[start:start + len(unique)].clone().requires_grad_()
            start += len(unique)
            self._leaves.append(leaf)
            pooled.append(leaf[inverse].sum(dim=1))  # sum pooling over the sample's ids
        return pooled

    def push(self, scale: float) -> None:
        """Send each looked-up row's gradient to its owner, which updates the touched rows
        of its shard by what every rank sent (``scale``: the learning rate over the ranks,
        as the mean over the global batch asks)."""
        grads = torch.cat([leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                           for leaf in self._leaves])[self._order]
        got = _all_to_all(grads, self._send_counts, self._recv_counts, self.dim)
        self.bytes_moved += grads.numel() * 4
        with torch.no_grad():
            for t, shard in enumerate(self.shards):
                mine = self._asked[:, 0] == t
                if mine.any():
                    rows = self.plan.local_index(t, self._asked[mine, 1])
                    shard.index_add_(0, rows, got[mine], alpha=-scale)

    def gathered(self) -> list[torch.Tensor] | None:
        """Every table whole on rank 0 (None elsewhere), for the weight check."""
        out = []
        for t, shard in enumerate(self.shards):
            rows = self.plan.table_rows[t]
            size = max(self.plan.local_rows(r, t) for r in range(self.world))
            padded = torch.zeros((size, self.dim))
            padded[:len(shard)] = shard
            parts = [torch.empty_like(padded) for _ in range(self.world)] if self.rank == 0 \
                else None
            dist.gather(padded, parts, dst=0)
            if parts is None:
                continue
            if self.plan.owner[t] >= 0:
                out.append(parts[self.plan.owner[t]][:rows].clone())
                continue
            whole = torch.empty((rows, self.dim))
            for r, part in enumerate(parts):
                whole[r::self.world] = part[:self.plan.local_rows(r, t)]
            out.append(whole)
        return out if self.rank == 0 else None


def _dense_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for name, p in model.named_parameters() if not name.startswith("tables.")]


def _all_reduce_dense(params: list[torch.nn.Parameter], world: int) -> int:
    """The dense gradients summed over the ranks, averaged; their bytes."""
    flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in params:
        if p.grad is not None:
            n = p.grad.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n
    return flat.numel() * flat.element_size()


def _step(spec: Any, model: Any, tables: ShardedTables, dense_params: list[Any],
          optimizer: torch.optim.Optimizer, batch: Batch, world: int) -> float:
    b = models.to_tensors(batch)
    optimizer.zero_grad(set_to_none=True)
    pooled = tables.lookup(b["ids"])
    loss = models.click_loss(model.head(b["dense"], pooled), b)
    loss.backward()
    tables.push(LEARNING_RATE / world)
    _all_reduce_dense(dense_params, world)
    optimizer.step()
    return float(loss.detach())


def measure_overlap(spec: Any, model: Any, tables: ShardedTables, dense_params: list[Any],
                    batch: Batch, world: int, step_s: float) -> dict[str, float]:
    """The step's compute alone (the dense layers forward and backward on rows already
    fetched) and its exchange alone (the lookup's two all-to-alls, the gradients' one with
    zeros, the dense all-reduce), each the median of a few rounds; overlap as for DDP. Weights
    stay as they are."""
    b = models.to_tensors(batch)
    compute, moved = [], []
    for _ in range(OVERLAP_ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        pooled = tables.lookup(b["ids"])
        model.zero_grad(set_to_none=True)
        moved_s = time.perf_counter() - start
        start = time.perf_counter()
        models.click_loss(model.head(b["dense"], pooled), b).backward()
        compute.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        tables.push(0.0)
        _all_reduce_dense(dense_params, world)
        moved.append(moved_s + time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return measured_overlap(compute, moved, step_s)


def run(case: Case, rank: int, workdir: Path) -> WorkerReport:
    spec = tw.spec(case)
    world = case.replicas
    config = getattr(spec, "config", None)
    assert isinstance(config, RecsysConfig), "plan admits the recsys family only"
    plan = plan_shards(tuple(config.table_rows), world)
    model = tw.build(spec, case.seed)
    tables = ShardedTables([t.weight for t in model.tables], plan, rank)
    model.tables = torch.nn.ModuleList()  # this rank keeps only its shards
    dense_params = _dense_parameters(model)
    optimizer = torch.optim.SGD(dense_params, lr=LEARNING_RATE)
    batches = [tw.shard(tw.batch(spec, step, case.global_batch, case.seed), rank, world)
               for step in range(case.total_steps)]
    moved: list[int] = []

    def timed(batch: Batch) -> tuple[float, float]:
        start = time.perf_counter()
        value = _step(spec, model, tables, dense_params, optimizer, batch, world)
        moved.append(tables.bytes_moved)
        return value, time.perf_counter() - start

    meter = WireMeter(active=rank == 0)
    times, losses, cpu = tw.timed_steps(case, rank, batches, timed, meter)
    moved = moved[case.warmup:]
    overlap = (measure_overlap(spec, model, tables, dense_params, batches[-1], world,
                               float(np.median(times))) if times else {})
    dense_bytes = sum(p.numel() * p.element_size() for p in dense_params)
    report: WorkerReport = {
        "step_times_s": times, "losses": losses, "rank": rank, "world": world,
        "threads": torch.get_num_threads(),
        "grad_bytes": dense_bytes + sum(rows * tables.dim * 4 for rows in plan.table_rows),
        "bytes_pushed_per_step": float(np.median(moved)) + dense_bytes if moved else 0.0,
        **meter.report(len(times)),
        "details": {**overlap, **cpu.report(len(times)), "updates": "sparse rows",
                    "sharding": plan.kind,
                    "rows_per_rank": [sum(plan.local_rows(r, t)
                                          for t in range(len(plan.table_rows)))
                                      for r in range(world)]}}
    whole = tables.gathered()
    if whole is not None:
        weights = {f"tables.{t}.weight": w.numpy() for t, w in enumerate(whole)}
        weights.update({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        path = workdir / f"weights-{case.strategy}-0.npz"
        np.savez(path, **weights)
        report["weights"] = str(path)
    dist.barrier()
    return report
