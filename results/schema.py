"""The result row: every column, its type, unit and meaning, under one schema version.

The column table below is the documentation (docs/RESULTS.md is generated from it and a test
keeps the two equal), so a column cannot exist without saying what it means.
Bump SCHEMA_VERSION when a column changes meaning or is removed; adding a nullable column
needs no bump, since older files load with it as missing.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    """How a case ended. Every case ends in exactly one row with one of these."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"


class Source(str, enum.Enum):
    MEASURED = "measured"
    SIMULATED = "simulated"
    EXTRAPOLATED = "extrapolated"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # pyarrow/pandas-friendly: string, int64, float64, bool, json
    unit: str
    meaning: str


def _c(name: str, dtype: str, unit: str, meaning: str) -> Column:
    return Column(name, dtype, unit, meaning)


COLUMNS: tuple[Column, ...] = (
    _c("schema_version", "int64", "", "Version of this schema the row was written under."),
    _c("run_id", "string", "", "One invocation of `stratbench run` (or bench); "
       "UTC timestamp plus a random suffix, so concurrent runs never collide."),
    _c("case_id", "string", "", "Stable name of the case within a run: framework, strategy, "
       "workload, cluster and replicas; `--resume` skips case ids already written."),
    _c("source", "string", "", "measured (a real run), simulated (the SimPy model) or "
       "extrapolated (a closed form beyond what was simulated)."),
    _c("framework", "string", "", "tf, torch, or sim for simulated rows."),
    _c("strategy", "string", "", "Strategy name as given on the command line."),
    _c("workload", "string", "", "Workload family (mlp, cnn, transformer, recsys) or a "
       "user workload's name."),
    _c("size", "string", "", "Workload size S, M, L (empty for user workloads)."),
    _c("cluster", "string", "", "Cluster spec the case ran on: local, netns:..., slurm:..., "
       "or a simulated topology."),
    _c("replicas", "int64", "count", "Model replicas computing gradients (workers x devices)."),
    _c("status", "string", "", "ok, failed, timeout or unavailable."),
    _c("reason", "string", "", "Why a case is not ok (the error, or what is missing); "
       "free-text caveats on ok rows (e.g. logical CPU devices share cores)."),
    _c("started_at", "string", "ISO 8601 UTC", "When the case started."),
    _c("finished_at", "string", "ISO 8601 UTC", "When the case ended."),
    _c("steps", "int64", "count", "Timed steps per repetition (warm-up excluded)."),
    _c("warmup", "int64", "count", "Warm-up steps per repetition, not timed."),
    _c("repeats", "int64", "count", "Repetitions, each in fresh processes."),
    _c("global_batch", "int64", "samples", "Samples per step across all replicas."),
    _c("step_time_median_s", "float64", "s", "Median step time over all timed steps."),
    _c("step_time_ci95_low_s", "float64", "s", "Lower bound of the 95% confidence interval "
       "of the median step time."),
    _c("step_time_ci95_high_s", "float64", "s", "Upper bound of that interval."),
    _c("step_time_p10_s", "float64", "s", "10th percentile step time."),
    _c("step_time_p90_s", "float64", "s", "90th percentile step time."),
    _c("throughput_samples_s", "float64", "samples/s", "global_batch / median step time."),
    _c("scaling_efficiency", "float64", "ratio", "T1 / (N x TN) at the same per-replica "
       "batch: 1.0 is perfect scaling; NaN where no single-replica baseline was measured."),
    _c("max_weight_diff", "float64", "abs", "Largest absolute difference between the "
       "strategy's weights and one device trained on the global batch; NaN where the "
       "strategy is not synchronous."),
    _c("loss_first", "float64", "", "Training loss at the first timed step."),
    _c("loss_last", "float64", "", "Training loss at the last timed step."),
    _c("peak_rss_bytes", "float64", "bytes", "Largest peak resident memory of any process "
       "of the case."),
    _c("gpu_peak_bytes", "float64", "bytes", "Largest peak GPU memory of any process "
       "(NaN without GPUs)."),
    _c("model_memory_bytes", "float64", "bytes", "Largest rise of any training process's "
       "peak resident memory from just before it built its model to the end of training: "
       "parameters, gradients, optimizer state, activations and the framework's working "
       "memory, not the interpreter (harness/measure/memory.py); NaN where not measured."),
    _c("bytes_sent_per_step", "float64", "bytes", "Bytes each replica sends per step "
       "(measured where the transport allows, else from the algorithm)."),
    _c("wire_bytes_per_step", "float64", "bytes", "Measured on emulated hosts: bytes each "
       "host's interface transmitted per timed step (kernel counters read around the timed "
       "steps; TCP/IP and framework headers included), mean over the hosts; per host in "
       "extra (wire_tx/rx_bytes_per_step_by_host). NaN elsewhere."),
    _c("grad_bytes", "float64", "bytes", "Bytes of one dense fp32 gradient of the model as "
       "the runner built it (= 4 x parameters): how the recommender and the simulator size a "
       "user's own model after one run."),
    _c("keras_impl", "string", "", "keras3 or tf_keras for TF rows; empty otherwise."),
    _c("env_fingerprint", "string", "", "Short hash of the machine part of the run manifest, "
       "so rows from different machines are never compared as history."),
    _c("extra", "json", "", "Strategy-specific details as a JSON object (e.g. bucket size, "
       "staleness, collective implementation; for torch ddp, fsdp and the parameter "
       "servers and TF multi_worker_mirrored, mirrored, central_storage and parameter_server "
       "compute_only_s, "
       "exchange_only_s and measured_overlap = (compute + exchange - step) / min(compute, "
       "exchange), each part timed alone on the same case after the timed steps; "
       "`cpu_s_per_step`, the CPU seconds per timed step of the process that timed, all its "
       "threads: what a one-replica baseline's copies share on oversold cores; "
       "`model_memory_bytes_by_rank`, each rank's rise where several measured it, the "
       "column being their maximum)."),
)

