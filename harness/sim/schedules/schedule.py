"""Schedules: a collective written once, as data, for two uses.

A :class:`Schedule` is a sequence of bulk-synchronous :class:`Step` s. In a step, transfer *i*
sends chunks ``[lo[i], lo[i] + size[i])`` of rank ``src[i]``'s buffer to rank ``dst[i]``,
which adds them to its own (``reduce``) or overwrites its own with them. All transfers of a
step read the buffers as they were when the step began; a step starts when the previous one
has finished everywhere (the model the alpha-beta closed forms assume).

The engine times a schedule on a topology; :func:`execute` runs the very same schedule on
numbers, so the property tests can show that what we simulate is an all-reduce (or an
all-gather, a reduce-scatter, a broadcast, a parameter-server round).

Structure that keeps large schedules small: a step may stand for ``repeat`` consecutive steps
whose transfers are the same except that every chunk index moves by ``shift`` (within the
window ``[base, base + period)``) each time: the p-1 steps of a ring phase are one Step.
Timing needs only the first of them; execution expands them. Likewise a step may stand for
``fan`` copies of its transfers side by side, copy j with its sources moved by ``j *
fan_src`` ranks, its destinations by ``j * fan_dst`` and its chunks by ``j * fan_lo``: the K
servers of a parameter-server round are one Step of W transfers, not W x K. The fast engine
times copy 0 with every link the copies share weighted K times (their rates are equal by
symmetry); execution and the detailed engine expand them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

COLLECTIVES = ("allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
               "all_to_all")


class ScheduleError(ValueError):
    """A malformed schedule (a bug in a generator, never a user error)."""


@dataclass(frozen=True)
class Transfer:
    """One message of one step instance: chunks [lo, lo + size) from src to dst."""

    src: int
    dst: int
    lo: int
    size: int
    reduce: bool


def _arr(value: ArrayLike, n: int, dtype: type) -> np.ndarray:
    out: np.ndarray = np.asarray(value, dtype=dtype)
    if out.ndim == 0:
        out = np.full(n, out, dtype=dtype)
    if out.shape != (n,):
        raise ScheduleError(f"expected {n} entries, got shape {out.shape}")
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Step:
    """Transfers that run at the same time, possibly standing for ``repeat`` rotated steps."""

    src: np.ndarray
    dst: np.ndarray
    lo: np.ndarray
    size: np.ndarray
    reduce: np.ndarray
    shift: np.ndarray
    base: np.ndarray
    period: np.ndarray
    repeat: int = 1
    fan: int = 1
    fan_src: int = 0
    fan_dst: int = 0
    fan_lo: int = 0

    def __len__(self) -> int:
        """Transfers of copy 0 (the copies a fan stands for are not counted)."""
        return int(self.src.size)

    def copy(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sources, destinations and first chunks of fan copy j (repetition 0)."""
        return (self.src + j * self.fan_src, self.dst + j * self.fan_dst,
                self.lo + j * self.fan_lo)

    def expanded(self) -> Step:
        """The same transfers with every fan copy written out (itself when fan is 1)."""
        if self.fan == 1:
            return self
        src, dst, lo = (np.concatenate(parts)
                        for parts in zip(*(self.copy(j) for j in range(self.fan)), strict=True))
        return step(src, dst, lo, np.tile(self.size, self.fan),
                    reduce=np.tile(self.reduce, self.fan), repeat=self.repeat)  # fans never rotate

    def chunks(self, k: int) -> np.ndarray:
        """First chunk of every transfer in the k-th repetition."""
        if k == 0 or not self.shift.any():
            return self.lo
        return self.base + (self.lo - self.base + self.shift * k) % self.period

    def transfers(self, k: int = 0) -> Iterator[Transfer]:
        lo = self.chunks(k)
        for i in range(len(self)):
            yield Transfer(int(self.src[i]), int(self.dst[i]), int(lo[i]), int(self.size[i]),
                           bool(self.reduce[i]))


def step(src: ArrayLike, dst: ArrayLike, lo: ArrayLike, size: ArrayLike = 1, *,
         reduce: ArrayLike, repeat: int = 1, shift: ArrayLike = 0, base: ArrayLike = 0,
         period: ArrayLike = 1, fan: int = 1, fan_src: int = 0, fan_dst: int = 0,
         fan_lo: int = 0) -> Step:
    """Build a Step, broadcasting scalars (each array-like one entry per transfer, or one
    for all); an empty step is allowed (and ignored later)."""
    src_a = np.asarray(src, dtype=np.int64).reshape(-1)
    n = src_a.size
    s = Step(_arr(src_a, n, np.int64), _arr(dst, n, np.int64), _arr(lo, n, np.int64),
             _arr(size, n, np.int64), _arr(reduce, n, bool), _arr(shift, n, np.int64),
             _arr(base, n, np.int64), _arr(period, n, np.int64), int(repeat), int(fan),
             int(fan_src), int(fan_dst), int(fan_lo))
    if s.repeat < 1 or s.fan < 1:
        raise ScheduleError(f"repeat {repeat} and fan {fan} must be >= 1")
    if s.fan > 1 and (s.shift.any() or not (s.fan_src or s.fan_dst)):
        raise ScheduleError("fan copies must move ranks and cannot rotate")
    if n and ((s.size < 1).any() or (s.period < 1).any()):
        raise ScheduleError("chunk ranges and periods must be non-empty")
    return s


