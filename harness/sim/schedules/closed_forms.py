"""Alpha-beta closed forms: the floor under the simulator.

A message of n bytes costs ``alpha + n * beta`` (alpha: latency per message in s, beta: s per
byte, 1/bandwidth). Every rank has one full-duplex port, so in one step a rank may send and
receive at full rate at once, and k messages through one port take k times as long. On a
uniform single switch the simulator must reproduce these to rounding; the property tests check
it. S is the buffer size in bytes per rank.

References: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005 (ring, recursive halving-doubling, the alpha-beta
model); P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 69(2), 2009 (ring optimality, the 2(p-1)/p S beta lower bound); NCCL
documentation and nccl-tests' PERFORMANCE.md (busbw = algbw * 2(p-1)/p; the double binary
tree); A. Sergeev, M. Del Balso, "Horovod", 2018 (hierarchical all-reduce).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ring_allreduce(p: int, S: float, alpha: float, beta: float) -> float:
    """2(p-1) alpha + 2(p-1)/p S beta."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * S * beta


def ring_reduce_scatter(p: int, S: float, alpha: float, beta: float) -> float:
    """(p-1) alpha + (p-1)/p S beta (S is the whole buffer; each rank ends with S/p)."""
    return (p - 1) * alpha + (p - 1) / p * S * beta


ring_all_gather = ring_reduce_scatter


def halving_doubling_allreduce(p: int, S: float, alpha: float, beta: float) -> float:
    """2 log2(q) alpha + 2(q-1)/q S beta with q = 2^floor(log2 p); when p != q the extra ranks
    fold in and out: + 2 (alpha + S beta)."""
    q = 1 << (p.bit_length() - 1)
    t = 2 * math.log2(q) * alpha + 2 * (q - 1) / q * S * beta
    return t + (2 * (alpha + S * beta) if p != q else 0.0)


def binary_tree_allreduce(p: int, S: float, alpha: float, beta: float) -> float:
    """Unpipelined binary tree: reduce up D = floor(log2 p) levels, broadcast down again.

    A parent takes two children's S at once (2 S beta a level); the root of NCCL's in-order
    tree has a single child when p is a power of two.
    """
    if p < 2:
        return 0.0
    depth = p.bit_length() - 1
    root_children = 2 if p > (1 << depth) else 1
    return 2 * ((depth - 1) * (alpha + 2 * S * beta) + alpha + root_children * S * beta)


def double_binary_tree_estimate(p: int, S: float, alpha: float, beta: float,
                                chunks: int) -> float:
    """NCCL's double binary tree, pipelined in ``chunks`` per tree: (chunks + 2D - 1) steps
    (D = floor(log2 p)) of at most alpha + 2 S/chunks beta (in the steady state a port
    carries four half-chunks: two from children and one from the parent in the tree where the
    rank is inner, one from the parent where it is a leaf). The fill and drain steps carry
    less, so this is an upper bound (a property test checks it); it tends to 2 S beta, the
    ring's bandwidth term, as chunks grow."""
    if p < 2:
        return 0.0
    depth = p.bit_length() - 1
    return (chunks + 2 * depth - 1) * (alpha + 2 * S / chunks * beta)


def hierarchical_allreduce(per_host: int, hosts: int, S: float, alpha_intra: float,
                           beta_intra: float, alpha_inter: float, beta_inter: float,
                           shared_nic: bool = False) -> float:
    """Intra reduce-scatter + inter ring all-reduce of S/g per device + intra all-gather:
    2(g-1)(a1 + S/g b1) + 2(h-1)(a2 + S/(g h) b2), times g on b2 when the g devices of a
    host share one NIC."""
    g, h = per_host, hosts
    nic = g if shared_nic else 1
    intra = 2 * (g - 1) * (alpha_intra + S / g * beta_intra)
    inter = 2 * (h - 1) * (alpha_inter + nic * S / (g * h) * beta_inter)
    return intra + inter


def parameter_server(workers: int, shards: int, S: float, alpha: float, beta_worker: float,
                     beta_server: float | None = None, colocated: bool = False,
                     fractions: Sequence[float] | None = None) -> float:
    """One synchronous push + pull round with K shards, shard k holding f_k S (f_k = 1/K
    unless ``fractions`` says otherwise). Exact for equal shards; with unequal ones a lower
    bound (each port's load at full speed), which max-min fair sharing can exceed: a worker's
    port splits evenly over its pushes, so a large shard may finish late at its server.

    Dedicated servers: 2 (alpha + max(S b_w, W max_k f_k S b_s)): a worker's port carries its
    whole S, server k's carries f_k S from each of the W workers. Colocated (server k on a
    worker): server k's port takes in (W-1) f_k S, a plain worker's sends S, a server-worker's
    sends (1 - f_k) S.
    """
    W, K = workers, shards
    f = [1 / K] * K if fractions is None else [x / sum(fractions) for x in fractions]
    b_s = beta_worker if beta_server is None else beta_server
    if colocated:
        if W < 2:
            return 0.0
        load = max((W - 1) * max(f) * S, S if K < W else (1 - min(f)) * S)
        return 2 * (alpha + load * beta_worker)
    return 2 * (alpha + max(S * beta_worker, W * max(f) * S * b_s))


def central_storage(workers: int, S: float, alpha: float, beta: float) -> float:
    """Reduce to one device and broadcast back: 2 (alpha + (W-1) S beta)."""
    return 0.0 if workers < 2 else 2 * (alpha + (workers - 1) * S * beta)


def allreduce_lower_bound(p: int, S: float, alpha: float, beta: float) -> float:
    """No all-reduce on single-port ranks beats ceil(log2 p) alpha + 2(p-1)/p S beta
    (Patarasuk & Yuan 2009 for the bandwidth term; the latency term is a broadcast's)."""
    if p < 2:
        return 0.0
    return math.ceil(math.log2(p)) * alpha + 2 * (p - 1) / p * S * beta


def busbw(collective: str, p: int, S: float, seconds: float) -> float:
    """nccl-tests bus bandwidth: algbw = S/t times 2(p-1)/p (all-reduce) or (p-1)/p
    (reduce-scatter, all-gather) or 1 (broadcast, reduce)."""
    factor = {"allreduce": 2 * (p - 1) / p, "reduce_scatter": (p - 1) / p,
              "all_gather": (p - 1) / p}.get(collective, 1.0)
    return S / seconds * factor
