"""A case: one (framework, strategy, workload, cluster) to run, as plain data.

A frozen dataclass serialised to JSON for the worker processes, so the parent plans and the
children execute without sharing anything else; it sits in the core because both the
parent's launcher and the children's runners read it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from harness.core.layout import COLUMNS, STAGE_LAYERS
from harness.core.strategies import Strategy

# Replicas per strategy on the local cluster: multi-replica strategies use 2 (this machine
# has 2 cores); parameter servers run 2 workers and 2 shards so K > 1 really shards.
LOCAL_REPLICAS = 2
# Interleaved passes of a `stratbench comm` sweep: slow spells on a shared machine outlast
# one point, so each point keeps its median pass (runners/torch_comm.py).
COMM_ROUNDS = 7
# Every runner's SGD rate, both frameworks, so strategies and frameworks compare weight for
# weight against one device.
LEARNING_RATE = 0.05
PS_SHARDS = 2


# The correctness baselines' roles: one device on the global batch ("reference"), and the same
# on another thread count ("rounding": its distance from the reference is how far float32
# summation order alone moves this model's weights over these steps).
REFERENCE_ROLES = ("reference", "rounding")


def reference_threads(role: str, threads: int) -> int:
    """The threads a reference role trains on: its default, or for the rounding floor another
    count, so that matmuls split their sums another way."""
    if role != "rounding":
        return threads
    return 1 if threads > 1 else 2


class Options(TypedDict, total=False):
    """What a case carries beside its fields, to the workers as JSON: the workload's row
    labels, a strategy's options (``Strategy.options``), a model-parallel layout under
    ``core.layout.COLUMNS``, a `comm` sweep's grid, and the fault tables' test hooks."""

    workload_label: str  # the row's workload and size, and a user model's framework
    workload_size: str
    workload_framework: str
    ps_shards: int
    tf_loop: str  # custom (the default, never stored) or fit
    bucket_mb: float
    collective: str
    collective_timeout_s: float
    cross_device_ops: str
    # the layout (Layout.case_options)
    pipeline_stages: int
    tensor_parallel: int
    context_parallel: int
    expert_parallel: int
    microbatches: int
    pipeline_schedule: str
    virtual_stages: int
    stage_layers: str
    # a `comm` sweep: bytes per point, rounds, operations, real-time priority
    sizes: list[int]
    rounds: int
    ops: list[str]
    realtime: bool
    # test hooks: a rank killed or frozen at a step, a server killed after a delay
    die_rank: int
    die_at_step: int
    hang_at_step: int
    die_role: str
    die_index: int
    die_after_s: float


@dataclass(frozen=True)
class Case:
    framework: str
    strategy: str
    workload: str
    cluster: str
    replicas: int
    steps: int
    warmup: int
    repeats: int
    timeout_s: float
    per_replica_batch: int
    seed: int = 0
    options: Options = field(default_factory=Options)

    @property
    def case_id(self) -> str:
        """Unique within a run; a TF case trained by Keras fit ends in /fit, so its history
        never mixes with the custom loop's."""
        loop = "/fit" if self.options.get("tf_loop") == "fit" else ""
        return (f"{self.framework}/{self.strategy}/{self.workload}/{self.cluster}/"
                f"{self.replicas}{loop}")

    @property
    def global_batch(self) -> int:
        return self.per_replica_batch * self.replicas

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Case:
        return cls(**json.loads(text))


# What a one-device reference does not read: how its case is deployed (the fields, and the
# options of servers, buckets, reductions, layouts and the TF loop). The runners' reference
# role trains `workload` on the global batch alone; everything else, an option nobody listed
# here included, stays in its key, so an unknown option never shares a reference it should not.
DEPLOYMENT_FIELDS = ("strategy", "replicas", "per_replica_batch", "cluster", "timeout_s",
                     "repeats")
DEPLOYMENT_OPTIONS = frozenset({"ps_shards", "tf_loop", "bucket_mb", "cross_device_ops",
                                *COLUMNS.values(), STAGE_LAYERS})


