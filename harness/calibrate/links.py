"""Emulated hosts' links as probed (or as a spec states them), and the simulator's topology
of them: what every prediction of an emulated cluster starts from."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from statistics import median
from typing import Any

from harness.core.clusters import (
    UNSHAPED_RATE_BITS,
    parse_cluster,
    rack_sizes,
    scheduled_racks,
)
from harness.core.errors import InputError
from results.store import ResultsStore


@dataclass(frozen=True)
class MeasuredLinks:
    """Emulated hosts' links: as the link probe measured them before a run (medians over
    links), or, for a cluster never run, as its spec states them (`source` says which), for a
    job on ``hosts`` of the cluster's hosts.

    The racks a job spans are computed from the cluster as built (``built``), never stored:
    a record cannot describe other hosts than it holds, and placing it again on another
    host count starts from the cluster, not from an earlier placement."""

    hosts: int  # the hosts the job spans, one replica each
    bandwidth_bytes_s: float  # a host's link (within its rack, where there are racks)
    rtt_s: float
    burst_bytes: float  # the links' tc tbf bucket; 0 where the run did not record it
    source: str = "probe"
    # racks=K,uplink=RATE clusters: hosts in K racks whose switches meet at a core through
    # shaped uplinks; one flow across racks as probed, and its round trip
    uplink_bytes_s: float = 0.0
    rack_rtt_s: float = 0.0
    # hosts per rack of the whole cluster in rack order, as the emulator built it
    # (core.clusters.rack_sizes); () where the hosts share one switch
    built: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.hosts < 1 or any(n < 1 for n in self.built) or (
                self.built and self.hosts > sum(self.built)):
            raise ValueError(f"links for {self.hosts} hosts of a cluster built as racks of "
                             f"{'+'.join(map(str, self.built)) or 'one switch'}")

    @property
    def hosts_per_rack(self) -> tuple[int, ...]:
        """The racks the job's hosts fill, in rack order, as a scheduler places them."""
        return scheduled_racks(self.built, self.hosts) if self.built else (self.hosts,)

    @property
    def racks(self) -> int:
        """How many racks the job spans."""
        return len(self.hosts_per_rack)

    @property
    def bucket_s(self) -> float:
        """How long the bucket's bytes take at the link's rate."""
        return self.burst_bytes / self.bandwidth_bytes_s



def built_racks(cluster: str) -> tuple[int, ...]:
    """Hosts per rack of an emulated cluster as its spec builds it; () for one switch."""
    spec = parse_cluster(cluster)
    return rack_sizes(spec.hosts, spec.racks) if spec.racks > 1 else ()


def placed(links: MeasuredLinks, hosts: int) -> MeasuredLinks:
    """The links of ``hosts`` of the cluster's hosts as a scheduler would give them: a rack
    filled before the next is opened, so a job that fits in one rack never crosses an
    uplink, and a larger one spans as few racks as it can, each keeping its uplink."""
    return dataclasses.replace(links, hosts=hosts)


def as_swept(links: MeasuredLinks, cluster: str, ranks: int) -> MeasuredLinks:
    """These links' rates on the cluster a collective was swept on (``cluster``, one rank a
    host), at its ``ranks``: what the sweep crossed, whichever job ``links`` were placed
    for. A racked record takes the swept cluster's racks; a flat one stays flat."""
    return dataclasses.replace(links, hosts=ranks,
                               built=built_racks(cluster) if links.built else ())


def emulated_topology(links: MeasuredLinks, software: tuple[float, float] = (0.0, 0.0),
                      trips: int = 1) -> str:
    """The topology the emulated hosts were built as, with the measured links: one switch,
    or, for racked clusters, leaves (racks) under a core whose uplinks carry the probed
    cross-rack rate, racks even or not as the emulator filled them (5 hosts in 2 racks are
    3 + 2). Latency is `trips` one-way crossings (RTT/2 each) plus the software's
    alpha per message; the bandwidth is slowed by a per-byte software cost beta where that
    cost is serial (1/bw' = 1/bw + beta)."""
    alpha, beta = software
    bw = 1.0 / (1.0 / links.bandwidth_bytes_s + beta)
    lat = links.rtt_s / 2 * trips + alpha
    if links.racks > 1 and links.uplink_bytes_s > 0:
        uplink = 1.0 / (1.0 / links.uplink_bytes_s + beta)
        spine_lat = max(0.0, (links.rack_rtt_s - links.rtt_s) / 2 * trips)
        leaves = "+".join(map(str, links.hosts_per_rack))
        return (f"leaf_spine:hosts={links.hosts},leaves={leaves},inter={bw * 8:.0f}bit,"
                f"inter_lat={lat * 1e6:.1f}us,uplink={uplink * 8:.0f}bit,"
                f"spine_lat={spine_lat * 1e6:.1f}us")
    return f"switch:n={links.hosts},bw={bw * 8:.0f}bit,lat={lat * 1e6:.1f}us"



