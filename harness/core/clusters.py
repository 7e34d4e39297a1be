"""The `--cluster` spec language (local, emulated hosts, Slurm) into a typed record.

Each returns a typed record or raises InputError with a one-line message that names the bad
value and what is allowed, so the CLI can answer with exit code 2 instead of a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.errors import InputError, choices_message
from harness.core.units import parse_kv, parse_rate_bits

CLUSTER_KINDS = ("local", "netns", "slurm")
NETNS_KEYS = ("hosts", "rate", "racks", "uplink")
MAX_NETNS_HOSTS = 16
# `rate=unshaped`: links keep their tbf qdisc, so packets take the same path as on shaped
# links, at a rate no veth pair on this kind of machine reaches (40 Gbit/s configured, 19.3
# measured): the cores, not the shaper, set the pace. What the library, the cores and the
# emulator cost with no bandwidth limit; `stratbench validate` takes it as the floor under
# the shaped runs' predictions.
UNSHAPED = "unshaped"
UNSHAPED_RATE_BITS = 40e9
SLURM_KEYS = ("partition", "nodes", "tasks-per-node", "account", "qos")
SLURM_DEFAULT_NODES = 2
MAX_SLURM_NODES = 4096


def rack_of(host: int, hosts: int, racks: int) -> int:
    """The rack an emulated host sits in: hosts fill racks in order, in blocks as even as the
    counts allow (5 hosts in 2 racks are 3 + 2, 7 in 3 are 3 + 2 + 2)."""
    return host * racks // hosts if hosts else 0


def rack_sizes(hosts: int, racks: int) -> tuple[int, ...]:
    """Hosts per rack, in rack order, as `rack_of` fills them."""
    sizes = [0] * max(1, racks)
    for host in range(hosts):
        sizes[rack_of(host, hosts, max(1, racks))] += 1
    return tuple(sizes)


def scheduled_racks(built: tuple[int, ...], hosts: int) -> tuple[int, ...]:
    """Hosts per rack of a job on ``hosts`` of a cluster whose racks hold ``built`` hosts:
    as a scheduler (and the emulator's host order) fills them, a rack before the next, so
    the job spans as few racks as it can; ValueError if the racks hold fewer hosts."""
    if hosts > sum(built):
        raise ValueError(f"{hosts} hosts do not fit racks of {'+'.join(map(str, built))}")
    filled: list[int] = []
    for size in built:
        if sum(filled) >= hosts:
            break
        filled.append(min(size, hosts - sum(filled)))
    return tuple(filled)


@dataclass(frozen=True)
class ClusterSpec:
    """Where cases run: this machine's processes, emulated hosts, or a Slurm allocation."""

    kind: str
    options: dict[str, str] = field(default_factory=dict)
    text: str = "local"

    @property
    def hosts(self) -> int:
        """Hosts the cases spread over: emulated hosts, or Slurm nodes (one replica each)."""
        if self.kind == "slurm":
            return int(self.options.get("nodes", SLURM_DEFAULT_NODES))
        return int(self.options.get("hosts", "1"))

    @property
    def racks(self) -> int:
        return int(self.options.get("racks", "1"))

    @property
    def uplink_bits(self) -> float | None:
        uplink = self.options.get("uplink")
        return parse_rate_bits(uplink) if uplink else None

    @property
    def unshaped(self) -> bool:
        return self.options.get("rate") == UNSHAPED

    @property
    def rate_bits(self) -> float | None:
        rate = self.options.get("rate")
        if self.unshaped:
            return UNSHAPED_RATE_BITS
        return parse_rate_bits(rate) if rate else None


def parse_cluster(text: str) -> ClusterSpec:
    kind, _, rest = text.strip().partition(":")
    if kind not in CLUSTER_KINDS:
        raise InputError(choices_message("cluster kind", kind, CLUSTER_KINDS))
    options = parse_kv(rest, f"{kind} cluster")
    if kind == "local" and options:
        raise InputError(f"cluster 'local' takes no options (got {rest!r})")
    if kind == "netns":
        if "latency" in options:
            raise InputError("netns latency= cannot be emulated here: tc netem (the only way "
                             "to add delay) is not available; links are shaped by rate only")
        unknown = sorted(set(options) - set(NETNS_KEYS))
        if unknown:
            raise InputError(choices_message("netns option", unknown[0], NETNS_KEYS))
        if "hosts" not in options or "rate" not in options:
            raise InputError(f"netns cluster {text!r} needs hosts=N and rate=RATE or "
                             f"rate={UNSHAPED} (e.g. netns:hosts=4,rate=400mbit)")
        hosts = options["hosts"]
        if not hosts.isdigit() or not 2 <= int(hosts) <= MAX_NETNS_HOSTS:
            raise InputError(f"netns hosts={hosts!r} must be an integer from 2 to "
                             f"{MAX_NETNS_HOSTS}")
        if options["rate"] != UNSHAPED:
            parse_rate_bits(options["rate"])
        if ("racks" in options) != ("uplink" in options):
            raise InputError(f"netns cluster {text!r}: racks=K and uplink=RATE go together "
                             "(e.g. netns:hosts=4,rate=800mbit,racks=2,uplink=200mbit)")
        if "racks" in options:
            racks = options["racks"]
            if not racks.isdigit() or not 2 <= int(racks) <= int(hosts):
                raise InputError(f"netns racks={racks!r} must be an integer from 2 to the "
                                 f"number of hosts ({hosts})")
            parse_rate_bits(options["uplink"])
    if kind == "slurm":
        unknown = sorted(set(options) - set(SLURM_KEYS))
        if unknown:
            raise InputError(choices_message("slurm option", unknown[0], SLURM_KEYS))
        for key, top in (("nodes", MAX_SLURM_NODES), ("tasks-per-node", 1024)):
            value = options.get(key, "1")
            if not value.isdigit() or not 1 <= int(value) <= top:
                raise InputError(f"slurm {key}={value!r} must be an integer from 1 to {top}")
        for key in ("partition", "account", "qos"):
            if key in options and not options[key].replace("-", "").replace("_", "").isalnum():
                raise InputError(f"slurm {key}={options[key]!r} must be letters, digits, "
                                 "'-' or '_'")
    return ClusterSpec(kind, options, text.strip())
