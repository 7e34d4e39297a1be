"""A framework's training step on emulated hosts, predicted from calibration alone.

One function for the two questions that need it: `stratbench validate` predicts each
measured emulated run and stores the error; `stratbench recommend` predicts an emulated
cluster that was never run (same rules, this machine's calibration), so that a ranking of
real strategies exists before any run and its error is the validated one. Keeping the rules
here, not in either caller, is what keeps validate and recommend from importing each other.

The rules, measured on this machine (docs/SIMULATOR.md):
- the links as the link probe measured them (bandwidth, RTT/2 per one-way crossing);
- the library's own cost per message (alpha) and, for libraries whose work leaves the link
  idle (TF's collectives), per byte (beta): the loopback all-reduce fit at the run's rank
  count (the nearest swept);
- gloo's rendezvous costs a round trip per ring step (LATENCY_TRIPS);
- compute is the one-replica step of the same framework on one core (its CPU time), slowed
  where the emulated hosts' processes oversell the machine's cores;
- each synchronous strategy's own time per step beyond the model, from its local runs;
- parameter servers as the run or the runners lay them out (shards, which workers' hosts
  the servers share).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.calibrate.workload import replica_compute_s

# Libraries whose own cost adds to the wire's rather than hiding under it. Measured on
# emulated hosts at 100 Mbit/s (2 and 4 hosts, 256 KiB-4 MiB): TF's gRPC ring all-reduce and
# all-gather took their wire time plus their loopback time (errors -10..-47% with the larger
# of the two, -8..+3% with the sum); gloo took the larger of the two (the sum over-predicted
# 16-64 KiB points by 30-60%). Checked afterwards on 800 Mbit/s and 6 hosts.
SERIAL_SOFTWARE = frozenset({"tf"})
# One-way crossings a message costs, where a library makes it more than one. Gloo's TCP
# transport is a rendezvous protocol: a send waits for the receiver's "ready to receive"
# notice (gloo/transport/tcp/pair.cc), and in a ring step every rank posts its send and its
# receive at once, so each step pays the notice, then the data. Measured on 4 emulated hosts
# at 800 Mbit/s (probed RTT 72-92 us), real-time priority: small all-reduce and all-gather
# took 85-95 us per ring step more than on loopback, one RTT; the broadcast tree, whose
# receivers are posted long before the data comes, 45 us per hop, one way.
LATENCY_TRIPS = {("torch", "allreduce_ring"): 2, ("torch", "all_gather_ring"): 2}
# What the runners time, in the simulator's terms, where it differs from what the strategy
# is in general: TF's ParameterServerStrategy is asynchronous, but our coordinator joins
# every step (so that steps are comparable), so each measured step is one synchronous round.
MEASURED_AS = {("tf", "parameter_server"): "parameter_server"}
# Loopback sweeps an estimate is the median of (the latest ones), for a floor (validate) and
# for a library's own costs (software_costs): one sweep is one sample of a machine state that
# moves from minute to minute. Two torch 2-rank sweeps 20 minutes apart (SCHED_RR) put a 1 KiB
# all-reduce at 0.12 and 0.19 ms, three back to back at 0.19, 0.22 and 0.24 ms; TF's at 2.7
# and 4.6 ms; the emulated points beside them repeated within 3%.
FLOOR_SWEEPS = 3
# The strategies an emulated cluster runs, one replica per host (harness/run/plan.py).
EMULATED_STRATEGIES = (("torch", "ddp"), ("torch", "fsdp"), ("torch", "parameter_server"),
                       ("tf", "multi_worker_mirrored"), ("tf", "parameter_server"))
# Those whose every step waits for every worker (our TF parameter_server joins each step):
# a runtime's own time per step adds to them whole (runtime_overhead).
SYNCHRONOUS = frozenset({"ddp", "fsdp", "multi_worker_mirrored", "parameter_server"})


def simulated_as(framework: str, strategy: str) -> str | None:
    """The simulator's strategy for a real one as our runners run it; None for baselines."""
    from harness.sim.strategies import REAL_TO_SIM

    key = (framework, strategy)
    return MEASURED_AS.get(key, REAL_TO_SIM.get(key))


def uses_collectives(framework: str, strategy: str) -> bool:
    """Whether the strategy exchanges through the library's collectives (gloo's, TF's), whose
    own costs the loopback sweeps measure; parameter servers move tensors by RPC instead
    (TensorPipe, TF's gRPC variable reads and writes)."""
    model = simulated_as(framework, strategy)
    return model is not None and not model.startswith("parameter_server")


