"""Emulated hosts: network namespaces behind a bridge, every link shaped with `tc tbf`.

On one machine loopback is so fast that every strategy looks alike; shaping each host's link
(both directions) to 100-800 Mbit/s makes the network the bottleneck, so gradient exchange
costs what it would between real hosts. Each host is a namespace with one veth to a bridge
in a "switch" namespace; addresses live only inside these namespaces.

Names carry a per-run prefix (`sbn<hex>`), so two runs never collide, teardown removes
exactly what a run made, and `stratbench cleanup` can find what a killed run left behind.
No shell strings: every command is an argv list.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from harness.core.clusters import rack_of

PREFIX = "sbn"
SUBNET = "10.77.0"  # /24 inside the run's own namespaces only
TIMEOUT_S = 30


class NetnsError(RuntimeError):
    """Building or tearing down emulated hosts failed; the message says which command."""


@dataclass(frozen=True)
class Host:
    index: int
    namespace: str
    address: str
    interface: str  # the host's end of its veth, inside its namespace

    def wrap(self, argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """The argv that runs `argv` on this host."""
        return ("ip", "netns", "exec", self.namespace, *argv)


@dataclass
class Cluster:
    run_tag: str
    rate_bits: float
    hosts: list[Host]
    switch: str  # the core switch: the only one, or the one the racks' uplinks meet at
    created: list[str] = field(default_factory=list)  # namespaces to delete on teardown
    racks: int = 1
    uplink_bits: float | None = None

    @property
    def spec_text(self) -> str:
        text = f"netns:hosts={len(self.hosts)},rate={self.rate_bits / 1e6:g}mbit"
        if self.racks > 1 and self.uplink_bits:
            text += f",racks={self.racks},uplink={self.uplink_bits / 1e6:g}mbit"
        return text

    def rack_of(self, host: int) -> int:
        return rack_of(host, len(self.hosts), self.racks)

    def crosses_racks(self, src: int, dst: int) -> bool:
        return self.rack_of(src) != self.rack_of(dst)

    def pair_bits(self, src: int, dst: int) -> float:
        """The rate a transfer from `src` to `dst` is shaped to: the hosts' links, or across
        racks the uplink where it is slower."""
        if self.uplink_bits is not None and self.crosses_racks(src, dst):
            return min(self.rate_bits, self.uplink_bits)
        return self.rate_bits


def unavailable_reason() -> str | None:
    """Why emulated hosts cannot be built here, or None."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "emulated hosts need root (network namespaces and tc); run as root or use " \
               "--cluster local"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found (Debian package iproute2)"
    return None


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def _in(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def tbf_burst(rate_bits: float) -> int:
    """A bucket of 1 ms of traffic (>= 16 KiB), bytes: enough to reach the rate, small enough
    that large messages feel the bandwidth. Smaller buckets lost the rate on this 2-core
    machine (at 800 Mbit/s: 25 KB measured 650-700 Mbit/s, 8 KiB 450, against 765 with 1 ms),
    so the bucket stays; runs record it (`burst_bytes` in the manifest's `networks`)."""
    return max(16 * 1024, int(rate_bits / 8 / 1000))


def tbf_args(rate_bits: float) -> list[str]:
    return ["tbf", "rate", f"{int(rate_bits)}bit", "burst", str(tbf_burst(rate_bits)),
            "latency", "100ms"]


def namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def leftovers() -> list[str]:
    """Namespaces of ours that no live run owns (every run deletes its own on exit)."""
    return [ns for ns in namespaces() if ns.startswith(PREFIX)]


def destroy(cluster: Cluster) -> None:
    """Delete every namespace the cluster made; veths and qdiscs go with them."""
    for ns in reversed(cluster.created):
        with contextlib.suppress(NetnsError):
            _run(["ip", "netns", "del", ns])
    cluster.created.clear()


def remove_leftovers() -> list[str]:
    removed = []
    for ns in leftovers():
        with contextlib.suppress(NetnsError):
            _run(["ip", "netns", "del", ns])
            removed.append(ns)
    return removed


def _switch(ns: str) -> None:
    """A namespace holding one bridge: a switch."""
    _run(["ip", "netns", "add", ns])
    _run(_in(ns, "ip", "link", "set", "lo", "up"))
    _run(_in(ns, "ip", "link", "add", "br0", "type", "bridge"))
    _run(_in(ns, "ip", "link", "set", "br0", "up"))


def _shaped_link(a_ns: str, a_if: str, b_ns: str, b_if: str, rate_bits: float,
                 a_bridged: bool) -> None:
    """A veth between two namespaces, shaped at both ends; the b end joins b's bridge (and
    the a end a's, for switch-to-switch uplinks)."""
    _run(["ip", "link", "add", a_if, "netns", a_ns, "type", "veth", "peer", "name", b_if,
          "netns", b_ns])
    for ns, interface, bridged in ((a_ns, a_if, a_bridged), (b_ns, b_if, True)):
        if bridged:
            _run(_in(ns, "ip", "link", "set", interface, "master", "br0"))
        _run(_in(ns, "ip", "link", "set", interface, "up"))
        _run(_in(ns, "tc", "qdisc", "add", "dev", interface, "root", *tbf_args(rate_bits)))


def create(hosts: int, rate_bits: float, racks: int = 1,
           uplink_bits: float | None = None) -> Cluster:
    """Build `hosts` namespaces on a bridge; shape both directions of every link. With
    racks > 1, hosts sit on rack switches whose uplinks to a core switch are shaped to
    `uplink_bits` (oversubscribed when below the hosts' total)."""
    why = unavailable_reason()
    if why:
        raise NetnsError(why)
    tag = PREFIX + secrets.token_hex(3)
    switch = f"{tag}-sw"
    two_level = racks > 1 and uplink_bits is not None
    cluster = Cluster(tag, rate_bits, [], switch, racks=racks if two_level else 1,
                      uplink_bits=uplink_bits if two_level else None)
    try:
        cluster.created.append(switch)
        _switch(switch)
        rack_switches = [switch]
        if two_level:
            assert uplink_bits is not None
            rack_switches = []
            for r in range(racks):
                rack = f"{tag}-r{r}"
                cluster.created.append(rack)
                _switch(rack)
                _shaped_link(rack, f"{tag}u{r}", switch, f"{tag}c{r}", uplink_bits,
                             a_bridged=True)
                rack_switches.append(rack)
        for i in range(hosts):
            ns, host_if = f"{tag}-h{i}", f"{tag}h{i}"
            _run(["ip", "netns", "add", ns])
            cluster.created.append(ns)
            _run(_in(ns, "ip", "link", "set", "lo", "up"))
            rack = rack_switches[rack_of(i, hosts, len(rack_switches))]
            _shaped_link(ns, host_if, rack, f"{tag}s{i}", rate_bits, a_bridged=False)
            address = f"{SUBNET}.{i + 1}"
            _run(_in(ns, "ip", "addr", "add", f"{address}/24", "dev", host_if))
            cluster.hosts.append(Host(i, ns, address, host_if))
    except BaseException:
        destroy(cluster)
        raise
    return cluster


@contextlib.contextmanager
def emulated(hosts: int, rate_bits: float, racks: int = 1,
             uplink_bits: float | None = None) -> Iterator[Cluster]:
    """A cluster that is torn down on success, error, timeout and Ctrl-C alike."""
    cluster = create(hosts, rate_bits, racks, uplink_bits)
    try:
        yield cluster
    finally:
        destroy(cluster)


@contextlib.contextmanager
def private_loopback() -> Iterator[Cluster]:
    """One host whose only interface is its own loopback, torn down on exit.

    TF's gRPC servers listen on every interface and TF has no option to bind one address;
    run inside this namespace, "every interface" is a loopback no other machine can reach.
    """
    why = unavailable_reason()
    if why:
        raise NetnsError(why)
    tag = PREFIX + secrets.token_hex(3)
    namespace = f"{tag}-lo"
    cluster = Cluster(tag, math.inf, [Host(0, namespace, "127.0.0.1", "lo")], namespace)
    try:
        _run(["ip", "netns", "add", namespace])
        cluster.created.append(namespace)
        _run(_in(namespace, "ip", "link", "set", "lo", "up"))
        yield cluster
    finally:
        destroy(cluster)


PROBE_SECONDS = 1.0
# a trial's bytes at most: an unshaped link (harness.core.clusters.UNSHAPED, 40 Gbit/s configured)
# would otherwise move 5 GB per trial; this machine's veth pairs carry 1 GiB in about 0.5 s
PROBE_MAX_BYTES = 2**30
PROBE_PORT = 29400


def measure_link(cluster: Cluster, src: int, dst: int) -> dict[str, float]:
    """TCP throughput and round-trip time from host `src` to host `dst` (plain sockets)."""
    import json
    import sys

    server_host, client_host = cluster.hosts[dst], cluster.hosts[src]
    configured = cluster.pair_bits(src, dst)  # a probe lasts PROBE_SECONDS across racks too
    nbytes = min(PROBE_MAX_BYTES, max(1 << 20, int(configured / 8 * PROBE_SECONDS)))
    server = subprocess.Popen(list(server_host.wrap([
        sys.executable, "-m", "harness.launch.linkprobe", "serve", server_host.address,
        str(PROBE_PORT)])), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        out = _run(list(client_host.wrap([
            sys.executable, "-m", "harness.launch.linkprobe", "client", server_host.address,
            str(PROBE_PORT), str(nbytes)])))
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        if server.poll() is None:
            server.kill()
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    result.update(src=src, dst=dst, configured_bits_s=configured)
    return result


def measure_links(cluster: Cluster) -> list[dict[str, float]]:
    """Each host to the next (a ring of pairs): every link is measured once per direction."""
    n = len(cluster.hosts)
    links = [measure_link(cluster, i, (i + 1) % n) for i in range(n)]
    if cluster.racks > 1:  # which pairs cross an uplink (their rate is the uplink's)
        for link in links:
            link["cross_rack"] = float(cluster.crosses_racks(int(link["src"]),
                                                             int(link["dst"])))
    return links
