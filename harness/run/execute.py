"""Run planned cases, one after another, and store exactly one row per case.

A case that cannot run here becomes an `unavailable` row that says why; a crash or a
timeout becomes a `failed` or `timeout` row with the error; the run always goes on, and rows
already written are never touched (each is its own file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from harness.core.case import Case, Placement, WireCounts, WorkerReport
from harness.core.strategies import (
    FIT_UNAVAILABLE,
    STRATEGIES,
    Strategy,
)
from harness.launch import netns, slurm
from harness.launch import placement as layout
from harness.launch.netns import Cluster
from harness.launch.processes import GroupResult, run_group
from harness.launch.slurm import SlurmTarget
from harness.measure import stats, wire
from harness.run import environment
from harness.run.references import References
from results.schema import ResultRow, Status
from results.store import ResultsStore, load

FRAMEWORK_MODULE = {"tf": "tensorflow", "torch": "torch"}
INSTALL_HINT = {"tf": "pip install 'stratbench[tf]'", "torch": "pip install 'stratbench[torch]'"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


Where = Cluster | SlurmTarget | None  # local processes, emulated hosts, or Slurm


def unavailable_reason(case: Case, cluster: Where = None) -> str | None:
    """Why this case cannot run on this machine, or None if it can."""
    module = FRAMEWORK_MODULE[case.framework]
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed: {INSTALL_HINT[case.framework]}"
    owner = case.options.get("workload_framework")
    if owner and owner != case.framework:
        return (f"user workload {case.options.get('workload_label')!r} is a {owner} model; "
                f"it runs only under {owner} strategies")
    if case.options.get("tf_loop") == "fit" and case.strategy in FIT_UNAVAILABLE:
        return FIT_UNAVAILABLE[case.strategy]
    if case.strategy == "tpu":
        hints = environment.tpu_hints()
        if not hints["present"]:
            return ("no TPU on this machine: none of "
                    f"{', '.join(environment.TPU_ENV_VARS)} is set and no /dev/accel* or "
                    "/dev/vfio device exists, so TPUClusterResolver has nothing to resolve")
    if case.cluster.startswith("netns") and cluster is None:
        return netns.unavailable_reason() or "emulated hosts could not be built"
    if case.cluster.startswith("slurm") and not isinstance(cluster, SlurmTarget):
        return slurm.unavailable_reason() or "the Slurm cluster could not be reached"
    return None


def strategy_of(case: Case) -> Strategy:
    return next(s for s in STRATEGIES
                if s.framework == case.framework and s.name == case.strategy)


@dataclass
class CaseOutcome:
    row: ResultRow
    steps: pd.DataFrame | None


def _bytes_sent(case: Case, exchange: str, report: WorkerReport) -> tuple[float, str]:
    """What one replica sends per step: measured where the runner counts it (parameter
    servers count the bytes they push), else what the exchange algorithm sends."""
    if "bytes_pushed_per_step" in report:
        return float(report["bytes_pushed_per_step"]), "measured: bytes pushed"
    if "bytes_sent_per_step" in report:  # model parallelism: activations and their gradients
        return float(report["bytes_sent_per_step"]), str(
            report.get("bytes_sent_method", "algorithm: the stage's tensors sent"))
    grad = report.get("grad_bytes")
    n = case.replicas
    if grad is None or exchange == "none" or n < 2:
        return 0.0 if exchange == "none" else math.nan, "none"
    if exchange in ("allreduce", "sharded"):  # ring all-reduce; reduce-scatter + all-gather
        return 2 * (n - 1) / n * grad, "algorithm: ring 2(n-1)/n x gradient bytes"
    return float(grad), "algorithm: full gradient to the central device"


def _base_row(case: Case, run_id: str, status: str, reason: str, started: str) -> ResultRow:
    workload = case.options.get("workload_label") or case.workload.partition(":")[0]
    size = case.options.get("workload_size", case.workload.partition(":")[2])
    return ResultRow(
        run_id=run_id, case_id=case.case_id, framework=case.framework, strategy=case.strategy,
        workload=workload, size=size, cluster=case.cluster, replicas=case.replicas,
        status=status, reason=reason, started_at=started, finished_at=_now(),
        steps=case.steps, warmup=case.warmup, repeats=case.repeats,
        global_batch=case.global_batch,
    )


PORT_RETRIES = 3


def _port_clash(group: GroupResult) -> bool:
    text = (group.reason + " ".join(o.stderr_tail for o in group.outcomes)).lower()
    return group.status == "failed" and ("address already in use" in text
                                         or "eaddrinuse" in text)


EXPOSED = ("TF's gRPC servers listened on every interface of this machine: TF cannot bind "
           "one address, and without root there is no private namespace to confine them")


def needs_private_loopback(case: Case, cluster: Where) -> bool:
    """TF's multi-process cases on the local cluster: their gRPC servers bind every
    interface, so they run in a namespace whose only interface is its own loopback."""
    return (cluster is None and case.framework == "tf"
            and case.strategy in ("multi_worker_mirrored", "parameter_server", "comm"))


@contextlib.contextmanager
def confined(case: Case, cluster: Cluster | None) -> Iterator[Cluster | None]:
    """Where the case's processes run: ``cluster``, or a private loopback namespace for TF's
    local multi-process cases when we can make one (see needs_private_loopback)."""
    if not needs_private_loopback(case, cluster) or netns.unavailable_reason():
        yield cluster
        return
    with netns.private_loopback() as private:
        yield private


def _start(case: Case, case_file: Path, workdir: Path, cluster: Where) -> GroupResult:
    if isinstance(cluster, SlurmTarget):
        specs = layout.processes(case, case_file, None)
        if case.framework == "tf":  # SlurmClusterResolver numbers tasks by sorted job name
            specs = sorted(specs, key=lambda s: s.role)
        return slurm.run_step(case, specs, layout.worker_argv(case_file, "slurm", 0),
                              cluster, workdir)
    with confined(case, cluster) as where:
        specs = layout.processes(case, case_file, where)
        if isinstance(cluster, Cluster) and where is cluster:  # the timing rank reads the wire
            links = wire.env_value([(h.namespace, h.interface) for h in cluster.hosts])
            for spec in specs:
                spec.env[wire.ENV] = links
        group = run_group(specs, workdir, case.timeout_s)
    if isinstance(cluster, Cluster) and where is cluster:
        host_of = {h.address: h.index for h in cluster.hosts}
        group.placements = [{"task": s.name, "host": host_of[s.env["STRATBENCH_HOST"]]}
                            for s in specs if s.env.get("STRATBENCH_HOST") in host_of]
    return group


def _run_repeat(case: Case, case_file: Path, workdir: Path, cluster: Where) -> GroupResult:
    """One repetition; if another program took our rendezvous port between our choosing it
    and the workers binding it, start again on fresh ports."""
    for attempt in range(PORT_RETRIES):
        group = _start(case, case_file, workdir.with_name(f"{workdir.name}-a{attempt}"),
                       cluster)
        if not _port_clash(group):
            return group
    return group


@dataclass
class _Repeats:
    """What a case's repetitions reported: each step's slowest rank, and the last
    repetition's reports (the row's per-run facts are read off its first rank)."""

    # the steps table's rows: repeat, step, step_time_s, loss
    step_rows: list[dict[str, int | float]] = dataclasses.field(default_factory=list)
    reports: list[WorkerReport] = dataclasses.field(default_factory=list)
    rss: list[float] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)
    weights: str | None = None
    placed: list[Placement] = dataclasses.field(default_factory=list)  # where tasks ran
    wires: list[WireCounts] = dataclasses.field(default_factory=list)  # bytes per host

    @property
    def first(self) -> WorkerReport:
        return self.reports[0]


def execute_case(case: Case, run_id: str, workdir: Path, cluster: Where = None,
                 references: References | None = None) -> CaseOutcome:
    """One case, all its repetitions, in one row; a synchronous case's weights checked
    against its reference (`references`: the run's, else one trained for this case alone)."""
    started = _now()
    why = unavailable_reason(case, cluster)
    if why:
        return CaseOutcome(_base_row(case, run_id, Status.UNAVAILABLE.value, why, started), None)
    case_file = workdir / "case.json"
    case_file.write_text(case.to_json())
    got, failed = _run_repeats(case, case_file, workdir, cluster)
    if failed is not None:
        row = _base_row(case, run_id, failed.status, failed.reason, started)
        return CaseOutcome(row, pd.DataFrame(got.step_rows) if got.step_rows else None)
    first = got.first
    row = _base_row(case, run_id, Status.OK.value, "", started)
    if first.get("replicas", case.replicas) != case.replicas:  # a TPU has as many as it has
        # the row records what ran; its case_id stays the planned one, so resume finds it
        case = dataclasses.replace(case, replicas=int(first["replicas"]))
        row.replicas, row.global_batch = case.replicas, case.global_batch
        case_file.write_text(case.to_json())  # the reference trains on that global batch
    _timing(row, case, got)
    _extra(row, case, cluster, got)
    strat = strategy_of(case)
    if strat.weights_match and strat.exchange != "none" and got.weights:
        if references is None:
            with References.kept(workdir) as alone:
                alone.check(row, case, case_file, workdir, got.weights)
        else:
            references.check(row, case, case_file, workdir, got.weights)
    return CaseOutcome(row, pd.DataFrame(got.step_rows))


def _run_repeats(case: Case, case_file: Path, workdir: Path, cluster: Where
                 ) -> tuple[_Repeats, GroupResult | None]:
    """Each repetition in fresh processes; the first that fails ends them, returned."""
    got = _Repeats()
    for repeat in range(case.repeats):
        group = _run_repeat(case, case_file, workdir / f"r{repeat}", cluster)
        if group.status != "ok":
            return got, group
        reports = sorted((o.report for o in group.outcomes
                          if o.report and "step_times_s" in o.report),
                         key=lambda r: r.get("rank", 0))
        got.rss += [o.report["peak_rss_bytes"] for o in group.outcomes if o.report]
        got.placed += group.placements
        got.wires += [r["wire"] for r in reports if "wire" in r][:1]
        per_rank = np.array([r["step_times_s"] for r in reports])
        # A synchronous step ends when its slowest rank ends.
        slowest = per_rank.max(axis=0) if per_rank.size else np.array([])
        for step, value in enumerate(slowest):
            got.step_rows.append({"repeat": repeat, "step": step, "step_time_s": float(value),
                                  "loss": float(reports[0]["losses"][case.warmup + step])})
        got.losses = reports[0]["losses"]
        got.reports = reports
        got.weights = next((r["weights"] for r in reports if "weights" in r), got.weights)
    assert got.reports, "a case runs at least once"
    return got, None


def _timing(row: ResultRow, case: Case, got: _Repeats) -> None:
    summary = stats.summarize([r["step_time_s"] for r in got.step_rows])
    row.step_time_median_s = summary.median_s
    row.step_time_ci95_low_s = summary.ci95_low_s
    row.step_time_ci95_high_s = summary.ci95_high_s
    row.step_time_p10_s = summary.p10_s
    row.step_time_p90_s = summary.p90_s
    row.throughput_samples_s = case.global_batch / summary.median_s
    row.peak_rss_bytes = float(max(got.rss)) if got.rss else math.nan
    losses = got.losses
    row.loss_first = float(losses[case.warmup]) if losses else math.nan
    row.loss_last = float(losses[-1]) if losses else math.nan


# a parameter server's figures (ServerStats) that a row keeps: the worst over its servers
STALENESS: Final = ("staleness_mean", "staleness_max")
PULLS: Final = ("pull_span_mean", "pull_rows_mean")  # and these, one per server


def _extra(row: ResultRow, case: Case, cluster: Where, got: _Repeats) -> None:
    """The row's columns past the schema's (where tasks ran, memory, bytes, staleness), in
    its ``extra``."""
    first, reports, placed, wires = got.first, got.reports, got.placed, got.wires
    losses = got.losses
    strat = strategy_of(case)
    extra = row.extra
    extra.update({"threads_per_process": first.get("threads"),
                  "per_replica_batch": case.per_replica_batch,
                  "loss_decreased": bool(losses and losses[-1] < losses[0]),
                  **first.get("details", {})})
    if isinstance(cluster, SlurmTarget) and placed:
        extra["slurm_job_ids"] = sorted({str(p["job_id"]) for p in placed})
        extra["slurm_nodes"] = sorted({str(p["node"]) for p in placed})
    elif placed:  # emulated hosts: which host index ran each task (the simulator needs it)
        extra["task_hosts"] = {str(p["task"]): int(p["host"]) for p in placed}
    if needs_private_loopback(case, cluster):
        extra["exposure"] = EXPOSED if netns.unavailable_reason() else (
            "ran in a private network namespace: its servers were reachable only on its "
            "own loopback")
    grad_bytes = first.get("grad_bytes")
    row.grad_bytes = float(grad_bytes) if grad_bytes is not None else math.nan
    bubbles = [float(r["bubble_fraction"]) for r in reports if "bubble_fraction" in r]
    if bubbles:  # each stage's idle fraction of the step, averaged over the stages
        extra["bubble_fraction"] = float(np.mean(bubbles))
    gained = [float(rise) for r in reports
              if (rise := r.get("model_memory_bytes")) is not None]
    row.model_memory_bytes = max(gained) if gained else math.nan
    if len(gained) > 1:  # each rank's rise: symmetric ranks that differ show allocator noise
        extra["model_memory_bytes_by_rank"] = gained
    row.bytes_sent_per_step, extra["bytes_sent_method"] = _bytes_sent(case, strat.exchange,
                                                                     first)
    if wires:  # per host, the median over the repetitions
        tx = np.median([w["tx_bytes_per_step"] for w in wires], axis=0)
        extra["wire_tx_bytes_per_step_by_host"] = [float(b) for b in tx]
        extra["wire_rx_bytes_per_step_by_host"] = [
            float(b) for b in np.median([w["rx_bytes_per_step"] for w in wires], axis=0)]
        row.wire_bytes_per_step = float(np.mean(tx))
    for server in first.get("servers", []):
        for key in STALENESS:
            extra[key] = max(extra.get(key, 0), server[key])
        extra.setdefault("ps_shard_bytes", []).append(server["shard_bytes"])
        # per server, over the run's pulls after each worker's first: how many pushes a
        # pull spans and how many table rows it carries (the union it pulls)
        for key in PULLS:
            if (value := server.get(key)) is not None:
                extra.setdefault(f"ps_{key}", []).append(value)


def fill_scaling_efficiency(row: ResultRow, baselines: dict[tuple[str, str], float]) -> None:
    """Against the same framework's one-replica case on the same workload, this run."""
    key = (row.framework, f"{row.workload}:{row.size}")
    if row.status != Status.OK.value:
        return
    if row.replicas == 1:
        baselines[key] = row.throughput_samples_s
        row.scaling_efficiency = 1.0
        return
    if key in baselines:
        row.scaling_efficiency = stats.scaling_efficiency(
            row.throughput_samples_s, row.replicas, baselines[key])


def _stored_baselines(store: ResultsStore, run_id: str) -> dict[tuple[str, str], float]:
    """One-replica throughputs already stored in this run (a resumed run needs them)."""
    frame = load(store.root)
    done = frame[(frame.run_id == run_id) & (frame.status == "ok") & (frame.replicas == 1)]
    return {(str(fw), f"{wl}:{size}"): float(tp) for fw, wl, size, tp in zip(
        done.framework, done.workload, done["size"], done.throughput_samples_s, strict=True)}


def execute(cases: list[Case], store: ResultsStore, run_id: str,
            skip: set[str] | None = None,
            progress: Callable[[Case, ResultRow], None] | None = None,
            cluster: Where = None) -> list[ResultRow]:
    """Run every case not in `skip`; each row is stored as soon as its case ends."""
    rows: list[ResultRow] = []
    baselines = _stored_baselines(store, run_id) if skip else {}
    machine = environment.fingerprint(environment.collect(frameworks=False))
    # Slurm tasks on other nodes read and write the case's folder: keep it beside the
    # results (shared on a cluster), not in this node's /tmp
    scratch = store.root / ".scratch" if isinstance(cluster, SlurmTarget) else None
    if scratch:
        scratch.mkdir(parents=True, exist_ok=True)
    with References.kept(scratch) as references:
        for case in cases:
            if skip and case.case_id in skip:
                continue
            outcome = _case_in_scratch(case, run_id, store, cluster, scratch, references)
            outcome.row.env_fingerprint = machine
            fill_scaling_efficiency(outcome.row, baselines)
            store.write_case(outcome.row, outcome.steps)
            rows.append(outcome.row)
            if progress:
                progress(case, outcome.row)
    return rows


def _case_in_scratch(case: Case, run_id: str, store: ResultsStore, cluster: Where,
                     scratch: Path | None, references: References) -> CaseOutcome:
    """One case in a folder of its own, removed when it ends; a failed case's logs kept."""
    workdir = Path(tempfile.mkdtemp(prefix="stratbench-case-", dir=scratch))
    try:
        try:
            outcome = execute_case(case, run_id, workdir, cluster, references)
        except Exception as exc:  # a bug of ours still ends the case in a row
            reason = f"stratbench error: {type(exc).__name__}: {exc}"
            outcome = CaseOutcome(_base_row(case, run_id, Status.FAILED.value, reason,
                                            _now()), None)
        if outcome.row.status in (Status.FAILED.value, Status.TIMEOUT.value):
            logs = store.keep_logs(run_id, case.case_id, workdir)
            if logs is not None:
                outcome.row.extra["logs"] = str(logs.relative_to(store.root))
    finally:  # an interrupt too: the scratch folder never outlives its case
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome
