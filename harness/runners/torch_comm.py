"""Collective micro-benchmarks on torch.distributed, child side (nccl-tests style).

Every rank runs the same sweep; each (operation, size) point is a barrier, warm-up, then
timed iterations until a time budget or an iteration cap; the slowest rank's time counts,
as in nccl-tests (a collective is done when every rank is done).

The whole sweep runs COMM_ROUNDS times (`--rounds`) and a point's time is the median of its
rounds. On a shared machine slow spells last longer than one point's budget (a single pass
put a 4x outlier in one of three identical 2-rank sweeps); interleaving spreads each point
over the sweep's duration, so one bad spell costs one round, not the point.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from harness.core.case import COMM_ROUNDS, Case, CommPoint, WorkerReport
from harness.core.strategies import library
from harness.measure.stats import summarize_rounds

OPS = library("torch").sweep_ops
RPC_OPS = library("torch").named_ops  # torch RPC: each rank's buffer to the next at once
BUDGET_S = 0.05  # per point and round
MIN_ITERS, MAX_ITERS = 1, 25


def _op(name: str, nbytes: int, rank: int, world: int) -> Any:
    """A closure running one `name` on an `nbytes` buffer (per rank, as nccl-tests sizes)."""
    elems = max(world, nbytes // 4) // world * world  # divisible for reduce_scatter
    buf = torch.ones(elems, dtype=torch.float32)
    if name == "all_reduce":
        return lambda: dist.all_reduce(buf)
    if name == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    if name == "reduce_scatter":
        out = torch.empty(elems // world)
        return lambda: dist.reduce_scatter_tensor(out, buf)
    if name == "all_gather":
        part = torch.ones(elems // world)
        return lambda: dist.all_gather_into_tensor(buf, part)
    if name == "all_to_all":  # buf / world to every rank (embedding sharding's exchange)
        received = torch.empty(elems)
        return lambda: dist.all_to_all_single(received, buf)
    if name in ("ps_push", "ps_pull"):  # rank 0 is the server; the others are workers
        push = name == "ps_push"

        def exchange() -> None:
            if rank == 0:
                reqs = [(dist.irecv if push else dist.isend)(buf, peer)
                        for peer in range(1, world)]
                for req in reqs:
                    req.wait()
            else:
                (dist.send if push else dist.recv)(buf, 0)
        return exchange
    if name == "rpc":  # a push's shape: the tensor goes, nothing but an ack comes back
        peer = f"comm{(rank + 1) % world}"
        return lambda: rpc.rpc_sync(peer, _received, args=(buf,))
    raise ValueError(f"unknown collective {name!r}")


def _received(tensor: torch.Tensor) -> None:
    """An RPC's target: the tensor has arrived; the caller waits for this answer."""


def _agreed_max(*values: float) -> list[float]:
    local = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(local, op=dist.ReduceOp.MAX)
    return [float(v) for v in local]


def _iterations(fn: Any) -> int:
    """Warm the point up (connections, buffers) and size its rounds from that one call.
    Every rank must run the same number of iterations, so the count is agreed, not local."""
    dist.barrier()
    start = time.perf_counter()
    fn()
    (warm,) = _agreed_max(time.perf_counter() - start)
    return int(min(MAX_ITERS, max(MIN_ITERS, BUDGET_S // max(warm, 1e-9))))


def _round(fn: Any, iters: int) -> tuple[float, float]:
    """One round of one point: the slowest rank's median and lower quartile over its
    iterations."""
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    median, quartile = _agreed_max(*np.percentile(times, [50, 25]))
    return median, quartile


def run(case: Case, rank: int) -> WorkerReport:
    world = case.replicas
    grid = [(name, int(nbytes)) for name in case.options.get("ops", OPS)
            for nbytes in case.options["sizes"]]
    rounds: dict[tuple[str, int], list[tuple[float, float]]] = {key: [] for key in grid}
    iters: dict[tuple[str, int], int] = {}
    uses_rpc = any(name in RPC_OPS for name, _ in grid)
    if uses_rpc:
        from harness.runners.torch_ps import init_rpc

        init_rpc(case, f"comm{rank}", rank, world, rendezvous=".rpc")
    try:
        for _ in range(int(case.options.get("rounds", COMM_ROUNDS))):
            for key in grid:  # buffers live for one point only: sweeps can be large
                fn = _op(*key, rank, world)
                if key not in iters:
                    iters[key] = _iterations(fn)
                rounds[key].append(_round(fn, iters[key]))
    finally:
        if uses_rpc:
            rpc.shutdown()  # waits for every rank's calls
    points: list[CommPoint] = [{"op": name, "bytes": nbytes, "world": world,
               **summarize_rounds([m for m, _ in got], [q for _, q in got])}
              for (name, nbytes), got in rounds.items()]
    return {"step_times_s": [], "losses": [], "rank": rank, "points": points}