def bottleneck_bits(links: MeasuredLinks) -> float:
    """The slowest link a step's traffic crosses, bits/s: the uplink of a racked cluster."""
    if links.racks > 1 and links.uplink_bytes_s > 0:
        return 8 * min(links.bandwidth_bytes_s, links.uplink_bytes_s)
    return 8 * links.bandwidth_bytes_s


def measured_links(store: ResultsStore, run_id: str, cluster: str) -> MeasuredLinks | None:
    """The run's probed links on `cluster`; None if it measured none. On a racked cluster
    the probes that crossed racks (`cross_rack`) give the uplink's rate and round trip."""
    manifest = store.manifest(run_id) or {}
    for network in manifest.get("networks", []):
        if network.get("cluster") == cluster and network.get("links"):
            return links_from_probes(cluster, network["links"],
                                     float(network.get("burst_bytes", 0.0)))
    return None



def links_from_probes(cluster: str, links: list[dict[str, float]], burst: float,
                      source: str = "probe") -> MeasuredLinks:
    spec = parse_cluster(cluster)
    across = [link for link in links if link.get("cross_rack")]
    within = [link for link in links if not link.get("cross_rack")] or links
    racked = spec.racks > 1 and bool(across)
    return MeasuredLinks(
        hosts=spec.hosts,
        bandwidth_bytes_s=median(link["throughput_bits_s"] for link in within) / 8,
        rtt_s=median(link["rtt_median_s"] for link in within), burst_bytes=burst,
        source=source, built=built_racks(cluster) if racked else (),
        uplink_bytes_s=median(link["throughput_bits_s"] for link in across) / 8
        if racked else 0.0,
        rack_rtt_s=median(link["rtt_median_s"] for link in across) if racked else 0.0)



def measured_topology(store: ResultsStore, run_id: str, cluster: str,
                      software: tuple[float, float] = (0.0, 0.0), trips: int = 1
                      ) -> str | None:
    """emulated_topology() of the run's measured links; None if the run measured none."""
    links = measured_links(store, run_id, cluster)
    return None if links is None else emulated_topology(links, software, trips)


def probed_networks(store: Any) -> list[dict[str, Any]]:
    """The link probes every emulated run of ``store`` recorded (its manifests)."""
    return [network for run_id in store.run_ids()
            for network in (store.manifest(run_id) or {}).get("networks", []) or []]


def links_of_cluster(networks: list[dict[str, Any]], cluster: str) -> MeasuredLinks:
    """An emulated cluster's links as this machine's link probes (``networks``, from the runs'
    manifests) saw them: probes of the same cluster, else of clusters at the same rate, else
    the spec's rate times the fraction of it every probe reached (the shaper's own overhead),
    and the probes' round-trip time (the emulated path's, whatever the rate). A racked
    cluster never probed gets its uplink the same way, from its spec."""
    spec = parse_cluster(cluster)
    rate = spec.rate_bits or math.nan

    def links_of(pred: Any) -> list[dict[str, float]]:  # launch.netns.measure_links
        return [link for net in networks if pred(net) for link in net.get("links", [])]

    def same_rate(net: dict[str, Any]) -> bool:
        try:
            other = parse_cluster(net.get("cluster", ""))
        except InputError:
            return False
        return other.unshaped == spec.unshaped and (spec.unshaped or other.rate_bits == rate)

    burst = median(float(net.get("burst_bytes", 0.0)) for net in networks) \
        if networks else 0.0
    exact = links_of(lambda net: net.get("cluster") == cluster)
    if exact:
        return links_from_probes(cluster, exact, burst, "probe of this cluster")
    similar = [link for link in links_of(same_rate) if not link.get("cross_rack")]
    every = links_of(lambda net: True)
    rtt = median(link["rtt_median_s"] for link in every) if every else 0.0
    shaped = [link for link in every if link.get("configured_bits_s")
              and link["configured_bits_s"] < UNSHAPED_RATE_BITS]
    reach = median(link["throughput_bits_s"] / link["configured_bits_s"]
                   for link in shaped) if shaped and not spec.unshaped else 1.0
    if similar:
        bandwidth = median(link["throughput_bits_s"] for link in similar) / 8
        source = "probe of a cluster at this rate"
    else:
        bandwidth = rate * reach / 8
        source = (f"spec rate x {reach:.2f} (what probes here reached)" if shaped
                  else "spec rate")
    uplink = (spec.uplink_bits or 0.0) * reach / 8 if spec.racks > 1 else 0.0
    return MeasuredLinks(spec.hosts, bandwidth, rtt, burst, source=source,
                         built=built_racks(cluster) if uplink else (),
                         uplink_bytes_s=uplink,
                         rack_rtt_s=rtt)