@dataclass(frozen=True, eq=False)
class Schedule:
    """A collective as steps over ``world`` ranks and a buffer cut into ``n_chunks`` chunks.

    An all-to-all's buffer is the world x world matrix of messages, row i what rank i sends
    (message i -> j in row i's j-th range of chunks): its bytes per rank are a row's on
    average, the rows' own sizes where the messages differ.

    Ranks ``0 .. contributors-1`` start with their data; the others (dedicated parameter
    servers) start with zeros. ``owner[c]`` is the rank that ends with (reduce_scatter) or
    starts with (all_gather) chunk c; ``root`` is the rank that starts with (broadcast) or ends
    with (reduce) the data.
    """

    name: str
    collective: str
    world: int
    n_chunks: int
    steps: tuple[Step, ...]
    contributors: int = 0
    owner: np.ndarray | None = None
    root: int = 0

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ScheduleError(f"unknown collective {self.collective!r}")
        if self.contributors == 0:
            object.__setattr__(self, "contributors", self.world)
        for s in self.steps:
            for src, dst, lo in (s.copy(0), s.copy(s.fan - 1)):  # linear in the copy
                if len(s) and (src.max() >= self.world or dst.max() >= self.world
                               or src.min() < 0 or dst.min() < 0):
                    raise ScheduleError(f"{self.name}: a transfer names a rank outside the "
                                        f"world")
                if len(s) and ((lo < 0).any() or (lo + s.size > self.n_chunks).any()):
                    raise ScheduleError(f"{self.name}: a transfer names a chunk outside the "
                                        f"buffer")

    @property
    def n_steps(self) -> int:
        return sum(s.repeat for s in self.steps)

    @property
    def n_transfers(self) -> int:
        return sum(len(s) * s.repeat * s.fan for s in self.steps)

    def instances(self) -> Iterator[tuple[Step, int]]:
        """Every step instance in order, as (step, repetition index), fans written out."""
        for s in self.steps:
            whole = s.expanded()
            for k in range(s.repeat):
                yield whole, k


# ---------------------------------------------------------------- execution on numbers


SHARD_RESOLUTION = 1024  # chunks a buffer is cut into when its parts are unequal


def shard_chunks(weights: Sequence[float], resolution: int = SHARD_RESOLUTION) -> np.ndarray:
    """Chunks per part in proportion to ``weights`` (largest remainder, at least one each):
    real servers hold whole tensors, so their shards are rarely equal, nor are the messages
    of an all-to-all whose owners hold unequal tables."""
    w = np.asarray(weights, dtype=float)
    if w.size < 1 or not (w > 0).all():
        raise ValueError(f"shard weights {list(weights)} must be positive")
    exact = w / w.sum() * max(resolution, w.size)
    chunks = np.maximum(1, np.floor(exact)).astype(np.int64)
    short = max(resolution, w.size) - int(chunks.sum())
    for i in np.argsort(chunks - exact)[:max(0, short)]:
        chunks[i] += 1
    return chunks


