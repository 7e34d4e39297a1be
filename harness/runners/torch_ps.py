"""PyTorch parameter servers over torch.distributed.rpc: synchronous and asynchronous.

K server processes each own a shard of the parameters (greedy by size, so K > 1 really
splits the bytes); W workers pull what changed, compute gradients on their shard of the
batch, and push them. Embedding gradients travel as the touched rows only and pulls carry
only rows changed since the worker's last pull: this is why a parameter server moves far
fewer bytes than an all-reduce on embedding-heavy models.

- synchronous: a server applies the mean of the W pushes of a step once all have arrived and
  answers every push after that, so all replicas stay equal to one device on the global
  batch (the parent checks the weights);
- asynchronous: every push is applied at once; the server reports the staleness it saw
  (how many updates of that shard happened between a worker's pull and its push).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.rpc as rpc

from harness.core.case import LEARNING_RATE, Case, ServerReport, ServerStats, WorkerReport
from harness.core.sharding import assign_shards
from harness.measure.stats import OVERLAP_ROUNDS
from harness.measure.stats import overlap as measured_overlap
from harness.measure.wire import WireMeter
from harness.runners import torch_workload as tw

Grad = tuple[str, torch.Tensor | None, torch.Tensor]  # (name, row indices or None, values)


class ShardServer:
    """One parameter shard: its tensors, the update rule, and per-worker dirty rows."""

    def __init__(self, params: dict[str, torch.Tensor], sparse: set[str], workers: int,
                 synchronous: bool):
        self.params = params
        self.sparse = sparse
        self.workers = workers
        self.synchronous = synchronous
        self.lock = threading.Lock()
        self.version = 0
        self.pending: list[tuple[int, list[Grad]]] = []
        self.waiting: list[torch.futures.Future[Any]] = []
        # rows changed since each worker last pulled (None: everything, at the start)
        self.dirty: list[dict[str, set[int] | None]] = [
            {n: None for n in params} for _ in range(workers)]
        self.pulled_version = [0] * workers
        self.staleness: list[int] = []
        # every pull after a worker's first (which takes everything): the updates it spans
        # (the pushes applied since that worker last pulled) and the table rows it carries
        self.pulled: set[int] = set()
        self.pull_spans: list[int] = []
        self.pull_rows: list[int] = []

    def _apply(self, grads: list[Grad], scale: float) -> None:
        touched: dict[str, set[int] | None] = {}
        for name, rows, values in grads:
            param = self.params[name]
            if rows is None:
                param.sub_(values, alpha=LEARNING_RATE * scale)
                touched[name] = None
            else:
                param.index_add_(0, rows, values, alpha=-LEARNING_RATE * scale)
                prev = touched.get(name, set())
                if prev is not None:
                    touched[name] = prev | set(rows.tolist())
        for dirty in self.dirty:
            for name, rows_set in touched.items():
                if rows_set is None or dirty[name] is None:
                    dirty[name] = None
                else:
                    dirty[name] |= rows_set  # type: ignore[operator]
        self.version += 1

    def pull(self, worker: int) -> tuple[int, list[Grad]]:
        with self.lock:
            if worker in self.pulled:
                self.pull_spans.append(self.version - self.pulled_version[worker])
                self.pull_rows.append(sum(len(rows) for name, rows in self.dirty[worker].items()
                                          if name in self.sparse and rows is not None))
            self.pulled.add(worker)
            out: list[Grad] = []
            for name, rows in self.dirty[worker].items():
                param = self.params[name]
                if rows is None:
                    out.append((name, None, param.clone()))
                elif rows:
                    idx = torch.tensor(sorted(rows), dtype=torch.long)
                    out.append((name, idx, param.index_select(0, idx)))
            self.dirty[worker] = {n: set() for n in self.params}
            self.pulled_version[worker] = self.version
            return self.version, out

    def push(self, worker: int, grads: list[Grad], probe: bool = False
             ) -> torch.futures.Future[Any]:
        """``probe``: the overlap probe's zero gradients; moved like any push, not counted
        in the staleness that training saw."""
        done: torch.futures.Future[Any] = torch.futures.Future()
        with self.lock:
            if not self.synchronous:
                if not probe:
                    self.staleness.append(self.version - self.pulled_version[worker])
                self._apply(grads, 1.0)
                done.set_result(self.version)
                return done
            self.pending.append((worker, grads))
            self.waiting.append(done)
            if len(self.pending) < self.workers:
                return done
            self._apply(_summed(self.pending), 1.0 / self.workers)
            waiting, self.pending, self.waiting = self.waiting, [], []
        for fut in waiting:
            fut.set_result(self.version)
        return done

    def stats(self) -> ServerStats:
        with self.lock:
            s = self.staleness
            return {"updates": self.version, "staleness_mean": float(np.mean(s)) if s else 0.0,
                    "staleness_max": int(max(s)) if s else 0,
                    "shard_bytes": sum(p.numel() * p.element_size()
                                       for p in self.params.values()),
                    "pull_span_mean": float(np.mean(self.pull_spans)) if self.pull_spans
                    else 0.0,
                    "pull_rows_mean": float(np.mean(self.pull_rows)) if self.pull_rows
                    else 0.0}


def _summed(pushes: list[tuple[int, list[Grad]]]) -> list[Grad]:
    """The W pushes of a synchronous round as one gradient per tensor, added in worker order
    whatever order they arrived in: one update per step, as one device (or DDP's all-reduce)
    makes. Applying each push as its own update rounded the weights W times a step, in
    arrival order, and on cnn:M those roundings grew past the 1e-4 check within 23 steps."""
    dense: dict[str, torch.Tensor] = {}
    rows: dict[str, list[torch.Tensor]] = {}
    values: dict[str, list[torch.Tensor]] = {}
    for _, grads in sorted(pushes, key=lambda push: push[0]):
        for name, idx, vals in grads:
            if idx is None:
                dense[name] = vals.clone() if name not in dense else dense[name].add_(vals)
            else:
                rows.setdefault(name, []).append(idx)
                values.setdefault(name, []).append(vals)
    return ([(name, None, g) for name, g in dense.items()]
            + [(name, torch.cat(rows[name]), torch.cat(values[name])) for name in rows])


_SERVER: ShardServer | None = None
_STOP = threading.Event()


def _server() -> ShardServer:
    assert _SERVER is not None, "parameter server not initialised"
    return _SERVER


def _rpc_pull(worker: int) -> tuple[int, list[Grad]]:
    return _server().pull(worker)


@rpc.functions.async_execution
def _rpc_push(worker: int, grads: list[Grad], probe: bool = False
              ) -> torch.futures.Future[Any]:
    return _server().push(worker, grads, probe)


def _rpc_stats() -> ServerStats:
    return _server().stats()


def _rpc_stop() -> None:
    _STOP.set()


def init_rpc(case: Case, name: str, rank: int, world: int, rendezvous: str = "") -> None:
    """TensorPipe over the hosts' sockets, meeting through the rendezvous file (with
    ``rendezvous`` appended: a second meeting beside a process group's)."""
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"file://{os.environ['STRATBENCH_RENDEZVOUS']}{rendezvous}",
        rpc_timeout=max(60.0, case.timeout_s),
        num_worker_threads=max(16, 4 * world),
        # Sockets only: TensorPipe's shared-memory and cross-memory-attach paths would move
        # tensors between processes of this machine without crossing the (emulated) network.
        _transports=["uv"],
        _channels=["basic"],
    )
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=options)


