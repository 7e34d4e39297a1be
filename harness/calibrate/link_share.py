"""How much of a shaped link a communication library's collectives use, from a sweep on it.

The link probe measures one bulk TCP flow, which is neither library's transport. On the
same emulated hosts gloo's ring all-reduce moves its bytes near the probed rate and TF's
gRPC ring does not (16 MiB on 4 hosts at 300 Mbit/s: gloo 735 ms, TF 937 ms, the wire 701),
by an amount that changes with the rate and the host count in a way no loopback sweep shows
(TF's 12.6 MB gradient exchange alone, 4 hosts: +14% over gloo's at 100 Mbit/s, +35% at 300,
+20% at 1 Gbit/s). So, as one runs nccl-tests on a cluster before trusting a job's
numbers, `stratbench comm --cluster netns:...` sweeps each library's all-reduce on the
cluster, and the step predictions take the library's share of the links from it: the
bandwidth at which the simulator, with everything else it knows (the library's own costs,
the round trips), times that measured all-reduce. The step model itself (schedules, compute,
overlap, runtime costs) is what the step dataset then scores; the collectives are scored on
their own (`validate` kind `collective`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.calibrate.links import MeasuredLinks, as_swept, emulated_topology
from harness.calibrate.sweep_selection import (
    at_nearest_world,
    latest_sweeps,
    normal_priority_first,
    software_costs,
)
from harness.core.clusters import parse_cluster
from harness.core.errors import InputError
from harness.core.strategies import library
from harness.core.strategies import strategy as find_strategy

# The smallest all-reduce a share of the link is read from: below it the library's per-message
# costs, not the link, set the time (4 hosts at 300 Mbit/s: 1 MiB moves 1.5 MB a host, 42 ms
# of wire against TF's 6-8 ms of ring-step costs).
MIN_BYTES = 1 << 20
# How far (as a factor) the size a share is read at may be from the size asked for
NEAR = 2.0


@dataclass(frozen=True)
class LinkShare:
    """A library's share of a cluster's links and the sweep it was read from."""

    efficiency: float  # simulated-at-full-rate wire time over the measured one's
    cluster: str  # the swept cluster
    world: int  # its ranks
    nbytes: float  # the size it was read at
    sweeps: int  # how many sweeps' medians it is the median of
    op: str = "all_reduce"  # the collective it was read from


@functools.lru_cache(maxsize=256)
def link_key(cluster: str) -> tuple[float, int, float] | None:
    """What makes two emulated clusters' links the same: rate, racks, uplink (not the host
    count: a 4-rank sweep on 6 hosts crosses the same links as one on 4)."""
    try:
        spec = parse_cluster(cluster)
    except InputError:
        return None
    if spec.kind != "netns" or spec.unshaped or spec.rate_bits is None:
        return None
    return spec.rate_bits, spec.racks, spec.uplink_bits or 0.0


def shaped_points(points: pd.DataFrame, framework: str, cluster: str,
                  op: str = "all_reduce", floor: float = MIN_BYTES) -> pd.DataFrame:
    """``framework``'s ``op`` points of at least ``floor`` bytes swept on clusters with
    ``cluster``'s links: at normal priority, as training runs, where there are such."""
    key = link_key(cluster)
    if key is None or points.empty or "cluster" not in points:
        return points.iloc[0:0]
    mine = points[(points["framework"] == framework) & (points["op"] == op)
                  & (points["bytes"] >= floor)]
    return normal_priority_first(mine[[link_key(str(c)) == key for c in mine["cluster"]]])