#: a value of a flat table row as the results store writes it (pandas, Parquet)
Scalar = float | int | str | bool | None
#: a flat row of one of the store's tables (validation, steps, comm points): a value a column
TableRow = dict[str, Scalar]


class DeviceStep(TypedDict, total=False):
    """A row of the ``device_steps`` table (``stratbench devicecheck``): one model's training
    step timed on one device (``python -m harness.measure.device_step``, which prints it as a
    JSON line), or why it was not (``status``, ``reason``)."""

    model: str
    precision: str
    batch: int
    seq: int | None
    optimizer: str
    steps: int
    warmup: int
    step_s: float  # the median step: forward, backward and the optimizer's update
    step_s_min: float
    step_s_max: float
    samples_per_s: float
    peak_memory_bytes: float
    device: str
    device_name: str
    torch: str
    cuda: str
    status: str
    reason: str


COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
DTYPES: dict[str, str] = {c.name: c.dtype for c in COLUMNS}
NAN = float("nan")


@dataclass
class ResultRow:
    """One case's outcome. Field order and names follow COLUMNS (a test checks)."""

    run_id: str
    case_id: str
    framework: str
    strategy: str
    workload: str
    size: str
    cluster: str
    replicas: int
    status: str
    reason: str = ""
    source: str = Source.MEASURED.value
    schema_version: int = SCHEMA_VERSION
    started_at: str = ""
    finished_at: str = ""
    steps: int = 0
    warmup: int = 0
    repeats: int = 0
    global_batch: int = 0
    step_time_median_s: float = NAN
    step_time_ci95_low_s: float = NAN
    step_time_ci95_high_s: float = NAN
    step_time_p10_s: float = NAN
    step_time_p90_s: float = NAN
    throughput_samples_s: float = NAN
    scaling_efficiency: float = NAN
    max_weight_diff: float = NAN
    loss_first: float = NAN
    loss_last: float = NAN
    peak_rss_bytes: float = NAN
    gpu_peak_bytes: float = NAN
    model_memory_bytes: float = NAN
    bytes_sent_per_step: float = NAN
    wire_bytes_per_step: float = NAN
    grad_bytes: float = NAN
    keras_impl: str = ""
    env_fingerprint: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        statuses = {s.value for s in Status}
        if self.status not in statuses:
            raise ValueError(f"status {self.status!r} is not one of {sorted(statuses)}")
        sources = {s.value for s in Source}
        if self.source not in sources:
            raise ValueError(f"source {self.source!r} is not one of {sorted(sources)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultRow:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def markdown_table() -> str:
    """The schema as a Markdown table: the body of docs/RESULTS.md."""
    lines = [
        f"Schema version {SCHEMA_VERSION}.",
        "",
        "| column | type | unit | meaning |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{c.name}` | {c.dtype} | {c.unit} | {c.meaning} |" for c in COLUMNS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
