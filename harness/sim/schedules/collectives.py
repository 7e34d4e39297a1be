"""Collective algorithms written once, as schedules (see schedule.py).

* Ring (reduce-scatter then all-gather around one ring): Patarasuk & Yuan 2009.
* Recursive halving-doubling (Rabenseifner's reduce-scatter + all-gather, with the usual
  fold-in of the ranks beyond the largest power of two): Thakur, Rabenseifner & Gropp 2005.
* Binary and double binary trees, pipelined in chunks (NCCL's tree algorithm; Sanders, Speck
  & Träff 2009 for the two complementary trees).
* Multi-dimensional rings: reduce-scatter along each dimension in turn, then all-gather back
  (hierarchical all-reduce on hosts x devices; 2D/3D ring all-reduce on a torus).
* Ring reduce-scatter, ring all-gather and tree broadcast on their own.
* Binomial-tree broadcast as gloo runs it: unchunked, every rank posts all of its sends
  at once (gloo/broadcast.cc), so the root's link carries log2(p) copies side by side.

Rank r of a schedule runs on device r of the topology unless the caller places it elsewhere.
"""

from __future__ import annotations

import math

import numpy as np

from harness.sim.schedules.schedule import (
    SHARD_RESOLUTION,
    Schedule,
    Step,
    parallel,
    shard_chunks,
    step,
)


def _ring_phase(groups: np.ndarray, bases: np.ndarray, block: int, reduce: bool) -> Step | None:
    """One ring phase inside every row of ``groups`` (ranks in ring order).

    Reduce-scatter: the rank at position x first sends block x-1 and, d-1 steps later, holds
    block x summed over its ring. All-gather: it first sends block x, which it holds.
    ``bases`` gives, per rank, the first chunk of the d blocks this ring works on.
    """
    d = groups.shape[1]
    if d < 2:
        return None
    x = np.broadcast_to(np.arange(d), groups.shape)
    first = (x - 1) % d if reduce else x
    return step(groups.ravel(), np.roll(groups, -1, axis=1).ravel(),
                (bases + first * block).ravel(), block, reduce=reduce, repeat=d - 1,
                shift=-block, base=bases.ravel(), period=d * block)


def _order(p: int, order: np.ndarray | list[int] | None) -> np.ndarray:
    ranks = np.arange(p) if order is None else np.asarray(order, dtype=np.int64)
    if sorted(ranks.tolist()) != list(range(p)):
        raise ValueError(f"ring order must be a permutation of 0..{p - 1}")
    return ranks


def ring_allreduce(p: int, order: np.ndarray | list[int] | None = None) -> Schedule:
    """Ring all-reduce: 2(p-1) steps of S/p each (bandwidth-optimal, latency linear in p)."""
    ring = _order(p, order)[None, :]
    zero = np.zeros_like(ring)
    steps = [s for s in (_ring_phase(ring, zero, 1, True), _ring_phase(ring, zero, 1, False))
             if s is not None]
    return Schedule("allreduce_ring", "allreduce", p, p, tuple(steps))


def ring_reduce_scatter(p: int, order: np.ndarray | list[int] | None = None) -> Schedule:
    """Ring reduce-scatter: the rank at ring position j ends with chunk j summed."""
    ring = _order(p, order)
    s = _ring_phase(ring[None, :], np.zeros((1, p), dtype=np.int64), 1, True)
    return Schedule("reduce_scatter_ring", "reduce_scatter", p, p,
                    () if s is None else (s,), owner=ring.copy())


def ring_all_gather(p: int, order: np.ndarray | list[int] | None = None) -> Schedule:
    """Ring all-gather: the rank at ring position j starts with chunk j."""
    ring = _order(p, order)
    s = _ring_phase(ring[None, :], np.zeros((1, p), dtype=np.int64), 1, False)
    return Schedule("all_gather_ring", "all_gather", p, p, () if s is None else (s,),
                    owner=ring.copy())