def link_share(points: pd.DataFrame, fits: pd.DataFrame, framework: str,
               links: MeasuredLinks, cluster: str, world: int, op: str = "all_reduce",
               near: float | None = None) -> LinkShare | None:
    """``framework``'s share of ``cluster``'s links (``links`` as probed), from its ``op``
    swept there at ``world`` ranks, else at the nearest rank count swept; None where it was
    never swept on such links. Read at the largest size swept (or, given ``near``, the size
    nearest it, from MIN_BYTES / 4 up, and None unless within NEAR x of it), the median over
    the latest FLOOR_SWEEPS sweeps: the bandwidth scale at which the simulated collective
    (links, round trips, the library's own costs as predict_step adds them) takes the
    measured time.

    An all-to-all is read near the exchange's own size because gloo's changes with it: on 2
    hosts at 300 Mbit/s its 1 MiB all-to-all ran at 0.93 of the wire and its 4 MiB one at
    0.48 (both directions of one TCP connection full at once), where the all-reduce kept
    0.95 at both; on 4 hosts 0.69-0.72 at every size (three peers' flows on one link)."""
    from harness.sim import simulate_collective

    swept = shaped_points(points, framework, cluster, op,
                          MIN_BYTES if near is None else MIN_BYTES / 4)
    if swept.empty:
        return None
    swept, ranks = at_nearest_world(swept, world)
    sizes = swept["bytes"].unique()
    if near is None:
        nbytes = float(max(sizes))
    else:
        nearest = size_near(sizes, near)
        if nearest is None:
            return None  # another regime: 16 MiB says nothing of a 1 MiB exchange
        nbytes = nearest
    swept = latest_sweeps(swept[swept["bytes"] == nbytes])
    measured = float(swept["time_s"].median())
    alpha, beta = software_costs(fits, framework, ranks)
    lib = library(framework)
    serial_beta = beta if lib.serial_software else 0.0
    algorithm = "allreduce_ring" if op == "all_reduce" else op
    trips = lib.trips(algorithm)
    swept_on = str(swept["cluster"].iloc[-1])
    at_rate = as_swept(links, swept_on, ranks)
    modelled = simulate_collective(emulated_topology(at_rate, (alpha, serial_beta), trips),
                                   ranks, algorithm, nbytes).time_s
    wire = simulate_collective(emulated_topology(at_rate, trips=0), ranks, algorithm,
                               nbytes).time_s
    rest = modelled - wire  # what the model adds to the bytes' time
    if not (math.isfinite(measured) and measured > rest and wire > 0):
        return None
    return LinkShare(wire / (measured - rest), swept_on, ranks, nbytes,
                     int(swept["run_id"].nunique()), op)


def size_near(sizes: Any, near: float) -> float | None:
    """The swept size nearest ``near``, where it is within NEAR x of it; else None."""
    sizes = [float(b) for b in sizes if b > 0]
    if not sizes or not near > 0:
        return None
    nbytes = min(sizes, key=lambda b: abs(math.log(b / near)))
    return nbytes if abs(math.log(nbytes / near)) <= math.log(NEAR) else None


def swept_near(points: pd.DataFrame, framework: str, cluster: str, op: str,
               near: float) -> bool:
    """Whether ``framework``'s ``op`` was swept on ``cluster``'s links near ``near`` bytes:
    what ``link_share(..., near=)`` needs to read a share there."""
    swept = shaped_points(points, framework, cluster, op, MIN_BYTES / 4)
    return not swept.empty and size_near(swept["bytes"].unique(), near) is not None


def step_shares(points: pd.DataFrame, fits: pd.DataFrame, framework: str, strategy: str,
                links: MeasuredLinks, cluster: str, world: int, exchange_bytes: float,
                dense_bytes: float = 0.0
                ) -> tuple[LinkShare | None, LinkShare | None]:
    """What a step prediction reads of a cluster's sweeps: the library's share of the links
    (its all-reduce) and, for embedding sharding, its all-to-all's near the rows a replica
    asks for (``exchange_bytes``).

    Embedding sharding all-reduces only its dense layers (``dense_bytes``), so its share of
    the links is read near that size where it was swept there, as the all-to-all's is: gloo's
    all-reduce reaches more of a racked cluster's uplinks at small sizes than at 16 MiB (5
    hosts in racks of 3 + 2 at 150/100 Mbit/s: 0.99 at 256 KiB, 0.87 at 16 MiB)."""
    share = link_share(points, fits, framework, links, cluster, world)
    record = find_strategy(framework, strategy)
    if record is None or record.exchange != "embedding" or exchange_bytes <= 0:
        return share, None
    if dense_bytes > 0:
        share = link_share(points, fits, framework, links, cluster, world,
                           near=dense_bytes) or share
    return share, link_share(points, fits, framework, links, cluster, world, "all_to_all",
                             near=exchange_bytes)
