"""Parameter-server rounds as schedules: push gradients to K shards, pull parameters back.

A synchronous round (TF ParameterServerStrategy with a synchronous loop, the torch RPC
parameter server) is two steps: every worker sends shard k of its gradient to server k, which
adds them up (push); every server sends its shard of the new parameters back (pull). Servers
are dedicated (extra ranks W..W+K-1 that start empty) or colocated on workers (server k on
worker k*W/K, whose own shard never crosses the network). Central storage (TF
CentralStorageStrategy) is the K=1 colocated case: reduce to one device, broadcast back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.sim.schedules.schedule import Schedule, shard_chunks, step


def server_ranks(workers: int, shards: int, colocated: bool) -> np.ndarray:
    """Rank of the server of each shard."""
    if colocated:
        return np.arange(shards) * workers // shards
    return workers + np.arange(shards)


def ps_sync(workers: int, shards: int, colocated: bool = False,
            name: str = "parameter_server", weights: Sequence[float] | None = None,
            beside: Sequence[int] | None = None) -> Schedule:
    """One synchronous push/pull round; executed on numbers, every worker ends with the sum
    (the mean with op='mean') of all pushed gradients. ``weights``: the shards' relative
    sizes (equal when None); ``beside``: the workers the colocated servers sit beside, where
    a run placed them (which matters across racks), else spread evenly."""
    if not 1 <= shards <= (workers if colocated else shards):
        raise ValueError(f"{shards} colocated shards need at least as many workers ({workers})")
    if weights is not None and len(weights) != shards:
        raise ValueError(f"{len(weights)} shard weights for {shards} shards")
    world = workers if colocated else workers + shards
    if weights is None and not colocated:  # servers W..W+K-1 are images of server W
        ranks = np.arange(workers)
        push = step(ranks, workers, 0, reduce=True, fan=shards, fan_dst=1, fan_lo=1)
        pull = step(np.full(workers, workers), ranks, 0, reduce=False, fan=shards, fan_src=1,
                    fan_lo=1)
        return Schedule(name, "allreduce", world, shards, (push, pull), contributors=workers)
    sizes = np.ones(shards, np.int64) if weights is None else shard_chunks(weights)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    servers = server_ranks(workers, shards, colocated)
    if beside is not None:
        if not colocated or len(beside) != shards or len(set(beside)) != shards or not all(
                0 <= b < workers for b in beside):
            raise ValueError(f"servers beside workers {list(beside)}: need {shards} distinct "
                             f"workers of {workers} for colocated servers")
        servers = np.asarray(beside, dtype=np.int64)
    w = np.repeat(np.arange(workers), shards)
    k = np.tile(np.arange(shards), workers)
    keep = w != servers[k]
    push = step(w[keep], servers[k][keep], starts[k][keep], sizes[k][keep], reduce=True)
    pull = step(servers[k][keep], w[keep], starts[k][keep], sizes[k][keep], reduce=False)
    return Schedule(name, "allreduce", world, int(sizes.sum()),
                    tuple(s for s in (push, pull) if len(s)), contributors=workers)


def phases(schedule: Schedule) -> tuple[Schedule, Schedule]:
    """A synchronous round's push and pull as schedules of their own, to be timed with
    different sizes (a worker pulls every row any worker changed, not only its own). A
    round that moves nothing (one worker holding the only server: central storage on one
    device) is two empty phases."""
    if len(schedule.steps) not in (0, 2):
        raise ValueError(f"{schedule.name} is not a push and a pull")
    push, pull = (Schedule(f"{schedule.name}_{part}", "allreduce", schedule.world,
                           schedule.n_chunks, schedule.steps[i:i + 1], schedule.contributors)
                  for i, part in enumerate(("push", "pull")))
    return push, pull


def central_storage(workers: int) -> Schedule:
    """Reduce everything to device 0 and broadcast it back (K=1, colocated)."""
    return ps_sync(workers, 1, colocated=True, name="central_storage")
