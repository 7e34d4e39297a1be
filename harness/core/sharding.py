"""Where a sharded model's pieces live: the rules the runners place tensors and rows by, here
in the core so that the simulator's traffic follows the same placement the runs used.

Plain Python over sizes: the methods that take ids only do arithmetic on them, so an integer
tensor or array will do, and nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

Key = TypeVar("Key", bound=Hashable)

# Embedding sharding keeps tables whole (table-wise) while the largest rank's rows stay within
# this factor of the mean; past it every table is cut row-wise.
TABLE_WISE_IMBALANCE = 1.25


def assign_shards(sizes: Mapping[Key, int], shards: int) -> dict[Key, int]:
    """The torch parameter server's placement (runners/torch_ps.py), and embedding
    sharding's table-wise one: largest first onto the least-loaded shard (ties by key)."""
    load = [0] * shards
    owner = {}
    for name, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        k = load.index(min(load))
        owner[name] = k
        load[k] += size
    return owner


@dataclass(frozen=True)
class ShardPlan:
    """Where every row of every table lives: ``owner[t]`` is table t's rank (table-wise),
    or -1 for a table cut row-wise over all ``world`` ranks (row r on rank r mod world)."""

    table_rows: tuple[int, ...]
    world: int
    owner: tuple[int, ...]

    @property
    def kind(self) -> str:
        return "row-wise" if -1 in self.owner else "table-wise"

    def local_rows(self, rank: int, table: int) -> int:
        """How many of ``table``'s rows ``rank`` holds."""
        rows = self.table_rows[table]
        if self.owner[table] >= 0:
            return rows if self.owner[table] == rank else 0
        return len(range(rank, rows, self.world))

    def owners(self, table: int, ids: Any) -> Any:
        """Each id's rank (ids: an integer tensor or array)."""
        if self.owner[table] >= 0:
            return ids * 0 + self.owner[table]
        return ids % self.world

    def local_index(self, table: int, ids: Any) -> Any:
        """Each id's row in its owner's shard of ``table``."""
        return ids if self.owner[table] >= 0 else ids // self.world

    def owner_shares(self, distinct: Sequence[float]) -> tuple[float, ...]:
        """Each rank's share of the rows one replica asks for, given the distinct rows it
        looks up in each table: a table's on its owner, a row-wise table's evenly (its
        popular rows, the low ids, are interleaved over every rank)."""
        load = [0.0] * self.world
        for t, rows in enumerate(distinct):
            if self.owner[t] >= 0:
                load[self.owner[t]] += rows
            else:
                for rank in range(self.world):
                    load[rank] += rows / self.world
        total = sum(load)
        return tuple(x / total for x in load) if total > 0 else (1 / self.world,) * self.world


def plan_shards(table_rows: tuple[int, ...], world: int) -> ShardPlan:
    """Table-wise where the tables balance over the ranks (placed as ``assign_shards``
    places tensors), else row-wise."""
    placed = assign_shards(dict(enumerate(table_rows)), world)
    owner = tuple(placed[t] for t in range(len(table_rows)))
    load = [sum(r for r, o in zip(table_rows, owner, strict=True) if o == k)
            for k in range(world)]
    mean = sum(table_rows) / world
    if len(table_rows) >= world and max(load) <= TABLE_WISE_IMBALANCE * mean:
        return ShardPlan(tuple(table_rows), world, owner)
    return ShardPlan(tuple(table_rows), world, (-1,) * len(table_rows))