def realtime_rows(table: pd.DataFrame) -> pd.Series:
    """Which rows were measured at real-time priority (tables from before it: none)."""
    if "realtime" not in table:
        return pd.Series(False, index=table.index)
    return table["realtime"].fillna(False).astype(bool)


def normal_priority_first(table: pd.DataFrame) -> pd.DataFrame:
    """The rows measured at normal priority, as training runs, where there are any; else all."""
    normal = table[~realtime_rows(table)]
    return normal if not normal.empty else table


def at_nearest_world(table: pd.DataFrame, world: int) -> tuple[pd.DataFrame, int]:
    """The rows swept at ``world`` ranks, else at the nearest rank count swept (the smaller
    where two are as near), and that rank count; ``table`` must not be empty."""
    nearest = min({int(w) for w in table["world"]}, key=lambda w: (abs(w - world), w))
    return table[table["world"] == nearest], nearest


def latest_sweeps(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the latest FLOOR_SWEEPS sweeps (runs) in ``table``."""
    return table[table["run_id"].isin(sorted(table["run_id"].unique())[-FLOOR_SWEEPS:])]


def loopback_fits(fits: pd.DataFrame, framework: str) -> pd.DataFrame:
    """``framework``'s loopback all-reduce fits in ``fits`` (the calibration table): what a
    library's own costs are read from."""
    if fits.empty or "framework" not in fits:
        return fits.iloc[0:0]
    return fits[(fits["op"] == "all_reduce") & (fits["link_class"] == "loopback")
                & (fits["framework"] == framework)]


def software_costs(fits: pd.DataFrame, framework: str, world: int = 2) -> tuple[float, float]:
    """The communication library's own cost per message (alpha, s) and per byte (beta, s/B):
    the loopback all-reduce fits (`stratbench comm` on the local cluster) in ``fits`` (the
    calibration table) at ``world`` ranks, else at the nearest rank count swept (2 where two
    are as near), the median of each over the latest FLOOR_SWEEPS sweeps there; (0, 0) if
    none. A ring step's own cost grows with the ranks that share the cores, and one sweep of
    it is noisy: TF's loopback alpha was 1.0-1.2 ms at 2 ranks, 1.3-2.0 at 4 and 1.4-1.8 at 6
    (2026-11-24), 1.1 at 4 and 2.0 at 6 in single sweeps the next day."""
    local = normal_priority_first(loopback_fits(fits, framework))
    if local.empty:
        return 0.0, 0.0
    local = latest_sweeps(at_nearest_world(local, world)[0])
    beta = float(local["beta_s_per_byte"].median())
    return float(local["alpha_s"].median()), beta if math.isfinite(beta) else 0.0


@dataclass(frozen=True)
class MeasuredLinks:
    """Emulated hosts' links: as the link probe measured them before a run (medians over
    links), or, for a cluster never run, as its spec states them (`source` says which)."""

    hosts: int
    bandwidth_bytes_s: float  # a host's link (within its rack, where there are racks)
    rtt_s: float
    burst_bytes: float  # the links' tc tbf bucket; 0 where the run did not record it
    source: str = "probe"
    # racks=K,uplink=RATE clusters: hosts in K racks whose switches meet at a core through
    # shaped uplinks; one flow across racks as probed, and its round trip
    racks: int = 1
    uplink_bytes_s: float = 0.0
    rack_rtt_s: float = 0.0

    @property
    def bucket_s(self) -> float:
        """How long the bucket's bytes take at the link's rate."""
        return self.burst_bytes / self.bandwidth_bytes_s


def emulated_topology(links: MeasuredLinks, software: tuple[float, float] = (0.0, 0.0),
                      trips: int = 1) -> str:
    """The topology the emulated hosts were built as, with the measured links: one switch,
    or, for racked clusters, leaves (racks) under a core whose uplinks carry the probed
    cross-rack rate. Latency is `trips` one-way crossings (RTT/2 each) plus the software's
    alpha per message; the bandwidth is slowed by a per-byte software cost beta where that
    cost is serial (1/bw' = 1/bw + beta)."""
    alpha, beta = software
    bw = 1.0 / (1.0 / links.bandwidth_bytes_s + beta)
    lat = links.rtt_s / 2 * trips + alpha
    per_leaf, rest = divmod(links.hosts, max(1, links.racks))
    if links.racks > 1 and links.uplink_bytes_s > 0 and not rest:
        uplink = 1.0 / (1.0 / links.uplink_bytes_s + beta)
        # the core's share of a leaf: per_leaf host ports over the uplink (>= 1: the
        # uplink is never faster than the hosts that feed it can use)
        oversub = max(1.0, per_leaf * bw / uplink)
        spine_lat = max(0.0, (links.rack_rtt_s - links.rtt_s) / 2 * trips)
        return (f"leaf_spine:hosts={links.hosts},hosts_per_leaf={per_leaf},inter={bw * 8:.0f}bit,"
                f"inter_lat={lat * 1e6:.1f}us,oversub={oversub:.6g},"
                f"spine_lat={spine_lat * 1e6:.1f}us")
    return f"switch:n={links.hosts},bw={bw * 8:.0f}bit,lat={lat * 1e6:.1f}us"


def bottleneck_bits(links: MeasuredLinks) -> float:
    """The slowest link a step's traffic crosses, bits/s: the uplink of a racked cluster."""
    if links.racks > 1 and links.uplink_bytes_s > 0:
        return 8 * min(links.bandwidth_bytes_s, links.uplink_bytes_s)
    return 8 * links.bandwidth_bytes_s


def machine_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2


@dataclass(frozen=True)
class PsLayout:
    """A parameter server as a run laid it out on emulated hosts (one worker per host)."""

    shard_bytes: list[float]  # per server, in task order (ps0, ps1, ...)
    colocated: bool  # every server shares its host with a worker
    # colocated: the worker (counted in host order) each server sits beside; across racks
    # it decides which pushes cross an uplink
    beside: tuple[int, ...] | None = None


def placed_ps_layout(shard_bytes: list[float], host_of: dict[str, int]) -> PsLayout | None:
    """The layout of servers ``ps0..`` and workers ``worker0..`` on the hosts ``host_of``
    names; None where the simulator does not model it (two workers or two servers behind one
    host's link, or servers some beside workers and some not)."""
    def hosts(job: str) -> list[int]:
        tasks = sorted((t for t in host_of if t.startswith(job)),
                       key=lambda t: int(t[len(job):] or 0))
        return [host_of[t] for t in tasks]

    workers, servers = hosts("worker"), hosts("ps")
    if len(set(workers)) != len(workers) or len(set(servers)) != len(servers):
        return None
    shared = set(workers) & set(servers)
    if shared and len(shared) != len(servers):
        return None
    if not shared:
        return PsLayout(shard_bytes, False)
    rank = {h: i for i, h in enumerate(sorted(workers))}
    return PsLayout(shard_bytes, True, tuple(rank[h] for h in servers))


def runner_ps_layout(replicas: int, hosts: int, shards: int) -> PsLayout | None:
    """A parameter server as harness/runners lay it out on emulated hosts: task j (servers
    first, then workers, then TF's chief) on host j mod N, shards balanced by bytes."""
    tasks = [f"ps{k}" for k in range(shards)] + [f"worker{i}" for i in range(replicas)]
    return placed_ps_layout([1.0] * shards, {t: j % hosts for j, t in enumerate(tasks)})


def predict_step(framework: str, strategy: str, profile: Any, links: MeasuredLinks,
                 replicas: int, one_replica_s: float, *, fits: pd.DataFrame,
                 cores: int | None = None,
                 ps: PsLayout | None = None,
                 runtime_s: float = 0.0,
                 link_share: float = 1.0) -> dict[str, Any] | None:
    """The simulator's row for `framework/strategy` with `replicas` workers on `links`
    (one per host), or None where the simulator has no model for it. ``profile``: a
    harness.sim WorkloadProfile (its compute time is replaced by ``one_replica_s`` slowed
    by oversold cores); ``ps``: the shard weights and placement of a parameter server;
    ``runtime_s``: the runtime's own time per step (`runtime_overhead`); ``link_share``:
    the share of the links the library's collectives reach (harness.calibrate.link_share; the
    parameter servers' transports are not collectives and keep the probed rate)."""
    from harness.sim import simulate
    from harness.sim.strategies import PS_PULL

    model = simulated_as(framework, strategy)
    if model is None:
        return None
    alpha, beta = software_costs(fits, framework, replicas)
    collective = uses_collectives(framework, strategy)
    serial_beta = beta if framework in SERIAL_SOFTWARE and collective else 0.0
    if collective and link_share != 1.0:
        links = dataclasses.replace(links, bandwidth_bytes_s=links.bandwidth_bytes_s * link_share,
                                    uplink_bytes_s=links.uplink_bytes_s * link_share)
    topology = emulated_topology(links, (alpha, serial_beta),
                               LATENCY_TRIPS.get((framework, model), 1))
    processes = replicas
    options: dict[str, Any] = {}
    if model.startswith("parameter_server"):
        if ps is None:
            return None
        options = {"ps_shard_weights": ps.shard_bytes, "ps_colocated": ps.colocated,
                   "ps_beside": ps.beside}
        processes += len(ps.shard_bytes) + (framework == "tf")  # TF's chief
    # the emulated hosts share the machine's cores: compute slows when they are oversold
    compute = one_replica_s * max(1.0, processes / (cores or machine_cores()))
    (row,) = simulate(topology, replicas, model, dataclasses.replace(
        profile, step_compute_s=compute), None, library="gloo",
        ps_pull=PS_PULL[framework], runtime_s=runtime_s, **options)
    row.update(topology=topology, model=model, framework=framework, strategy=strategy,
               link_share=link_share if collective else 1.0)
    return row


# Model-parallel strategies as the torch runners run them (harness/runners): gloo's ring for
# the tensor all-reduces (a rendezvous round trip per ring step, as for DDP) and its
# point-to-point sends between stages.
MODEL_PARALLEL_STRATEGIES = ("pipeline", "tensor_parallel")


def predict_layout(workload: str, layout: Any, links: MeasuredLinks, batch: int,
                   one_replica_s: float, one_replica_batch: int, *, fits: pd.DataFrame,
                   cores: int | None = None, pass_overhead_s: float = 0.0) -> dict[str, Any]:
    """The simulator's row for a pipeline / tensor-parallel run of ``workload`` on emulated
    hosts (one stage or tensor rank per host): compute from the run's one-replica step
    (``one_replica_s`` for ``one_replica_batch`` samples, the whole model on one process),
    shared among the hosts' processes by the machine's cores; the links as probed; gloo's
    per-message cost and round trips."""
    from harness.sim import simulate_layout
    from harness.sim.structure import layered

    # as harness/runners run it: the embeddings stay whole on every tensor rank (Megatron-LM
    # splits them by vocabulary, at one more all-reduce per micro-batch)
    model = layered(workload)
    model = dataclasses.replace(model, pre=tuple(dataclasses.replace(layer, tp_allreduces=0)
                                                 for layer in model.pre))
    alpha, _ = software_costs(fits, "torch")
    topology = emulated_topology(links, (alpha, 0.0), LATENCY_TRIPS[("torch", "allreduce_ring")])
    compute = one_replica_s * model.batch_size / one_replica_batch
    row = simulate_layout(topology, model, layout, batch, None, step_compute_s=compute,
                          optimizer="sgd", cores=cores or machine_cores(),
                          pass_overhead_s=pass_overhead_s)
    row.update(topology=topology, model=row["strategy"], framework="torch")
    return row


def layout_of(row: dict[str, Any]) -> Any:
    """The model-parallel layout a run recorded (its columns, else its `extra`); None if it
    recorded none."""
    from harness.sim.layered import Layout

    extra: dict[str, Any] = row["extra"] if isinstance(row.get("extra"), dict) else {}

    def field(*names: str) -> Any:
        for name in names:
            for source in (row, extra):
                value = source.get(name)
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    return value
        return None

    stages = field("pipeline_stages", "stages")
    tensor = field("tensor_parallel", "tensor_parallel_degree")
    if stages is None and tensor is None:
        return None
    stages, tensor = int(stages or 1), int(tensor or 1)
    return Layout(data=max(1, int(row["replicas"]) // (stages * tensor)), stages=stages,
                  tensor=tensor, microbatches=int(field("microbatches") or 1),
                  schedule=str(field("pipeline_schedule", "schedule") or "1f1b"))


def local_runs(measured: pd.DataFrame, workload: str, framework: str, strategy: str
                ) -> list[tuple[dict[str, Any], Any]]:
    """(row, its run's one-replica row) of every ok local run of ``strategy`` on
    ``workload``: runs on one machine with no emulated links, whose time beyond the model
    is the runtime's own."""
    if measured.empty or "strategy" not in measured:
        return []
    family, _, size = workload.partition(":")
    ok = measured[(measured["status"] == "ok") & (measured["cluster"] == "local")
                  & (measured["workload"] == family) & (measured["size"] == size)
                  & (measured["framework"] == framework)]
    pairs = []
    for r in ok[ok["strategy"] == strategy].to_dict("records"):
        base = ok[(ok["run_id"] == r["run_id"]) & (ok["replicas"] == 1)]
        if not base.empty:
            pairs.append(({str(k): v for k, v in r.items()}, base.iloc[0]))
    return pairs


def loopback_links(fits: pd.DataFrame, framework: str, hosts: int) -> MeasuredLinks:
    """One machine's processes as links: the library's loopback rate, no wire latency."""
    beta = software_costs(fits, framework)[1]
    return MeasuredLinks(hosts, 1.0 / beta if beta > 0 else 10e9, 0.0, 0.0, source="loopback")


def pass_overhead(measured: pd.DataFrame, fits: pd.DataFrame, workload: str,
                  cores: int | None = None) -> float:
    """The pipeline runtime's own time per forward or backward pass, from loopback: what the
    local (one machine, no emulated links) pipeline runs of ``workload`` took beyond the
    model with none, per pass on their critical path (2 (M + S - 1)); 0 without such runs.
    The floor of a pipeline, as the loopback sweeps are the floor of a collective."""
    from statistics import median as _median

    samples = []
    for r, base in local_runs(measured, workload, "torch", "pipeline"):
        layout = layout_of(r)
        if layout is None:
            continue
        predicted = predict_layout(workload, layout, loopback_links(fits, "torch", layout.stages),
                                   int(r["global_batch"]), float(base["step_time_median_s"]),
                                   int(base["global_batch"]), fits=fits, cores=cores)
        passes = 2 * (layout.microbatches + layout.stages - 1)
        samples.append((float(r["step_time_median_s"]) - predicted["step_time_median_s"])
                       / passes)
    return max(0.0, _median(samples)) if samples else 0.0


def shard_bytes(extra: dict[str, Any]) -> list[float]:
    """Bytes per parameter-server shard as the run recorded them (torch: per server; TF:
    the variables' pieces per ps device); [] where it did not."""
    shards = [float(b) for b in extra.get("ps_shard_bytes", [])]
    if not shards and extra.get("variable_shards"):
        per_device: dict[str, float] = {}
        for pieces in extra["variable_shards"].values():
            for device, shape in pieces:
                per_device[device] = per_device.get(device, 0.0) + 4.0 * math.prod(shape)
        shards = [per_device[d] for d in sorted(per_device)]
    return shards


def runtime_overhead(measured: pd.DataFrame, fits: pd.DataFrame, framework: str,
                     strategy: str, facts: Any, cores: int | None = None) -> float:
    """A synchronous strategy's own time per step, from loopback: what the local runs of
    ``framework``'s ``strategy`` on ``facts``'s workload took beyond the model with no
    links; 0 without such runs. The comm sweeps time one collective of one tensor; a step
    also pays what no sweep times: the parameter servers' RPC (torch's TensorPipe, TF's gRPC
    variable reads) and Python bookkeeping, TF's per-step collective launches of many
    tensors and IndexedSlices. recsys:S's local torch PS step took 9.4 ms where its compute
    and bytes explain about 3, TF multi_worker_mirrored's 23 ms. 0 for a strategy whose
    steps do not wait for every worker (its runtime's time is not the step's)."""
    from statistics import median as _median

    if strategy not in SYNCHRONOUS:
        return 0.0
    samples = []
    for r, base in local_runs(measured, facts.name, framework, strategy):
        workers = int(r["replicas"])
        ps = None
        if strategy == "parameter_server":
            shards = shard_bytes(r["extra"])
            if not shards:
                continue
            ps = PsLayout(shards, False)
        hosts = workers + (len(ps.shard_bytes) if ps else 0)
        profile = facts.profile(batch=int(r["global_batch"]) // workers)
        predicted = predict_step(framework, strategy, profile,
                                 loopback_links(fits, framework, hosts), workers,
                                 replica_compute_s(base), fits=fits, cores=cores, ps=ps)
        if predicted is not None and predicted["status"] == "ok":
            samples.append(float(r["step_time_median_s"]) - predicted["step_time_median_s"])
    return max(0.0, _median(samples)) if samples else 0.0
