"""Flow-level bandwidth sharing: max-min fair rates by progressive filling.

A message in flight is a *flow*: it crosses a set of links and gets a rate. Flows that share a
link share its capacity max-min fairly (every flow's rate is as large as it can be without
lowering a flow that has less), the fluid model of TCP/IB congestion control used by
flow-level simulators. Two implementations on purpose: a vectorised one for the fast engine
and a plain one for the detailed engine; a property test checks they agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: A link counts as full when less than this fraction of its capacity is left.
SATURATED = 1e-9
#: A flow counts as done when less than this fraction of its bytes is left.
DONE = 1e-9


def maxmin_rates(links: np.ndarray, capacity: np.ndarray,
                 weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of every flow; ``links`` is F x L link ids padded with -1.

    ``weight`` (F x L): how many flows of equal rate each entry stands for on that link
    (a representative of flows that are symmetric copies of each other); 1 when None.

    Every round raises all unfrozen flows by the largest amount the tightest link allows and
    freezes the flows on the links that filled up; rounds = distinct bottleneck levels, which
    symmetry keeps small.
    """
    n_flows = links.shape[0]
    rate = np.zeros(n_flows)
    if n_flows == 0:
        return rate
    left = capacity.astype(float).copy()
    valid = links >= 0
    safe = np.where(valid, links, 0)
    active = np.ones(n_flows, dtype=bool)
    while active.any():
        used = safe[active][valid[active]]
        count = (np.bincount(used, minlength=left.size) if weight is None else
                 np.bincount(used, weights=weight[active][valid[active]], minlength=left.size))
        busy = count > 0
        if not busy.any():  # flows that cross no link: unbounded, should not happen
            rate[active] = np.inf
            break
        delta = float((left[busy] / count[busy]).min())
        rate[active] += delta
        left[busy] -= delta * count[busy]
        full = busy & (left <= SATURATED * capacity)
        hit = (full[safe] & valid).any(axis=1)
        active &= ~hit
    return rate


def maxmin_rates_plain(paths: Sequence[Sequence[int]], capacity: Sequence[float]
                       ) -> list[float]:
    """The same allocation in plain Python (the detailed engine's): each link's count of
    unfrozen flows is kept as flows freeze, not counted again every round."""
    rate = [0.0] * len(paths)
    left: dict[int, float] = {}
    users: dict[int, list[int]] = {}
    for f, p in enumerate(paths):
        if not p:
            rate[f] = float("inf")
        for link in p:
            if link not in users:
                left[link] = float(capacity[link])
                users[link] = []
            users[link].append(f)
    count = {link: len(flows) for link, flows in users.items()}
    frozen = [not p for p in paths]
    level = 0.0
    while count:
        delta = min(left[link] / n for link, n in count.items())
        level += delta
        full = []
        for link, n in count.items():
            left[link] -= delta * n
            if left[link] <= SATURATED * capacity[link]:
                full.append(link)
        for link in full:
            for f in users[link]:
                if frozen[f]:
                    continue
                frozen[f] = True
                rate[f] = level
                for crossed in paths[f]:
                    count[crossed] -= 1
                    if not count[crossed]:
                        del count[crossed]
    return rate


def fluid_step(links: np.ndarray, nbytes: np.ndarray, latency: np.ndarray,
               capacity: np.ndarray, weight: np.ndarray | None = None
               ) -> tuple[float, int, np.ndarray]:
    """Run flows that all start together until the last one lands.

    Returns (duration, rounds, finish time of each flow). A flow transmits its bytes at its
    max-min fair rate, re-computed whenever some flow finishes, and lands ``latency`` after
    its last byte left. ``rounds`` is the number of distinct finishing moments. ``weight``:
    as for :func:`maxmin_rates`.
    """
    n = nbytes.size
    finish = np.zeros(n)
    remaining = nbytes.astype(float).copy()
    active = np.flatnonzero(remaining > 0)
    t = 0.0
    rounds = 0
    while active.size:
        rate = maxmin_rates(links[active], capacity,
                            None if weight is None else weight[active])
        dt = float((remaining[active] / rate).min())
        t += dt
        remaining[active] -= rate * dt
        done = remaining[active] <= DONE * nbytes[active]
        finish[active[done]] = t
        active = active[~done]
        rounds += 1
    land = finish + latency
    return (float(land.max()) if n else 0.0), rounds, land
