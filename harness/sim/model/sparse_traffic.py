"""What a sparse model's exchange moves, from a built-in model's tables and the rule its
runner places them by: each torch parameter server's bytes, each embedding-sharding owner's
share of a request. Here in the simulator because the simulator's models of those runners
(step.data_parallel) read them, and the predictor sets them from here too."""

from __future__ import annotations

from harness.core.sharding import assign_shards, plan_shards
from workloads import WorkloadError
from workloads.catalog import get_spec
from workloads.configs import RecsysConfig
from workloads.costs import expected_unique_rows
from workloads.spec import BYTES_PER_PARAM


def _recsys(name: str) -> RecsysConfig | None:
    """The tables of the built-in model ``name`` ('family:size'), None for any other."""
    family, _, size = name.partition(":")
    try:
        config = get_spec(family, size).config
    except WorkloadError:
        return None
    return config if isinstance(config, RecsysConfig) else None


def torch_ps_traffic(name: str, batch: int, workers: int, shards: int
                     ) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """One worker's (push, pull) bytes per server and synchronous step as the torch parameter
    server moves them (runners/torch_ps.py), for a built-in model with embedding tables; None
    for others (dense tensors move as held: the shard sizes say it). Tensors sit where the
    runner's greedy rule puts them (recsys:L: table 0 and the widest dense layer on ps0, the
    rest on ps1), so servers carry what their tables' lookups touch, not what they hold.
    A table's push is its coalesced sparse gradient, whose storage keeps every lookup's row;
    torch RPC sends a tensor's whole storage unless a copy saves half of it, so the push is
    a row per lookup where the distinct rows are over half the lookups. A pull is every row
    the W workers' Zipf draws touched (their union), with an int64 index each."""
    config = _recsys(name)
    if config is None:
        return None
    weights = {w.name: w for w in config.weights()}
    owner = assign_shards({n: w.size for n, w in weights.items()}, shards)
    push, pull = [0.0] * shards, [0.0] * shards
    for n, w in weights.items():
        if not n.startswith("tables."):
            push[owner[n]] += BYTES_PER_PARAM * w.size
            pull[owner[n]] += BYTES_PER_PARAM * w.size
            continue
        row = BYTES_PER_PARAM * config.dim + 8
        lookups = batch * config.hotness
        distinct = expected_unique_rows(w.shape[0], config.zipf, lookups)
        push[owner[n]] += row * (lookups if lookups < 2 * distinct else distinct)
        pull[owner[n]] += row * expected_unique_rows(w.shape[0], config.zipf, lookups * workers)
    return tuple(push), tuple(pull)


def embedding_owner_shares(name: str, batch: int, workers: int) -> tuple[float, ...] | None:
    """Each rank's share of the rows one replica asks for under embedding sharding, for a
    built-in model with embedding tables (None for others): tables placed as the runner
    places them (``core.sharding.plan_shards``), each table's distinct rows of ``batch``
    samples' Zipf draws. recsys:L on 2 ranks is table-wise with its 1M-row table alone on
    rank 0 and the three smaller ones on rank 1, which serves about 3/4 of every request:
    the exchange waits for that rank's link, not an even split's."""
    config = _recsys(name)
    if config is None or workers < 1:
        return None
    plan = plan_shards(tuple(config.table_rows), workers)
    return plan.owner_shares([expected_unique_rows(rows, config.zipf, batch * config.hotness)
                              for rows in config.table_rows])
