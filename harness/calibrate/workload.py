"""What the simulator and the recommender need to know of a workload, wherever it is known.

A workload is sized by its definition (a built-in family, a known model from the catalog, a
``profile:`` string, a user's declared profile) or, for a user's own model, by its first run
(the row's ``grad_bytes``); its compute time per step is measured here (the latest one-replica
run) or computed from FLOPs on a device whose speed is known. Neither needs a framework:
a user's file is imported for its declared numbers, never built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from harness.core.errors import InputError
from harness.sim.model.profile import for_simulation
from harness.sim.systems.compute import ComputeSplit
from workloads.operators import Op, from_records, total_forward_flops
from workloads.spec import BYTES_PER_PARAM, WorkloadSpec

NAN = float("nan")


def _facts(name: str, params: float, batch: int, sparsity: float = 1.0,
           flops_per_sample: float | None = None, **known: Any) -> WorkloadSpec:
    """The record for ``name`` (``mlp:M``, a known model's or a user's name; its family and
    size are split where rows split them)."""
    family, _, size = name.partition(":")
    return WorkloadSpec(params=max(1, int(params)), batch_size=batch,
                        flops_per_sample=flops_per_sample, sparsity=sparsity,
                        family=family if size else "user", size=size,
                        given_name="" if size else name, **known)


def row_names(frame: pd.DataFrame) -> pd.Series:
    """'family:size' for built-in rows, the label alone for user rows."""
    if frame.empty:
        return pd.Series(dtype=str)
    sizes = frame["size"].fillna("").astype(str)
    names = frame["workload"].astype(str)
    return names.where(sizes == "", names + ":" + sizes)


def workload_facts(text: str, measured: pd.DataFrame | None = None) -> WorkloadSpec:
    """The facts of the workload ``text`` names; InputError (one line) if it names none or
    if a user's model has neither a declared size nor a measured run."""
    from workloads import WorkloadError
    from workloads.resolve import resolve_workload
    from workloads.user import UserWorkload

    measured = measured if measured is not None else pd.DataFrame()
    try:
        workload = resolve_workload(text)
    except WorkloadError as exc:
        rows = _rows_named(measured, text)
        if rows.empty:
            raise InputError(str(exc)) from None
        return _from_rows(text, rows, flops=None, sparsity=1.0)
    if isinstance(workload, UserWorkload):
        rows = _rows_named(measured, workload.name)
        if not rows.empty and rows["grad_bytes"].notna().any():
            return replace(_from_rows(workload.name, rows, workload.flops_per_sample,
                                      workload.sparsity, batch=workload.batch_size),
                           frameworks=(workload.framework,))
        if workload.params is None:
            raise InputError(
                f"user workload {workload.name!r} has no size yet: run it once "
                f"(`stratbench run --workload {text} --strategy "
                f"{'single_device' if workload.framework == 'torch' else 'one_device'}`) or "
                f"declare params= (and flops_per_sample=) in its UserWorkload")
        return replace(_facts(workload.name, float(workload.params), workload.batch_size,
                              workload.sparsity, workload.flops_per_sample),
                       frameworks=(workload.framework,))
    from harness.sim.model.structure import fsdp_unit_params

    return replace(for_simulation(workload), block_params=fsdp_unit_params(text))


def _rows_named(measured: pd.DataFrame, name: str) -> pd.DataFrame:
    if measured.empty or "grad_bytes" not in measured:
        return pd.DataFrame()
    ok = measured[measured["status"] == "ok"]
    return ok[row_names(ok) == name]


def _from_rows(name: str, rows: pd.DataFrame, flops: float | None, sparsity: float,
               batch: int | None = None) -> WorkloadSpec:
    sized = rows.dropna(subset=["grad_bytes"]).sort_values("run_id")
    if sized.empty:
        raise InputError(f"no run of {name!r} recorded its size (grad_bytes): run it again "
                         f"with this version of stratbench")
    last = sized.iloc[-1]
    per_replica = batch or int(last["global_batch"]) // max(1, int(last["replicas"]))
    ops = traced_operators(rows)
    if flops is None and ops:
        flops = 3 * total_forward_flops(ops)
    return _facts(name, float(last["grad_bytes"]) / BYTES_PER_PARAM, per_replica,
                  sparsity, flops, ops=ops,
                  activation_bytes_per_sample=saved_activations(rows))