def chunk_bounds(n_elements: int, n_chunks: int) -> np.ndarray:
    """Element boundaries of chunks (np.array_split's cut points): chunk c is [b[c], b[c+1])."""
    base, extra = divmod(n_elements, n_chunks)
    sizes = np.full(n_chunks, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def execute(schedule: Schedule, arrays: np.ndarray, op: str = "sum") -> np.ndarray:
    """Run the schedule on numbers; returns every rank's buffer at the end (world x n).

    ``arrays`` holds one row per contributing rank. ``op='mean'`` divides reduced results by
    the number of contributors (what data-parallel training applies). Raises ScheduleError if a
    step writes one chunk twice by copy, or both copies and reduces into it (a race on a
    real machine).
    """
    if op not in ("sum", "mean"):
        raise ScheduleError(f"unknown op {op!r} (sum, mean)")
    data = np.asarray(arrays, dtype=float)
    if data.ndim != 2 or data.shape[0] != schedule.contributors:
        raise ScheduleError(f"need {schedule.contributors} rows, got shape {data.shape}")
    state = np.zeros((schedule.world, data.shape[1]))
    state[: schedule.contributors] = data
    bounds = chunk_bounds(data.shape[1], schedule.n_chunks)
    for s, k in schedule.instances():
        old = state.copy()
        copies = np.zeros((schedule.world, schedule.n_chunks), dtype=np.int64)
        reduces = np.zeros_like(copies)
        lo = s.chunks(k)
        rotating = s.shift != 0
        if (rotating & ((lo < s.base) | (lo + s.size > s.base + s.period))).any():
            raise ScheduleError(f"{schedule.name}: a rotated chunk range leaves its window")
        for i in range(len(s)):
            src, dst, c0, c1 = int(s.src[i]), int(s.dst[i]), int(lo[i]), int(lo[i] + s.size[i])
            a, b = bounds[c0], bounds[c1]
            if s.reduce[i]:
                state[dst, a:b] += old[src, a:b]
                reduces[dst, c0:c1] += 1
            else:
                state[dst, a:b] = old[src, a:b]
                copies[dst, c0:c1] += 1
        if (copies > 1).any() or ((copies > 0) & (reduces > 0)).any():
            raise ScheduleError(f"{schedule.name}: a step writes one chunk from two sources")
    if op == "mean" and schedule.collective in ("allreduce", "reduce_scatter", "reduce"):
        state /= schedule.contributors
    return state


# ---------------------------------------------------------------- combinators


def offset(schedule_steps: tuple[Step, ...], chunks: int, ranks: np.ndarray | None = None
           ) -> tuple[Step, ...]:
    """The same steps on chunks moved by ``chunks`` (and ranks renamed through ``ranks``)."""
    out = []
    for s in (s.expanded() for s in schedule_steps):
        src, dst = (s.src, s.dst) if ranks is None else (ranks[s.src], ranks[s.dst])
        out.append(step(src, dst, s.lo + chunks, s.size, reduce=s.reduce, repeat=s.repeat,
                        shift=s.shift, base=s.base + chunks, period=s.period))
    return tuple(out)


def _advance(s: Step, k: int, repeat: int) -> Step:
    """Repetitions k .. k+repeat-1 of s, as a step of its own."""
    s = s.expanded()
    return step(s.src, s.dst, s.chunks(k), s.size, reduce=s.reduce, repeat=repeat,
                shift=s.shift, base=s.base, period=s.period)


def merge(a: Step, b: Step) -> Step:
    """Two steps with the same repeat run as one (their transfers side by side)."""
    if a.repeat != b.repeat:
        raise ScheduleError("merge needs equal repeats")
    a, b = a.expanded(), b.expanded()
    cat = np.concatenate
    return step(cat([a.src, b.src]), cat([a.dst, b.dst]), cat([a.lo, b.lo]),
                cat([a.size, b.size]), reduce=cat([a.reduce, b.reduce]), repeat=a.repeat,
                shift=cat([a.shift, b.shift]), base=cat([a.base, b.base]),
                period=cat([a.period, b.period]))


def zip_steps(*sequences: tuple[Step, ...]) -> tuple[Step, ...]:
    """Run step sequences side by side (step t of each together), keeping repeats where they
    line up; sequences of different lengths simply end early."""
    runs = [list(seq) for seq in sequences]
    pos = [0] * len(runs)  # repetitions already used of the current step of each sequence
    out: list[Step] = []
    while True:
        live = [i for i, r in enumerate(runs) if r]
        if not live:
            return tuple(out)
        n = min(runs[i][0].repeat - pos[i] for i in live)
        parts = [_advance(runs[i][0], pos[i], n) for i in live]
        combined = parts[0]
        for p in parts[1:]:
            combined = merge(combined, p)
        out.append(combined)
        for i in live:
            pos[i] += n
            if pos[i] == runs[i][0].repeat:
                runs[i].pop(0)
                pos[i] = 0


def parallel(name: str, *schedules: Schedule) -> Schedule:
    """Schedules on consecutive slices of one buffer, run at the same time (e.g. the two trees
    of a double binary tree, or the two directions of a bidirectional ring)."""
    first = schedules[0]
    shifted, total = [], 0
    for s in schedules:
        if s.world != first.world or s.collective != first.collective:
            raise ScheduleError("parallel schedules need the same world and collective")
        shifted.append(offset(s.steps, total))
        total += s.n_chunks
    owner = None
    if all(s.owner is not None for s in schedules):
        owner = np.concatenate([s.owner for s in schedules if s.owner is not None])
    return Schedule(name, first.collective, first.world, total, zip_steps(*shifted),
                    first.contributors, owner, first.root)


def pipelined(schedule: Schedule, segments: int) -> Schedule:
    """Cut the buffer into ``segments`` and start segment j one step after segment j-1, so
    different phases overlap (e.g. intra-host and inter-host phases of a hierarchical
    all-reduce). Expands repeats: meant for moderate sizes."""
    if segments <= 1:
        return schedule
    flat = tuple(_advance(s, k, 1) for s, k in schedule.instances())
    empty = step([], [], [], reduce=False)
    seqs = [(empty,) * j + offset(flat, j * schedule.n_chunks) for j in range(segments)]
    owner = None
    if schedule.owner is not None:
        owner = np.concatenate([schedule.owner] * segments)
    steps = tuple(s for s in zip_steps(*seqs) if len(s))
    return Schedule(f"{schedule.name}_x{segments}", schedule.collective, schedule.world,
                    schedule.n_chunks * segments, steps, schedule.contributors, owner,
                    schedule.root)