def _layout(case: Case) -> tuple[int, int]:
    shards = int(case.options.get("ps_shards", 1))
    return shards, case.replicas


def run_server(case: Case, index: int) -> ServerReport:
    global _SERVER
    shards, workers = _layout(case)
    spec = tw.spec(case)
    model = tw.build(spec, case.seed, sparse_embeddings=True)
    params = dict(model.named_parameters())
    owner = assign_shards({n: p.numel() for n, p in params.items()}, shards)
    mine = {n: p.detach().clone() for n, p in params.items() if owner[n] == index}
    _SERVER = ShardServer(mine, tw.sparse_parameter_names(model) & set(mine), workers,
                          synchronous=case.strategy == "parameter_server")
    init_rpc(case, f"ps{index}", index, shards + workers)
    rpc.shutdown()  # waits until every worker has shut down too
    # ps0 hosts the rendezvous store that the workers' shutdown still reads: stay until the
    # launcher, seeing every worker done, ends this process.
    time.sleep(max(60.0, case.timeout_s))
    return {"role": "ps", **_SERVER.stats()}


def _pull(servers: list[str], index: int, params: dict[str, torch.Tensor]) -> None:
    """What changed on every server since this worker's last pull, copied in."""
    pulls = [rpc.rpc_async(s, _rpc_pull, args=(index,)) for s in servers]
    with torch.no_grad():
        for fut in pulls:
            _, updates = fut.wait()
            for name, rows, values in updates:
                if rows is None:
                    params[name].copy_(values)
                else:
                    params[name].index_copy_(0, rows, values)