def traced_operators(rows: pd.DataFrame) -> tuple[Op, ...]:
    """The operators the newest one-device torch run traced (runners/torch_operators.py),
    or () where none did."""
    records = _newest_detail(rows, "operators")
    if records is None:
        return ()
    try:
        return from_records(records)
    except (TypeError, ValueError):
        return ()


def saved_activations(rows: pd.DataFrame) -> float | None:
    """Bytes one sample kept for backward in the newest one-device run that counted them
    (runners/torch_operators.py, runners/tf_operators.py: saved_activation_bytes); None where
    none did."""
    value = _newest_detail(rows, "activation_bytes_per_sample")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _newest_detail(rows: pd.DataFrame, key: str) -> Any:
    if "extra" not in rows:
        return None
    for extra in reversed(rows.sort_values("run_id")["extra"].tolist()):
        details = _json(extra)
        if key in details:
            return details[key]
    return None


def _json(value: Any) -> dict[str, Any]:
    """A row's ``extra`` as the store loads it (a dict), else nothing."""
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class MeasuredCompute:
    """One replica's step on this machine: the compute a target without a known device
    speed is assumed to have."""

    seconds: float
    batch: int
    framework: str
    run_id: str
    estimated_from: str = ""  # the FLOPs of another workload measured here, if not its own
    cpu_seconds: float = math.nan  # one replica on one core (replica_compute_s); nan: seconds
    base: dict[str, Any] | None = None  # the run measured, where it was (worker_compute)

    @property
    def replica_s(self) -> float:
        """What a worker of an emulated cluster computes per step on one core."""
        return self.cpu_seconds if math.isfinite(self.cpu_seconds) else self.seconds

    def worker(self, framework: str, strategy: str) -> ComputeSplit:
        """What a worker of ``strategy`` computes (`worker_compute`), the whole step where
        it was estimated."""
        if self.base is None:
            return ComputeSplit(self.replica_s, 0.0)
        return worker_compute(self.base, framework, strategy)

    @property
    def note(self) -> str:
        if self.estimated_from:
            return (f"compute estimated from FLOPs at this machine's measured speed "
                    f"({self.estimated_from}, {self.framework}, run {self.run_id})")
        return f"compute measured here ({self.framework}, run {self.run_id})"


def measured_compute(measured: pd.DataFrame, name: str, framework: str | None = None
                     ) -> MeasuredCompute | None:
    """The latest ok one-replica run of ``name`` here, of ``framework`` if given (else
    torch's, else any): on the local cluster, else on one emulated host (a process of this
    machine as well); None if there is none."""
    if measured is None or measured.empty:
        return None
    rows = measured[(measured["status"] == "ok") & (measured["replicas"] == 1)
                    & (measured["source"].fillna("measured") == "measured")]
    rows = rows[(row_names(rows) == name) & rows["step_time_median_s"].notna()]
    if framework is not None:
        rows = rows[rows["framework"] == framework]
    elif (rows["framework"] == "torch").any():
        rows = rows[rows["framework"] == "torch"]
    if rows.empty:
        return None
    local = rows[rows["cluster"] == "local"]
    last = (local if not local.empty else rows).sort_values("run_id").iloc[-1]
    return MeasuredCompute(float(last["step_time_median_s"]), int(last["global_batch"]),
                           str(last["framework"]), str(last["run_id"]),
                           cpu_seconds=replica_compute_s(last),
                           base={str(k): v for k, v in last.items()})


def replica_compute_s(base: Any) -> float:
    """One replica's compute on one core, from the framework's one-replica run (a row or
    record with `step_time_median_s` and `extra`): its CPU seconds per step where the run
    recorded them (harness/measure/cpu.py), else its wall time x the threads it ran on (the
    bound perfect thread scaling gives). The workers of an emulated cluster run one thread
    each on oversold cores, while TF's one_device baseline ran on every core: what the
    workers share is the baseline's CPU time, not its wall time. Measured on 4 emulated
    hosts (transformer:M, TF): one_device 78 ms on 2 threads, each worker's compute alone
    309 ms, as 2 x 78 ms shared by 4 processes on 2 cores (312 ms) says."""
    wall = float(base["step_time_median_s"])
    extra = base.get("extra") if hasattr(base, "get") else None
    extra = extra if isinstance(extra, dict) else {}
    cpu = extra.get("cpu_s_per_step")
    if isinstance(cpu, (int, float)) and math.isfinite(cpu) and cpu > 0:
        return max(wall, float(cpu))
    threads = extra.get("threads_per_process")
    return wall * (int(threads) if isinstance(threads, (int, float)) and threads >= 1 else 1)


