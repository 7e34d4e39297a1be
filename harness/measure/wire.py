"""Bytes on the wire, measured: each emulated host's interface counters around the timed steps.

Most strategies' ``bytes_sent_per_step`` is the exchange algorithm's count (a ring sends
2(n-1)/n of the gradient). What a framework really puts on the network can differ: a
parameter server that pulls whole variables where only rows were touched, a coordinator that
ships each step's batch, gRPC and TCP/IP headers. On emulated hosts every byte a host sends
crosses its one veth, so the kernel's counters for that interface are the wire.

The parent names every host's namespace and interface in ``STRATBENCH_WIRE`` (JSON); the
process that times the steps (rank 0, the chief) reads all hosts' counters (``ip -n NS -s
-j link show dev IF``: the ranks are root on emulated hosts) just before its first timed
step and just after its last, and reports bytes per timed step per host. Headers are
included: that is the wire.
"""

from __future__ import annotations

import json
import os
import subprocess

from harness.core.case import WorkerReport

ENV = "STRATBENCH_WIRE"


def links_from_env() -> list[tuple[str, str]]:
    """[(namespace, interface)] of every host, or [] off emulated hosts."""
    text = os.environ.get(ENV)
    if not text:
        return []
    return [(str(ns), str(iface)) for ns, iface in json.loads(text)]


def env_value(links: list[tuple[str, str]]) -> str:
    return json.dumps([list(link) for link in links])


def read(links: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """(transmitted, received) bytes of each host's interface so far."""
    out = []
    for ns, iface in links:
        text = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", iface],
                              capture_output=True, text=True, check=True, timeout=10).stdout
        stats = json.loads(text)[0]["stats64"]
        out.append((int(stats["tx"]["bytes"]), int(stats["rx"]["bytes"])))
    return out


class WireMeter:
    """Counters around a window of timed steps; inactive (and free) off emulated hosts and
    in every process but the one that times."""

    def __init__(self, active: bool) -> None:
        self.links = links_from_env() if active else []
        self.before: list[tuple[int, int]] | None = None
        self.after: list[tuple[int, int]] | None = None

    def start(self) -> None:
        if self.links:
            self.before = read(self.links)

    def stop(self) -> None:
        if self.links and self.before is not None:
            self.after = read(self.links)

    def report(self, steps: int) -> WorkerReport:
        """{'wire': {'tx_bytes_per_step': [per host], 'rx_bytes_per_step': [...]}} or {}."""
        if self.before is None or self.after is None or steps < 1:
            return {}
        tx = [(a[0] - b[0]) / steps for a, b in zip(self.after, self.before, strict=True)]
        rx = [(a[1] - b[1]) / steps for a, b in zip(self.after, self.before, strict=True)]
        return {"wire": {"tx_bytes_per_step": tx, "rx_bytes_per_step": rx, "steps": steps}}
