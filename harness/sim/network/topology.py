"""Topologies: devices, the links between them, and the route a message takes.

Two shapes cover the clusters stratbench is asked about:

* :class:`Hierarchy`: devices grouped in hosts on a fast intra-host fabric (NVLink/NVSwitch,
  modelled as a non-blocking switch with one full-duplex port per device), hosts on a network
  through one NIC per device or one shared NIC per host, and optionally leaves joined by a
  spine whose uplinks are oversubscribed. A single switch is a hierarchy of one-device hosts.
* :class:`Torus`: a k-dimensional torus of chips with one full-duplex link to each neighbour
  (TPU slices); a physical ring is a 1-D torus.

Every link is one direction of one cable or port; it belongs to a *link class* (``intra``,
``inter``, ``spine``, ``net``, ``ici``, ``ring``) that carries the bandwidth (bytes/s) and the
latency calibration talks about. Routes come in two implementations on purpose: ``route``
(vectorised, used by the fast engine) and ``path`` (plain Python, used by the detailed engine),
and a test checks they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from harness.core.units import MAX_DEVICES

#: Upper bound on the devices one topology may hold (keeps a typo from allocating gigabytes).

NIC_MODES = ("per_device", "shared")


class TopologyError(ValueError):
    """A topology that cannot do what was asked (e.g. dedicated servers on a torus)."""


@dataclass(frozen=True)
class LinkClass:
    """Links that share a calibration: bandwidth per link per direction, latency per message."""

    name: str
    bandwidth: float  # bytes/s, one direction of one link
    latency: float  # s, charged once to every message whose route enters this class


@dataclass(frozen=True)
class Hierarchy:
    """Hosts of ``per_host`` devices; hosts on a switch, or on leaves under a spine.

    ``servers`` extra single-device hosts (dedicated parameter servers) sit after the
    ``devices`` compute devices, each with one NIC of the ``inter`` class. ``spine.bandwidth``
    is the aggregate uplink of one leaf (its ports times the NIC rate over the oversubscription).
    Leaves hold ``hosts_per_leaf`` hosts each, or as many as ``leaf_hosts`` lists in host
    order (racks built unevenly, 3 + 2 hosts); dedicated server hosts, past those, fill
    further leaves of the largest size.
    """

    devices: int
    per_host: int
    inter: LinkClass
    intra: LinkClass | None = None
    nic: str = "per_device"
    hosts_per_leaf: int = 0
    spine: LinkClass | None = None
    leaf_hosts: tuple[int, ...] = ()
    servers: int = 0
    slow: tuple[tuple[int, float], ...] = ()
    spec: str = ""

    def __post_init__(self) -> None:
        if self.devices < 1 or self.per_host < 1 or self.devices % self.per_host:
            raise TopologyError(f"{self.devices} devices do not fill hosts of {self.per_host}")
        if self.per_host > 1 and self.intra is None:
            raise TopologyError("hosts of several devices need an intra-host link class")
        if self.nic not in NIC_MODES:
            raise TopologyError(f"unknown nic mode {self.nic!r} (choose from per_device, shared)")
        if self.devices + self.servers > MAX_DEVICES:
            raise TopologyError(f"{self.devices + self.servers} devices exceed {MAX_DEVICES}")
        if self.leaf_hosts and (min(self.leaf_hosts) < 1
                                or sum(self.leaf_hosts) != self.hosts):
            raise TopologyError(f"leaves of {'+'.join(map(str, self.leaf_hosts))} hosts do not"
                                f" hold the {self.hosts} hosts")

    @property
    def hosts(self) -> int:
        return self.devices // self.per_host


@dataclass(frozen=True)
class Torus:
    """A torus with ``dims`` chips per dimension; device id = x + X*(y + Y*z)."""

    dims: tuple[int, ...]
    link: LinkClass
    slow: tuple[tuple[int, float], ...] = ()
    spec: str = ""

    def __post_init__(self) -> None:
        if not self.dims or any(d < 1 for d in self.dims):
            raise TopologyError(f"bad torus dims {self.dims}")
        if math.prod(self.dims) > MAX_DEVICES:
            raise TopologyError(f"{math.prod(self.dims)} devices exceed {MAX_DEVICES}")


Topology = Hierarchy | Torus


@dataclass(frozen=True, eq=False)
class LinkTable:
    """Every link of a topology: capacity (bytes/s) and class index, by link id."""

    capacity: np.ndarray
    klass: np.ndarray
    class_names: tuple[str, ...]

    def class_capacity(self) -> dict[str, float]:
        """Total capacity per class: the denominator of link utilisation."""
        sums = np.bincount(self.klass, weights=self.capacity, minlength=len(self.class_names))
        return {name: float(sums[i]) for i, name in enumerate(self.class_names)}


@dataclass(frozen=True, eq=False)
class Routes:
    """Routes of F messages: link ids (F x L, padded with -1) and latency (F,)."""

    links: np.ndarray
    latency: np.ndarray


# ---------------------------------------------------------------- shape helpers


def n_devices(topo: Topology) -> int:
    if isinstance(topo, Hierarchy):
        return topo.devices + topo.servers
    return math.prod(topo.dims)


def link_classes(topo: Topology) -> tuple[LinkClass, ...]:
    """The classes this topology uses, in link-id order."""
    if isinstance(topo, Torus):
        return (topo.link,)
    out = [c for c in (topo.intra if topo.per_host > 1 else None, topo.inter) if c is not None]
    if _leaves(topo) > 1 and topo.spine is not None:
        out.append(topo.spine)
    return tuple(out)


def describe(topo: Topology) -> str:
    """One line for humans: shape and classes."""
    classes = ", ".join(f"{c.name} {c.bandwidth / 1e9:g} GB/s {c.latency * 1e6:g} us"
                        for c in link_classes(topo))
    if isinstance(topo, Torus):
        shape = "torus " + "x".join(map(str, topo.dims))
    else:
        shape = f"{topo.hosts} hosts x {topo.per_host} devices, nic={topo.nic}"
        if _leaves(topo) > 1:
            shape += f", {_leaves(topo)} leaves of {hosts_per_leaf_text(topo)} hosts"
        if topo.servers:
            shape += f", {topo.servers} server hosts"
    return f"{shape} ({classes})"


def _worker_nics(t: Hierarchy) -> int:
    return t.devices if t.nic == "per_device" else t.hosts


def _leaves(t: Hierarchy) -> int:
    return int(leaf_of_host(t)[-1]) + 1


@lru_cache(maxsize=64)
def leaf_of_host(t: Hierarchy) -> np.ndarray:
    """The leaf of every host: the compute hosts in order, then the server hosts."""
    sizes = list(t.leaf_hosts)
    step = max(sizes) if sizes else t.hosts_per_leaf
    total = t.hosts + t.servers
    if step <= 0:
        return np.zeros(total, dtype=np.int64)
    while sum(sizes) < total:
        sizes.append(step)
    return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)[:total]


def leaf_sizes(t: Hierarchy) -> tuple[int, ...]:
    """Hosts per leaf, in order (server hosts counted where they sit)."""
    return tuple(int(n) for n in np.bincount(leaf_of_host(t)))


def hosts_per_leaf_text(t: Hierarchy) -> str:
    """Hosts per leaf as a user reads them: ``8``, or ``3+2`` where the leaves differ."""
    sizes = leaf_sizes(t)
    return str(sizes[0]) if len(set(sizes)) == 1 else "+".join(map(str, sizes))


def _offsets(t: Hierarchy) -> tuple[int, int, int, int]:
    """(first NIC link, number of NICs, first leaf link, number of leaves)."""
    off_nic = 2 * t.devices if t.per_host > 1 else 0
    nics = _worker_nics(t) + t.servers
    return off_nic, nics, off_nic + 2 * nics, _leaves(t)


# ---------------------------------------------------------------- links


@lru_cache(maxsize=64)
def link_table(topo: Topology) -> LinkTable:
    """Capacities and classes of every link (cached: topologies are immutable)."""
    if isinstance(topo, Torus):
        n, k = math.prod(topo.dims), len(topo.dims)
        cap = np.full(n * 2 * k, topo.link.bandwidth, dtype=float)
        for device, factor in topo.slow:
            for link in _torus_device_links(topo, device):
                cap[link] /= factor
        return LinkTable(cap, np.zeros(cap.size, dtype=np.int64), (topo.link.name,))
    t = topo
    names = [c.name for c in link_classes(t)]
    caps: list[np.ndarray] = []
    kls: list[np.ndarray] = []
    if t.per_host > 1:
        assert t.intra is not None
        caps.append(np.full(2 * t.devices, t.intra.bandwidth))
        kls.append(np.full(2 * t.devices, names.index(t.intra.name)))
    _, nics, _, leaves = _offsets(t)
    caps.append(np.full(2 * nics, t.inter.bandwidth))
    kls.append(np.full(2 * nics, names.index(t.inter.name)))
    if leaves > 1 and t.spine is not None:
        caps.append(np.full(2 * leaves, t.spine.bandwidth))
        kls.append(np.full(2 * leaves, names.index(t.spine.name)))
    cap = np.concatenate(caps).astype(float)
    for device, factor in t.slow:
        for link in _hier_device_links(t, device):
            cap[link] /= factor
    return LinkTable(cap, np.concatenate(kls).astype(np.int64), tuple(names))


def _hier_device_links(t: Hierarchy, d: int) -> list[int]:
    """The links a device owns: its intra ports and, where it has one to itself, its NIC."""
    off_nic, nics, _, _ = _offsets(t)
    out = [d, t.devices + d] if t.per_host > 1 and d < t.devices else []
    if d >= t.devices or t.nic == "per_device":
        nic = _nic_scalar(t, d)
        out += [off_nic + nic, off_nic + nics + nic]
    return out


def _torus_device_links(t: Torus, d: int) -> list[int]:
    k = len(t.dims)
    coords = _coords_scalar(t.dims, d)
    out = [d * 2 * k + j for j in range(2 * k)]
    for i, size in enumerate(t.dims):
        for direction, step in ((0, -1), (1, 1)):  # neighbours whose link points at d
            c = list(coords)
            c[i] = (c[i] + step) % size
            out.append(_linear_scalar(t.dims, c) * 2 * k + 2 * i + direction)
    return sorted(set(out))


# ---------------------------------------------------------------- routing, vectorised


def route(topo: Topology, src: np.ndarray, dst: np.ndarray) -> Routes:
    """Routes for many messages at once (src != dst); the fast engine's hot path."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if isinstance(topo, Torus):
        return _route_torus(topo, src, dst)
    return _route_hierarchy(topo, src, dst)


def _host(t: Hierarchy, d: np.ndarray) -> np.ndarray:
    return np.where(d < t.devices, d // t.per_host, t.hosts + (d - t.devices))


def _nic(t: Hierarchy, d: np.ndarray) -> np.ndarray:
    worker = d if t.nic == "per_device" else d // t.per_host
    return np.where(d < t.devices, worker, _worker_nics(t) + (d - t.devices))


def _route_hierarchy(t: Hierarchy, src: np.ndarray, dst: np.ndarray) -> Routes:
    off_nic, nics, off_leaf, leaves = _offsets(t)
    links = np.full((src.size, 4), -1, dtype=np.int64)
    latency = np.full(src.size, t.inter.latency)
    hs, hd = _host(t, src), _host(t, dst)
    local = hs == hd
    if t.per_host > 1 and local.any():
        assert t.intra is not None
        links[local, 0] = src[local]
        links[local, 1] = t.devices + dst[local]
        latency[local] = t.intra.latency
    far = ~local
    links[far, 0] = off_nic + _nic(t, src[far])
    links[far, 1] = off_nic + nics + _nic(t, dst[far])
    if leaves > 1 and t.spine is not None:
        leaf = leaf_of_host(t)
        ls, ld = leaf[hs], leaf[hd]
        cross = far & (ls != ld)
        links[cross, 2] = off_leaf + ls[cross]
        links[cross, 3] = off_leaf + leaves + ld[cross]
        latency[cross] += t.spine.latency
    return Routes(links, latency)


def _route_torus(t: Torus, src: np.ndarray, dst: np.ndarray) -> Routes:
    dims = np.asarray(t.dims, dtype=np.int64)
    k = dims.size
    cur = _coords(dims, src)
    target = _coords(dims, dst)
    width = max(1, int(sum(d // 2 for d in t.dims)))
    links = np.full((src.size, width), -1, dtype=np.int64)
    col = np.zeros(src.size, dtype=np.int64)
    total = np.zeros(src.size, dtype=np.int64)
    for i, size in enumerate(t.dims):
        delta = (target[:, i] - cur[:, i]) % size
        forward = delta <= size - delta
        hops = np.where(forward, delta, size - delta)
        total += hops
        step = np.where(forward, 1, -1)
        for h in range(size // 2):
            m = hops > h
            if not m.any():
                break
            node = _linear(dims, cur[m])
            links[m, col[m]] = node * 2 * k + 2 * i + np.where(forward[m], 0, 1)
            col[m] += 1
            cur[m, i] = (cur[m, i] + step[m]) % size
    return Routes(links, total * t.link.latency)


def _coords(dims: np.ndarray, d: np.ndarray) -> np.ndarray:
    out = np.empty((d.size, dims.size), dtype=np.int64)
    rest = d.copy()
    for i, size in enumerate(dims):
        out[:, i] = rest % size
        rest //= size
    return out


def _linear(dims: np.ndarray, coords: np.ndarray) -> np.ndarray:
    out = np.zeros(coords.shape[0], dtype=np.int64)
    for i in range(dims.size - 1, -1, -1):
        out = out * dims[i] + coords[:, i]
    return out


# ---------------------------------------------------------------- routing, one message


def path(topo: Topology, a: int, b: int) -> tuple[tuple[int, ...], float]:
    """The links and latency of one message, in plain Python (the detailed engine's route)."""
    if isinstance(topo, Torus):
        return _path_torus(topo, a, b)
    t = topo
    host_a = a // t.per_host if a < t.devices else t.hosts + a - t.devices
    host_b = b // t.per_host if b < t.devices else t.hosts + b - t.devices
    if host_a == host_b and t.per_host > 1:
        assert t.intra is not None
        return (a, t.devices + b), t.intra.latency
    off_nic, nics, off_leaf, leaves = _offsets(t)
    links = [off_nic + _nic_scalar(t, a), off_nic + nics + _nic_scalar(t, b)]
    latency = t.inter.latency
    if leaves > 1 and t.spine is not None:
        leaf = leaf_of_host(t)
        leaf_a, leaf_b = int(leaf[host_a]), int(leaf[host_b])
        if leaf_a != leaf_b:
            links += [off_leaf + leaf_a, off_leaf + leaves + leaf_b]
            latency += t.spine.latency
    return tuple(links), latency


def loop_path(topo: Topology, d: int) -> tuple[tuple[int, ...], float]:
    """A message from a device out through its NIC to its switch and back: how a
    representative reaches the others it stands for (a mean-field reduction); no links on a
    torus, which has no switch to turn at."""
    if isinstance(topo, Torus):
        return (), 0.0
    off_nic, nics, _, _ = _offsets(topo)
    nic = _nic_scalar(topo, d)
    return (off_nic + nic, off_nic + nics + nic), topo.inter.latency


def _nic_scalar(t: Hierarchy, d: int) -> int:
    if d >= t.devices:
        return _worker_nics(t) + d - t.devices
    return d if t.nic == "per_device" else d // t.per_host


def _coords_scalar(dims: tuple[int, ...], d: int) -> list[int]:
    out = []
    for size in dims:
        out.append(d % size)
        d //= size
    return out


def _linear_scalar(dims: tuple[int, ...], coords: list[int]) -> int:
    out = 0
    for size, c in zip(reversed(dims), reversed(coords), strict=True):
        out = out * size + c
    return out


def _path_torus(t: Torus, a: int, b: int) -> tuple[tuple[int, ...], float]:
    k = len(t.dims)
    cur, target = _coords_scalar(t.dims, a), _coords_scalar(t.dims, b)
    links: list[int] = []
    for i, size in enumerate(t.dims):
        delta = (target[i] - cur[i]) % size
        forward = delta <= size - delta
        for _ in range(delta if forward else size - delta):
            links.append(_linear_scalar(t.dims, cur) * 2 * k + 2 * i + (0 if forward else 1))
            cur[i] = (cur[i] + (1 if forward else -1)) % size
    return tuple(links), len(links) * t.link.latency


# ---------------------------------------------------------------- derived topologies


def with_classes(topo: Topology, overrides: dict[str, tuple[float, float]]) -> Topology:
    """Replace (bandwidth, latency) of the named classes; names this topology lacks are ignored."""

    def fix(c: LinkClass | None) -> LinkClass | None:
        if c is None or c.name not in overrides:
            return c
        bandwidth, latency = overrides[c.name]
        return LinkClass(c.name, bandwidth, latency)

    if isinstance(topo, Torus):
        link = fix(topo.link)
        assert link is not None
        return replace(topo, link=link)
    inter = fix(topo.inter)
    assert inter is not None
    return replace(topo, intra=fix(topo.intra), inter=inter, spine=fix(topo.spine))


def degrade(topo: Topology, device: int, factor: float) -> Topology:
    """The same topology with one device's own links ``factor`` times slower (a straggler)."""
    if not factor >= 1:
        raise TopologyError(f"slow-down factor {factor} must be >= 1")
    return rescale_device(topo, device, factor)


def rescale_device(topo: Topology, device: int, factor: float) -> Topology:
    """One device's own links ``factor`` times slower, or faster where ``factor`` < 1: a
    representative that stands for a share of several devices' traffic (a mean-field
    reduction) carries it at their links' combined rate over the devices it stands for."""
    if not 0 <= device < n_devices(topo):
        raise TopologyError(f"device {device} not in 0..{n_devices(topo) - 1}")
    if not (math.isfinite(factor) and factor > 0):
        raise TopologyError(f"link scale factor {factor} must be a positive number")
    return replace(topo, slow=(*topo.slow, (device, float(factor))))


def with_servers(topo: Topology, servers: int) -> Hierarchy:
    """Add dedicated single-NIC server hosts (parameter servers) to a switched topology."""
    if not isinstance(topo, Hierarchy):
        raise TopologyError("dedicated parameter servers need a switched topology, not a torus")
    return replace(topo, servers=topo.servers + servers)


def scale_bandwidth(topo: Topology, factor: float, only: str | None = None) -> Topology:
    """Every class (or only the named one) ``factor`` times faster; latencies unchanged."""
    return with_classes(topo, {c.name: (c.bandwidth * factor, c.latency)
                               for c in link_classes(topo) if only in (None, c.name)})
