"""FSDP's pass as its units run it: the one timeline of gathers, compute and
reduce-scatters that every sharded data axis reads, the data-parallel step's
(``step.data_parallel``) and the model-parallel step's under ``zero=3`` (``step.model_parallel``).

The order is FSDP2's (``fully_shard`` with its defaults, as torchtitan wraps each block):
forward all-gathers unit i once unit i-1 has started (one unit prefetched); every unit is
resharded after its forward, so backward gathers the last unit again at once and prefetches
unit i-1's parameters once unit i's backward has started, then reduce-scatters unit i's
gradient once it is done. One collective at a time (one communication stream), so a gather
queued behind a reduce-scatter waits for it.

Computed pass by pass, not as SimPy processes: a 175B model has tens of thousands of units,
and the slowest worker is the last to reach every point (same waits, longer compute), so its
timeline is the step's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class UnitPass:
    """One FSDP unit in one micro-batch: its compute and its collectives, in seconds."""

    forward_s: float
    backward_s: float
    gather_s: float  # all-gather of its parameters (run twice: forward, backward)
    scatter_s: float  # reduce-scatter of its gradient (once, after its backward)


def unit_timeline(units: Sequence[UnitPass]) -> float:
    """When one micro-batch's forward and backward over ``units`` (in forward order) end,
    its last reduce-scatter included, counted from the first gather's start."""
    if not units:
        return 0.0
    worker = link = 0.0  # when the worker and the one stream are next free
    previous_start = 0.0  # when the forward of the unit before started
    for unit in units:  # forward
        link = max(link, previous_start) + unit.gather_s  # its parameters are there
        previous_start = max(worker, link)
        worker = previous_start + unit.forward_s
    link = max(link, worker) + units[-1].gather_s  # resharded: gathered again
    gathered = link
    for i in reversed(range(len(units))):  # backward
        start = max(worker, gathered)
        if i > 0:
            link = max(link, start) + units[i - 1].gather_s
            gathered = link
        worker = start + units[i].backward_s
        link = max(link, worker) + units[i].scatter_s
    return max(worker, link)


def exposed_s(units: Sequence[UnitPass], microbatches: int = 1) -> float:
    """What FSDP's collectives add to ``microbatches`` passes over ``units`` beyond their
    compute: each micro-batch gathers and reduce-scatters again (FSDP2 reduces every
    backward unless told not to), and its first gather waits for the last reduce-scatter
    before it on the one stream, so micro-batches follow one another."""
    compute = sum(u.forward_s + u.backward_s for u in units)
    return microbatches * max(0.0, unit_timeline(units) - compute)