def multidim_allreduce(dims: tuple[int, ...] | list[int], name: str = "allreduce_hierarchical"
                       ) -> Schedule:
    """Reduce-scatter along dimension 0, then 1, ..., then all-gather back in reverse.

    Rank r = c0 + d0*(c1 + d1*c2 ...) (dimension 0 varies fastest: the devices of one host,
    or x on a torus). With dims (g, h) this is the hierarchical all-reduce: intra-host
    reduce-scatter, inter-host ring all-reduce of 1/g of the data per device, intra-host
    all-gather. Chunks are numbered with dimension 0 slowest, so every block is contiguous.
    """
    dims = tuple(int(d) for d in dims)
    p = math.prod(dims)
    k = len(dims)
    grid = np.arange(p).reshape(dims[::-1])
    coords = np.stack([(np.arange(p) // math.prod(dims[:i])) % dims[i] for i in range(k)])
    blocks = [math.prod(dims[i + 1:]) for i in range(k)]
    down, up = [], []
    for i, d in enumerate(dims):
        groups = np.moveaxis(grid, k - 1 - i, -1).reshape(-1, d)
        base_of_rank = sum((coords[m] * blocks[m] for m in range(i)), np.zeros(p, np.int64))
        bases = base_of_rank[groups]
        rs = _ring_phase(groups, bases, blocks[i], True)
        ag = _ring_phase(groups, bases, blocks[i], False)
        if rs is not None and ag is not None:
            down.append(rs)
            up.append(ag)
    return Schedule(name, "allreduce", p, p, tuple(down + up[::-1]))


def hierarchical_allreduce(per_host: int, hosts: int) -> Schedule:
    """Intra-host reduce-scatter, inter-host all-reduce, intra-host all-gather."""
    return multidim_allreduce((per_host, hosts))


def halving_doubling_allreduce(p: int) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter, recursive-doubling all-gather.

    With p not a power of two, the r = p - 2^k extra ranks first hand their whole buffer to a
    partner (rank - 2^k) and get the result back at the end: two more steps of size S.
    """
    k = p.bit_length() - 1
    q = 1 << k  # largest power of two <= p
    extra = np.arange(q, p)
    steps: list[Step] = []
    if extra.size:
        steps.append(step(extra, extra - q, 0, q, reduce=True))
    ranks = np.arange(q)
    d = q // 2
    while d >= 1:  # recursive halving: keep the half that holds chunk `rank`
        start = ranks & ~(2 * d - 1)
        lo = np.where(ranks & d, start, start + d)
        steps.append(step(ranks, ranks ^ d, lo, d, reduce=True))
        d //= 2
    d = 1
    while d < q:  # recursive doubling: send what you hold, receive your partner's
        steps.append(step(ranks, ranks ^ d, ranks & ~(d - 1), d, reduce=False))
        d *= 2
    if extra.size:
        steps.append(step(extra - q, extra, 0, q, reduce=False))
    return Schedule("allreduce_halving_doubling", "allreduce", p, q, tuple(steps))


# ---------------------------------------------------------------- trees


def inorder_tree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Parent and depth of positions 1..n in the in-order binary tree NCCL uses.

    Position x with lowest set bit l has children x - l/2 and x + l/2 (the right one pulled
    down while it lies past n). Leaves are the odd positions, so in a second tree shifted by
    one rank the leaves and inner nodes trade places. Index 0 of the arrays is unused; the
    root has parent 0.
    """
    parent = np.zeros(n + 1, dtype=np.int64)
    depth = np.zeros(n + 1, dtype=np.int64)
    if n == 0:
        return parent, depth
    root = 1 << (n.bit_length() - 1)
    stack = [root]
    while stack:
        x = stack.pop()
        half = (x & -x) // 2
        if half == 0:
            continue
        for c in (x - half, x + half):
            while c > n:
                low = c & -c
                if low == 1:
                    c = 0
                    break
                c -= low // 2
            if c:
                parent[c], depth[c] = x, depth[x] + 1
                stack.append(c)
    return parent, depth


def _tree_ranks(n: int, rank_of_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent rank (-1 for the root) and depth by rank, for a position -> rank mapping."""
    parent_pos, depth_pos = inorder_tree(n)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    pos = np.arange(1, n + 1)
    ranks = rank_of_pos[pos]
    has = parent_pos[pos] > 0
    parent[ranks[has]] = rank_of_pos[parent_pos[pos][has]]
    depth[ranks] = depth_pos[pos]
    return parent, depth


def _tree_steps(parent: np.ndarray, depth: np.ndarray, m: int, up: bool, down: bool
                ) -> tuple[Step, ...]:
    """Pipelined reduce up and/or broadcast down one tree on chunks 0..m-1.

    At step t a node at depth d sends chunk t-(D-d) to its parent (reduce) and receives chunk
    t-D-d+1 (after the reduce) or t-d+1 (broadcast only) from it. While every level is busy,
    consecutive steps differ only by the chunk, so that stretch is one repeated Step.
    """
    nodes = np.flatnonzero(parent >= 0)
    if nodes.size == 0:
        return ()
    par, d = parent[nodes], depth[nodes]
    deep = int(depth.max())
    lag = deep if up else 0  # when the broadcast of chunk 0 leaves the root
    total = (m + deep - 1 if up else 0) if not down else m + lag + deep - 1

    def at(t: int, repeat: int = 1) -> Step:
        c_up = t - (deep - d)
        c_dn = t - lag - d + 1
        mu = (c_up >= 0) & (c_up < m) if up else np.zeros(d.size, bool)
        md = (c_dn >= 0) & (c_dn < m) if down else np.zeros(d.size, bool)
        cat = np.concatenate
        return step(cat([nodes[mu], par[md]]), cat([par[mu], nodes[md]]),
                    cat([c_up[mu], c_dn[md]]), 1,
                    reduce=cat([np.ones(mu.sum(), bool), np.zeros(md.sum(), bool)]),
                    repeat=repeat, shift=1, base=0, period=m)

    # every level busy in every direction: from the deepest level's first chunk to the
    # first level's last one
    full_from = max(deep - 1 if up else 0, lag + deep - 1 if down else 0)
    full_to = m - 1
    steps: list[Step] = []
    t = 0
    while t < total:
        if t == full_from and full_to > t:
            steps.append(at(t, full_to - t + 1))
            t = full_to + 1
        else:
            steps.append(at(t))
            t += 1
    return tuple(s for s in steps if len(s))


def binary_tree_allreduce(p: int, chunks: int = 1) -> Schedule:
    """One pipelined binary tree: reduce to the root, broadcast back (``chunks`` pieces)."""
    parent, depth = _tree_ranks(p, np.arange(-1, p))
    return Schedule("allreduce_binary_tree", "allreduce", p, chunks,
                    _tree_steps(parent, depth, chunks, True, True))


def double_binary_tree_allreduce(p: int, chunks: int = 1) -> Schedule:
    """NCCL's double binary tree: half the data on each of two complementary trees.

    Tree A puts position x on rank x-1 (inner nodes are odd ranks), tree B on rank x mod p
    (inner nodes are even ranks), so most ranks are a leaf in one tree and send and receive
    about S in total, as in a ring, at logarithmic depth.
    """
    a_parent, a_depth = _tree_ranks(p, np.arange(-1, p))
    b_parent, b_depth = _tree_ranks(p, np.arange(p + 1) % p)
    tree_a = Schedule("a", "allreduce", p, chunks, _tree_steps(a_parent, a_depth, chunks,
                                                                 True, True))
    tree_b = Schedule("b", "allreduce", p, chunks, _tree_steps(b_parent, b_depth, chunks,
                                                                 True, True))
    return parallel("allreduce_tree", tree_a, tree_b)


def tree_broadcast(p: int, root: int = 0, chunks: int = 1) -> Schedule:
    """Pipelined binary-tree broadcast from ``root`` in ``chunks`` pieces."""
    top = 1 << (p.bit_length() - 1)
    rank_of_pos = (np.arange(p + 1) - top + root) % p
    parent, depth = _tree_ranks(p, rank_of_pos)
    return Schedule("broadcast_tree", "broadcast", p, chunks,
                    _tree_steps(parent, depth, chunks, False, True), root=root)


def binomial_broadcast(p: int, root: int = 0) -> Schedule:
    """gloo's broadcast: virtual rank v (root = 0) receives the whole buffer from v minus its
    highest set bit, then sends it at once to v + 2^j for every higher bit j. The sends a rank
    posts together share its link, so on p = 6 the root's three copies take 3 message times
    and rank 1's two more 2: 5 in all, as measured on emulated hosts (a pipelined tree takes
    about 2)."""
    src, dst, generation = [], [], []
    for v in range(p):
        j = v.bit_length()  # v's children add one bit above its highest
        while v + (1 << j) < p:
            src.append(v)
            dst.append(v + (1 << j))
            generation.append(v.bit_count())
            j += 1
    real = (np.asarray(src, dtype=np.int64) + root) % p
    peer = (np.asarray(dst, dtype=np.int64) + root) % p
    gen = np.asarray(generation, dtype=np.int64)
    steps = tuple(step(real[gen == g], peer[gen == g], 0, 1, reduce=False)
                  for g in sorted(set(generation)))
    return Schedule("broadcast_binomial", "broadcast", p, 1, steps, root=root)


def channel_orders(runs: int, k: int) -> list[np.ndarray]:
    """NCCL's channels over ``runs`` runs of ``k`` consecutive ranks (a host's GPUs with a
    NIC each): channel c enters every run at its c-th rank and leaves from the one before,
    so each run's k exits differ and every NIC carries a ring."""
    local, base = np.arange(k), (np.arange(runs) * k)[:, None]
    return [(base + (c + local)[None, :] % k).reshape(-1) for c in range(k)]


def grouped_ring_allreduce(groups: int, size: int, order: np.ndarray | None = None
                           ) -> Schedule:
    """A ring all-reduce inside each block of ``size`` consecutive ranks, all blocks at once:
    the tensor-parallel groups of a stage, or the data-parallel groups of a 3D layout, whose
    rings share hosts and links while they run. ``order``: each block's ring as positions in
    the block (one row per group), where the ring visits its ranks out of order."""
    ring = np.arange(groups * size, dtype=np.int64).reshape(groups, size)
    if order is not None:
        ring = np.take_along_axis(ring, np.asarray(order, dtype=np.int64), axis=1)
    zero = np.zeros_like(ring)
    steps = [s for s in (_ring_phase(ring, zero, 1, True), _ring_phase(ring, zero, 1, False))
             if s is not None]
    return Schedule("allreduce_ring_groups", "allreduce", groups * size, size, tuple(steps))


def point_to_point(pairs: int) -> Schedule:
    """Rank i sends its buffer to rank ``pairs + i``, all pairs at once: the activations (or
    gradients) one pipeline stage hands the next, from every tensor and data rank."""
    src = np.arange(pairs, dtype=np.int64)
    return Schedule("send_recv", "broadcast", 2 * pairs, 1,
                    (step(src, src + pairs, 0, 1, reduce=False),), contributors=pairs)


def all_to_all(p: int, sizes: np.ndarray | None = None) -> Schedule:
    """Every rank sends a different chunk to every other, all at once (torch's
    all_to_all_single, NCCL's and gloo's alltoall): message i -> j of rank i to rank j.
    ``sizes``: the p x p matrix of the messages' relative sizes (equal when None), cut into
    whole chunks by the largest remainder: timed with ``nbytes``, the matrix holds p x
    ``nbytes`` in all, the diagonal (each rank's message to itself) never moving. Executed on
    numbers, rank j ends with every rank's message meant for it."""
    if sizes is None:
        chunks = np.ones(p * p, np.int64)
    else:
        matrix = np.asarray(sizes, dtype=float)
        if matrix.shape != (p, p) or (matrix < 0).any() or matrix.sum() <= 0:
            raise ValueError(f"all-to-all sizes must be a non-negative {p} x {p} matrix")
        chunks = np.zeros(p * p, np.int64)
        live = matrix.reshape(-1) > 0
        chunks[live] = shard_chunks(matrix.reshape(-1)[live].tolist(), SHARD_RESOLUTION * p)
    lo = np.concatenate([[0], np.cumsum(chunks)[:-1]])
    src = np.repeat(np.arange(p), p)
    dst = np.tile(np.arange(p), p)
    keep = (src != dst) & (chunks > 0)
    steps = ((step(src[keep], dst[keep], lo[keep], chunks[keep], reduce=False),)
             if keep.any() else ())
    return Schedule("all_to_all", "all_to_all", p, int(chunks.sum()), steps)