def reference_key(case: Case) -> str:
    """The same for two cases exactly when their one-device references train the same model
    on the same data: a run checks every strategy of one model against one reference."""
    fields: dict[str, Any] = {k: v for k, v in asdict(case).items()
                              if k not in DEPLOYMENT_FIELDS}
    fields["global_batch"] = case.global_batch
    fields["options"] = {k: v for k, v in case.options.items() if k not in DEPLOYMENT_OPTIONS}
    return json.dumps(fields, sort_keys=True)


def replicas_for(strategy: Strategy, hosts: int = 1) -> int:
    """One replica for baselines; on emulated hosts one per host, else this machine's 2."""
    if strategy.exchange == "none":
        return 1
    return hosts if hosts > 1 else LOCAL_REPLICAS


@dataclass(frozen=True)
class CaseOptions:
    """`run --stages/--microbatches/--schedule/--tensor-parallel/--tf-loop/--stage-layers`:
    how a model-parallel case splits its model, and how a TF case trains."""

    stages: int | None = None  # default: one per emulated host, else this machine's 2
    microbatches: int | None = None  # default: one per stage
    schedule: str | None = None  # default 1f1b; None tells a schedule nobody asked for
    tensor: int | None = None  # tensor_parallel's degree (same default as stages)
    tf_loop: str | None = None  # TF cases: custom (the default) or Keras fit
    # blocks per pipeline stage ('1,2,1', '8x14' repeats, or 'ends'); default: equal runs
    # where the stages divide the blocks, else the shortfall off the first and last
    stage_layers: str | None = None


class WireCounts(TypedDict):
    """An emulated host's interface counters around the timed steps (measure.wire), per
    host in the cluster's order."""

    tx_bytes_per_step: list[float]
    rx_bytes_per_step: list[float]
    steps: int


class ServerStats(TypedDict, total=False):
    """What a torch parameter server says of its run (runners.torch_ps.ShardServer.stats);
    the pull statistics only where a worker pulled after its first."""

    updates: int
    staleness_mean: float
    staleness_max: int
    shard_bytes: int
    pull_span_mean: float
    pull_rows_mean: float


class ServerReport(ServerStats):
    """A torch parameter server's own report, if it outlives its case (the launcher ends it)."""

    role: str


class RoundsSummary(TypedDict):
    """A micro-benchmark point measured in interleaved rounds (measure.stats.summarize_rounds
    says what each figure is)."""

    time_s: float
    fast_s: float
    spread_rel: float


class CommPoint(RoundsSummary):
    """One collective at one size, timed by a `comm` case."""

    op: str
    bytes: int
    world: int


class Placement(TypedDict, total=False):
    """Where a scheduler ran a task: on emulated hosts its host index; under Slurm what
    Slurm said of it (runners.slurm_task.assume)."""

    task: str
    host: int
    job_id: str | None
    step_id: str | None
    procid: int
    node: str
    address: str


class WorkerReport(TypedDict, total=False):
    """The JSON a worker process writes for its parent (harness.worker), pyperf's typed
    worker report: each runner fills the keys its strategy measures, the worker adds
    ``realtime``, ``peak_rss_bytes`` and ``pid``. A server that the case ends by killing
    writes none."""

    step_times_s: list[float]  # each timed step's wall time
    losses: list[float]  # every step's loss, warm-up included
    rank: int
    world: int
    replicas: int  # what ran where the hardware decides (a TPU's cores)
    threads: int
    grad_bytes: float
    model_memory_bytes: float | None
    bytes_pushed_per_step: float  # parameter servers and sharded tables: measured
    bytes_sent_per_step: float  # model parallelism: the stage's tensors
    bytes_sent_method: str
    bubble_fraction: float
    replica_copies_max_diff: float
    timing: str  # what a step's time spans
    weights: str  # the .npz of the final weights
    wire: WireCounts
    servers: list[ServerStats]
    points: list[CommPoint]
    # strategy-specific facts for the row's ``extra`` column, free-form JSON by the schema
    details: dict[str, Any]
    realtime: bool
    peak_rss_bytes: int
    pid: int
