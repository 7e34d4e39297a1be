"""The topology spec language of ``stratbench simulate --topology``.

Grammar (one line, no spaces needed)::

    SPEC    := KIND ":" OPTIONS | "preset:" NAME ["," OPTIONS]
    OPTIONS := KEY "=" VALUE ("," KEY "=" VALUE)*

    switch:n=16,bw=100Gbit,lat=5us
    ring:n=8,bw=25GB/s,lat=1us
    two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit,nic=per_device
    leaf_spine:hosts=32,gpus=8,hosts_per_leaf=8,intra=450GB/s,inter=400Gbit,oversub=2
    leaf_spine:hosts=5,leaves=3+2,inter=150Mbit,uplink=100Mbit
    torus:dims=4x4x4,bw=50GB/s,lat=1us
    preset:dgx_h100_ib,hosts=16

Bandwidths: a number, an optional prefix (k M G T decimal, Ki Mi Gi Ti binary) and a unit:
``bit``/``b``/``bps`` for bits or ``B``/``byte``/``Bps`` for bytes, optionally ``/s``
(``100Gbit``, ``25Gbps``, ``300GB/s``). Latencies: a number and ``s``, ``ms``, ``us``,
``µs`` or ``ns`` (a bare ``0`` is allowed). Every error is a :class:`SpecError`, one line,
naming the bad value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.core.errors import SpecError
from harness.core.units import (
    parse_bandwidth,
    parse_count,
    parse_duration,
    parse_options,
    parse_ratio,
)
from harness.sim.network.topology import (
    MAX_DEVICES,
    NIC_MODES,
    Hierarchy,
    LinkClass,
    Topology,
    TopologyError,
    Torus,
    hosts_per_leaf_text,
)


@dataclass(frozen=True)
class Option:
    """One ``key=value`` of a topology kind: what it means and its default ('' = required,
    None = optional without a default: its presence changes the reading)."""

    key: str
    meaning: str
    default: str | None = ""


@dataclass(frozen=True)
class Kind:
    """A topology kind of the grammar: the one home of its keys, their defaults and
    meanings, read by the parser and by docs/SYSTEMS.md."""

    name: str
    what: str
    example: str
    options: tuple[Option, ...]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.options if o.default == "")

    def value(self, given: dict[str, str], key: str) -> str:
        """The stated value, else the key's default."""
        (option,) = (o for o in self.options if o.key == key)
        return given.get(key, option.default or "")

    def check(self, given: dict[str, str]) -> None:
        allowed = tuple(o.key for o in self.options)
        for key in given:
            if key not in allowed:
                raise SpecError(f"unknown {self.name} option {key!r} (choose from "
                                f"{', '.join(allowed)})")
        for key in self.required:
            if key not in given:
                raise SpecError(f"{self.name} spec needs {key}= (options: {', '.join(allowed)})")


_BW = "bandwidth of each link, each way"
_INTRA = Option("intra", "the intra-host bandwidth per device, each way")
_INTER = Option("inter", "the scale-out bandwidth per device (per host with nic=shared)")
_NIC = Option("nic", "per_device (one NIC per device) or shared (one per host)", "per_device")
_INTRA_LAT = Option("intra_lat", "intra-host latency", "2us")
_INTER_LAT = Option("inter_lat", "scale-out latency", "5us")
SWITCH = Kind("switch", "n devices on one switch", "switch:n=16,bw=100Gbit,lat=5us",
              (Option("n", "devices"), Option("bw", _BW), Option("lat", "latency", "5us")))
RING = Kind("ring", "n devices in a ring", "ring:n=8,bw=25GB/s,lat=1us",
            (Option("n", "devices"), Option("bw", _BW), Option("lat", "latency", "1us")))
TORUS = Kind("torus", "a 1- to 4-dimensional torus of chips (a TPU slice)",
             "torus:dims=4x4x4,bw=50GB/s,lat=1us",
             (Option("dims", "chips per dimension, AxBxC"), Option("bw", _BW),
              Option("lat", "latency", "1us")))
TWO_LEVEL = Kind("two_level", "hosts of gpus devices: a scale-up domain per host, one switch "
                 "between hosts", "two_level:hosts=4,gpus=8,intra=450GB/s,inter=400Gbit",
                 (Option("hosts", "hosts"), Option("gpus", "devices per host"), _INTRA, _INTER,
                  _NIC, _INTRA_LAT, _INTER_LAT))
LEAF_SPINE = Kind(
    "leaf_spine", "hosts under leaf switches joined by a spine; racks even (hosts_per_leaf) "
    "or as built (leaves=3+2)",
    "leaf_spine:hosts=32,gpus=8,hosts_per_leaf=8,intra=450GB/s,inter=400Gbit,oversub=2",
    (Option("hosts", "hosts"), _INTER,
     Option("hosts_per_leaf", "hosts under each leaf (or leaves=)", None),
     Option("leaves", "hosts under each leaf as built, A+B+... (or hosts_per_leaf=)", None),
     Option("gpus", "devices per host", "1"),
     Option("intra", "the intra-host bandwidth per device (needed where gpus > 1)", None),
     Option("oversub", "a leaf's ports over its uplink (or uplink=)", "1"),
     Option("uplink", "a leaf's uplink bandwidth as built (or oversub=)", None),
     _NIC, _INTRA_LAT, _INTER_LAT, Option("spine_lat", "the spine's latency", "1us")))


def _switch(o: dict[str, str], spec: str) -> Topology:
    net = LinkClass("net", parse_bandwidth(o["bw"]), parse_duration(SWITCH.value(o, "lat")))
    return Hierarchy(devices=parse_count(o["n"], "n"), per_host=1, inter=net, spec=spec)


def _ring(o: dict[str, str], spec: str) -> Topology:
    link = LinkClass("ring", parse_bandwidth(o["bw"]), parse_duration(RING.value(o, "lat")))
    return Torus(dims=(parse_count(o["n"], "n"),), link=link, spec=spec)


def _torus(o: dict[str, str], spec: str) -> Topology:
    parts = o["dims"].lower().split("x")
    if len(parts) > 4:
        raise SpecError(f"torus dims={o['dims']!r} has more than 4 dimensions")
    dims = tuple(parse_count(p, "dims") for p in parts)
    if math.prod(dims) > MAX_DEVICES:
        raise SpecError(f"torus dims={o['dims']!r} has more than {MAX_DEVICES} chips")
    link = LinkClass("ici", parse_bandwidth(o["bw"]), parse_duration(TORUS.value(o, "lat")))
    return Torus(dims=dims, link=link, spec=spec)


def _nic(o: dict[str, str], kind: Kind) -> str:
    nic = kind.value(o, "nic")
    if nic not in NIC_MODES:
        raise SpecError(f"unknown {kind.name} nic={nic!r} (choose from {', '.join(NIC_MODES)})")
    return nic


def _two_level(o: dict[str, str], spec: str) -> Topology:
    hosts, gpus = parse_count(o["hosts"], "hosts"), parse_count(o["gpus"], "gpus", high=1024)
    if hosts * gpus > MAX_DEVICES:
        raise SpecError(f"two_level hosts*gpus = {hosts * gpus} exceeds {MAX_DEVICES}")
    intra = LinkClass("intra", parse_bandwidth(o["intra"]),
                      parse_duration(TWO_LEVEL.value(o, "intra_lat")))
    inter = LinkClass("inter", parse_bandwidth(o["inter"]),
                      parse_duration(TWO_LEVEL.value(o, "inter_lat")))
    return Hierarchy(devices=hosts * gpus, per_host=gpus, intra=intra, inter=inter,
                     nic=_nic(o, TWO_LEVEL), spec=spec)


def _leaf_spine(o: dict[str, str], spec: str) -> Topology:
    """Leaves of ``hosts_per_leaf`` hosts, or as ``leaves=3+2`` lists them (racks built
    unevenly); each leaf's uplink is its ports over ``oversub``, or ``uplink=`` as built."""
    hosts = parse_count(o["hosts"], "hosts")
    gpus = parse_count(LEAF_SPINE.value(o, "gpus"), "gpus", high=1024)
    if ("hosts_per_leaf" in o) == ("leaves" in o):
        raise SpecError("leaf_spine spec needs one of hosts_per_leaf=N or leaves=A+B+...")
    if "oversub" in o and "uplink" in o:
        raise SpecError("leaf_spine takes oversub= or uplink=, not both")
    leaf_hosts = tuple(parse_count(n, "leaves") for n in o.get("leaves", "").split("+") if n)
    if leaf_hosts and sum(leaf_hosts) != hosts:
        raise SpecError(f"leaf_spine leaves={o['leaves']} hold {sum(leaf_hosts)} hosts, "
                        f"not hosts={hosts}")
    per_leaf = parse_count(o["hosts_per_leaf"], "hosts_per_leaf") if not leaf_hosts else 0
    if hosts * gpus > MAX_DEVICES:
        raise SpecError(f"leaf_spine hosts*gpus = {hosts * gpus} exceeds {MAX_DEVICES}")
    if gpus > 1 and "intra" not in o:
        raise SpecError("leaf_spine with gpus > 1 needs intra= (the intra-host bandwidth)")
    nic = _nic(o, LEAF_SPINE)
    intra = LinkClass("intra", parse_bandwidth(o["intra"]),
                      parse_duration(LEAF_SPINE.value(o, "intra_lat"))) if gpus > 1 else None
    inter = LinkClass("inter", parse_bandwidth(o["inter"]),
                      parse_duration(LEAF_SPINE.value(o, "inter_lat")))
    if "uplink" in o:
        uplink = parse_bandwidth(o["uplink"])
    else:
        ports = (per_leaf or max(leaf_hosts)) * (gpus if nic == "per_device" else 1)
        uplink = ports * inter.bandwidth / parse_ratio(LEAF_SPINE.value(o, "oversub"),
                                                       "oversub")
    spine = LinkClass("spine", uplink, parse_duration(LEAF_SPINE.value(o, "spine_lat")))
    return Hierarchy(devices=hosts * gpus, per_host=gpus, intra=intra, inter=inter, nic=nic,
                     hosts_per_leaf=per_leaf, leaf_hosts=leaf_hosts, spine=spine, spec=spec)