def _gradients(params: dict[str, torch.Tensor], owner: dict[str, int], shards: int
               ) -> tuple[list[list[Grad]], int]:
    """Each server's share of the gradients (embeddings as touched rows), and the bytes."""
    per_server: list[list[Grad]] = [[] for _ in range(shards)]
    sent = 0
    for name, p in params.items():
        if p.grad is None:
            continue
        g = p.grad
        if g.is_sparse:
            g = g.coalesce()
            rows, values = g.indices()[0], g.values()
            per_server[owner[name]].append((name, rows, values))
            sent += values.numel() * values.element_size() + rows.numel() * 8
        else:
            per_server[owner[name]].append((name, None, g))
            sent += g.numel() * g.element_size()
    return per_server, sent


def _push(servers: list[str], index: int, per_server: list[list[Grad]],
          probe: bool = False) -> None:
    acks = [rpc.rpc_async(s, _rpc_push, args=(index, per_server[k], probe))
            for k, s in enumerate(servers)]
    for fut in acks:
        fut.wait()



def measure_overlap(spec: tw.Workload, model: torch.nn.Module, batch: Any,
                    params: dict[str, torch.Tensor], owner: dict[str, int],
                    servers: list[str], index: int, step_s: float) -> dict[str, float]:
    """A round's compute alone (forward, backward, the gradients split per server) and its
    exchange alone (pull, then push of zero gradients of the same shapes and rows: the same
    bytes, weights unchanged), each the median of a few rounds every worker makes together;
    overlap as for DDP. A step here pulls, computes, then pushes: nothing should hide."""
    compute, moved = [], []
    for _ in range(OVERLAP_ROUNDS):
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        tw.loss(spec, model, batch).backward()
        per_server, _ = _gradients(params, owner, len(servers))
        compute.append(time.perf_counter() - start)
        zeros = [[(n, rows, torch.zeros_like(v)) for n, rows, v in grads]
                 for grads in per_server]
        start = time.perf_counter()
        _pull(servers, index, params)
        _push(servers, index, zeros, probe=True)
        moved.append(time.perf_counter() - start)
    return measured_overlap(compute, moved, step_s)


def run_worker(case: Case, index: int, workdir: Path) -> WorkerReport:
    shards, workers = _layout(case)
    spec = tw.spec(case)
    torch.manual_seed(case.seed)
    model = tw.build(spec, case.seed, sparse_embeddings=True)
    params = dict(model.named_parameters())
    owner = assign_shards({n: p.numel() for n, p in params.items()}, shards)
    init_rpc(case, f"worker{index}", shards + index, shards + workers)
    servers = [f"ps{k}" for k in range(shards)]
    times: list[float] = []
    losses: list[float] = []
    pushed: list[int] = []
    meter = WireMeter(active=index == 0)
    overlap: dict[str, float] = {}
    try:
        for step in range(case.total_steps):
            batch = tw.shard(tw.batch(spec, step, case.global_batch, case.seed), index, workers)
            tw.inject_fault(case, index, step)
            if step == case.warmup:
                meter.start()
            start = time.perf_counter()
            _pull(servers, index, params)
            model.zero_grad(set_to_none=True)
            loss = tw.loss(spec, model, batch)
            loss.backward()
            per_server, sent = _gradients(params, owner, shards)
            _push(servers, index, per_server)
            value = float(loss.detach())
            elapsed = time.perf_counter() - start
            if step >= case.warmup:
                times.append(elapsed)
                pushed.append(sent)
            losses.append(value)
        meter.stop()
        if times:
            overlap = measure_overlap(spec, model, batch, params, owner, servers, index,
                                      float(np.median(times)))
        # one last pull so the saved weights are the servers' weights
        _pull(servers, index, params)
        server_stats = [rpc.rpc_sync(s, _rpc_stats) for s in servers] if index == 0 else []
    finally:
        rpc.shutdown()
    report: WorkerReport = {"step_times_s": times, "losses": losses, "rank": index,
                            "world": workers, "threads": torch.get_num_threads(),
                            "bytes_pushed_per_step": float(np.median(pushed)) if pushed
                            else 0.0, "servers": server_stats, **meter.report(len(times)),
                            "details": {**overlap, **(
                                {"updates": "sparse rows"} if tw.sparse_updates(spec) else {})}}
    if index == 0:
        path = workdir / f"weights-{case.strategy}-0.npz"
        np.savez(path, **{n: p.detach().numpy().copy() for n, p in params.items()})
        report["weights"] = str(path)
    return report


def run(case: Case, role: str, index: int, workdir: Path
        ) -> WorkerReport | ServerReport:
    torch.set_num_threads(1)
    if role == "ps":
        return run_server(case, index)
    return run_worker(case, index, workdir)