def worker_compute(base: Any, framework: str, strategy: str) -> ComputeSplit:
    """What each worker of ``framework``'s ``strategy`` computes per step on one core, from
    the one-replica run ``base``, split as that run's probe timed it (forward, backward,
    optimizer; harness/runners/torch_runner.measure_split), CPU seconds as
    `replica_compute_s` counts them. Strategies differ where the baseline does not:
    - a parameter server's workers compute forward and backward; the update is the
      servers' (``apply_s``);
    - a strategy that updates every embedding row (DDP, FSDP) computes what the baseline's
      dense tables took, where a sparse baseline timed those too.
    Measured on recsys:L (torch, one thread): the sparse baseline's step 8.8 ms (forward 2.5,
    backward 3.9, update 2.3); with dense tables 604 ms (backward 540: 512 MB of gradient
    zeroed and filled). Without a recorded split the whole step is each worker's."""
    from harness.core.strategies import strategy as find_strategy

    total = replica_compute_s(base)
    extra = base.get("extra") if hasattr(base, "get") else None
    extra = extra if isinstance(extra, dict) else {}
    record = find_strategy(framework, strategy)
    split = extra.get("compute_split")
    if (record is not None and record.embedding_updates == "dense"
            and extra.get("updates") == "sparse rows"):
        split = extra.get("dense_compute_split")
    if not isinstance(split, dict) or not split:
        return ComputeSplit(total, 0.0)
    cpu_per_wall = total / float(base["step_time_median_s"])
    forward, backward, update = (float(split.get(k, 0.0)) * cpu_per_wall
                                 for k in ("forward_s", "backward_s", "optimizer_s"))
    if record is not None and record.exchange == "parameter_server":
        return ComputeSplit(forward, backward, apply_s=update)
    return ComputeSplit(forward, backward, optimizer_s=update)


def estimated_compute(measured: pd.DataFrame, facts: WorkloadSpec,
                      framework: str | None = None) -> MeasuredCompute | None:
    """A workload never run here, with known FLOPs: its FLOPs at the rate this machine
    reached on the measured workload of the same family with the most FLOPs per step (else
    of any family): a measured device speed, not a datasheet's. None without either."""
    from workloads import WorkloadError, parse_workload

    if measured is None or measured.empty or not facts.flops_per_sample:
        return None
    rows = measured[(measured["status"] == "ok") & (measured["replicas"] == 1)
                    & measured["step_time_median_s"].notna()]
    if framework is not None:
        rows = rows[rows["framework"] == framework]
    rated = []
    for r in rows.to_dict("records"):
        try:
            spec = parse_workload(f"{r['workload']}:{r['size']}")
        except (WorkloadError, ValueError):
            continue
        if spec.flops_per_sample:
            flops = spec.flops_per_sample * int(r["global_batch"])
            rated.append((spec.family == facts.name.partition(":")[0], flops,
                          flops / float(r["step_time_median_s"]), r))
    if not rated:
        return None
    _, _, rate, r = max(rated, key=lambda x: (x[0], x[1]))
    seconds = facts.flops_per_sample * facts.batch_size / rate
    return MeasuredCompute(seconds, facts.batch_size, str(r["framework"]), str(r["run_id"]),
                           estimated_from=f"{r['workload']}:{r['size']} at "
                                          f"{rate / 1e9:.3g} GFLOP/s")


def no_compute_message(name: str) -> str:
    """What to do when nothing says how long a step of ``name`` computes."""
    return (f"cannot tell the compute time of {name}: no measured one-device run in the "
            f"results directory; run `stratbench run --workload {name} --strategy "
            f"single_device --framework torch` first, or, for a workload with known FLOPs, "
            f"a device whose speed is known (a preset topology, `simulate --calibration "
            f"PRESET`, `recommend --device PRESET`)")


def scaled_compute(compute: MeasuredCompute, batch: int) -> float:
    """The measured step scaled to another per-replica batch (compute is linear in batch
    at the sizes we run; a fixed per-step cost would make this optimistic for small ones)."""
    return compute.seconds * batch / compute.batch if compute.batch else math.nan


def emulated_compute(measured: pd.DataFrame, facts: WorkloadSpec, framework: str) -> Any:
    """The framework's one-replica compute measured here (else estimated from FLOPs); None
    without either."""
    return (measured_compute(measured, facts.name, framework)
            or estimated_compute(measured, facts, framework))
