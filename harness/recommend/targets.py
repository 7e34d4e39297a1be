"""What `recommend --target` accepts: any cluster a user can name, as one typed record.

- ``local``: this machine as measured.
- ``netns:hosts=N,rate=R[,racks=K,uplink=U]``: emulated hosts; measured where they were run,
  else predicted from this machine's calibration with the rules `validate` checks.
- ``slurm[:nodes=N,...]``: a Slurm allocation; measured where it was run.
- every topology spec `simulate` takes (``switch:``, ``ring:``, ``two_level:``,
  ``leaf_spine:``, ``torus:``, ``preset:NAME[,hosts=1|4|16]``): simulated at a sweep of
  device counts (1, 2, 4, ... up to its size; whole hosts beyond one host).

A preset's ``hosts=1|16`` still expands into one target per host count, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.clusters import CLUSTER_KINDS
from harness.core.errors import InputError
from harness.sim.systems.spec import KINDS

TOPOLOGY_KINDS = KINDS  # the topology grammar's (harness.sim.systems.spec)


@dataclass(frozen=True)
class Target:
    """One cluster to recommend for.

    kind: measured (local) | emulated (netns) | slurm | topology (a spec, presets included).
    devices: the devices it has (topology targets; emulated and Slurm: hosts or nodes).
    per_host: devices per host, so that device counts beyond one host are whole hosts.
    """

    kind: str
    spec: str
    devices: int = 0
    per_host: int = 1

    @property
    def label(self) -> str:
        return self.spec

    @property
    def is_preset(self) -> bool:
        return self.spec.startswith("preset:")

    @property
    def preset_name(self) -> str | None:
        return self.spec[len("preset:"):].split(",")[0] if self.is_preset else None


def parse_targets(specs: Sequence[str]) -> list[Target]:
    """Each spec into its targets; one clear InputError for anything unknown or bad."""
    out: list[Target] = []
    for raw in specs:
        spec = raw.strip()
        kind = spec.partition(":")[0].strip()
        if kind in CLUSTER_KINDS:
            out.append(_cluster_target(spec))
        elif kind in TOPOLOGY_KINDS:
            out += _topology_targets(spec)
        else:
            raise InputError(f"unknown target {spec!r} (give local, netns:..., slurm:..., "
                             f"or a topology: {', '.join(TOPOLOGY_KINDS)}, e.g. "
                             f"two_level:hosts=6,gpus=4,intra=300GB/s,inter=25Gbit)")
    return out


def _cluster_target(spec: str) -> Target:
    from harness.core.clusters import parse_cluster

    cluster = parse_cluster(spec)
    if cluster.kind == "local":
        return Target("measured", "local", devices=1)
    return Target("emulated" if cluster.kind == "netns" else "slurm", cluster.text,
                  devices=cluster.hosts)


def _topology_targets(spec: str) -> list[Target]:
    from harness.core.errors import SpecError
    from harness.sim.network.topology import Hierarchy, n_devices
    from harness.sim.systems.spec import parse_topology

    variants = [spec]
    if spec.startswith("preset:"):
        name, _, rest = spec[len("preset:"):].partition(",")
        options = [o for o in rest.split(",") if o]
        hosts = [o for o in options if o.startswith("hosts=")]
        others = [o for o in options if not o.startswith("hosts=")]
        counts = hosts[0][len("hosts="):].split("|") if hosts else [""]
        variants = [",".join([f"preset:{name}", *([f"hosts={c}"] if c else []), *others])
                    for c in counts]
    out = []
    for text in variants:
        try:
            topology = parse_topology(text)
        except (SpecError, ValueError) as exc:
            raise InputError(f"bad target {spec!r}: {exc}") from None
        # a torus's devices of one ring (device ids run along its first dimension): where
        # a tensor-parallel group stays on neighbouring links, as a host's does on NVLink
        per_host = (topology.per_host if isinstance(topology, Hierarchy)
                    else topology.dims[0])
        out.append(Target("topology", text, devices=n_devices(topology), per_host=per_host))
    return out


def device_kind(target: Target, device: str | None = None) -> str:
    """What the target's devices are: cpu (this machine, its emulated hosts, Slurm nodes as
    run here), tpu (a torus, or a preset or ``device`` preset whose device is a TPU), else
    gpu; what decides which framework strategies can run a simulated answer."""
    from harness.sim.systems.preset import load_preset

    if target.kind != "topology":
        return "cpu"
    name = device or target.preset_name
    if name is not None:
        return load_preset(name).device.kind
    return "tpu" if target.spec.strip().startswith("torus:") else "gpu"


def device_counts(target: Target) -> list[int]:
    """1, 2, 4, ... within a host, then whole hosts (1, 2, 4, ... hosts), and the whole
    target: the counts a user would actually rent."""
    if target.devices <= 1:
        return [1]
    counts = {1, target.devices}
    n = 1
    while n < min(target.per_host, target.devices):
        counts.add(n)
        n *= 2
    hosts = target.devices // target.per_host
    h = 1
    while h <= hosts:
        counts.add(h * target.per_host)
        h *= 2
    return sorted(c for c in counts if c <= target.devices)