GRAMMAR: tuple[Kind, ...] = (SWITCH, RING, TWO_LEVEL, LEAF_SPINE, TORUS)
_BUILD: dict[str, Callable[[dict[str, str], str], Topology]] = {
    "switch": _switch, "ring": _ring, "two_level": _two_level, "leaf_spine": _leaf_spine,
    "torus": _torus}
_KINDS = {kind.name: kind for kind in GRAMMAR}
KINDS = (*_KINDS, "preset")


def parse_topology(text: str) -> Topology:
    """Parse a topology spec (see the module docstring); raise SpecError on anything bad."""
    if not isinstance(text, str):
        raise SpecError(f"topology spec must be text, not {type(text).__name__}")
    spec = text.strip()
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind == "preset":
        name, _, overrides = rest.partition(",")
        return _preset(name.strip(), overrides, spec)
    if kind not in _KINDS:
        raise SpecError(f"unknown topology kind {kind!r} (choose from {', '.join(KINDS)})")
    options = parse_options(rest, kind)
    _KINDS[kind].check(options)
    try:
        return _BUILD[kind](options, spec)
    except TopologyError as exc:
        raise SpecError(f"topology {spec!r}: {exc}") from None


def _preset(name: str, overrides: str, spec: str) -> Topology:
    from harness.sim.systems.preset import load_preset

    preset = load_preset(name)
    base_kind, _, base_options = preset.spec.partition(":")
    options = parse_options(base_options, base_kind)
    options.update(parse_options(overrides, f"preset {name}"))
    text = base_kind + ":" + ",".join(f"{k}={v}" for k, v in options.items())
    try:
        return replace(parse_topology(text), spec=spec)
    except SpecError as exc:
        raise SpecError(f"{preset.path or 'preset ' + name}: {exc}") from None


def describe_topology(text: str) -> str:
    """How a spec was read, in the words a user checks it against: hosts, devices, and each
    link per device and per host (``inter`` is per device unless ``nic=shared``, which a
    user describing 25 GbE hosts may not expect)."""
    from harness.core.units import format_rate

    topology = parse_topology(text)
    kind, _, rest = text.strip().partition(":")
    lead = tail = ""
    if kind.strip() == "preset":
        from harness.sim.systems.preset import load_preset

        preset = load_preset(rest.partition(",")[0])
        lead = f"{preset.device.name}; "
        tail = f" ({preset.network_note})" if preset.network_note else ""
    if isinstance(topology, Torus):
        dims = "x".join(map(str, topology.dims))
        return (f"{lead}{dims} torus of {math.prod(topology.dims)} devices, "
                f"{format_rate(topology.link.bandwidth * 8)} per link each way")
    h = topology
    parts = [f"{h.hosts} host{'s' if h.hosts != 1 else ''} x {h.per_host} device"
             f"{'s' if h.per_host != 1 else ''}"]
    if h.intra is not None and h.per_host > 1:
        parts.append(f"intra {h.intra.bandwidth / 1e9:.4g} GB/s per device each way")
    per_host = h.inter.bandwidth * (h.per_host if h.nic == "per_device" else 1)
    if h.nic == "per_device":
        parts.append(f"inter={format_rate(h.inter.bandwidth * 8)} per device (nic=per_device):"
                     f" {format_rate(per_host * 8)} per host")
    else:
        parts.append(f"inter={format_rate(h.inter.bandwidth * 8)} per host, shared by its "
                     f"devices (nic=shared)")
    if h.spine is not None:
        parts.append(f"{hosts_per_leaf_text(h)} hosts per leaf, leaf uplink "
                     f"{format_rate(h.spine.bandwidth * 8)}")
    return lead + "; ".join(parts) + tail
