"""The simulator's answers as records: a simulated step (one strategy, or one model-parallel
layout) and a simulated collective.

Typed for the code that reads them (the recommender, the predictor, the commands); a row's
``to_row`` is the results schema's flat row (``results/schema.py``: ``source='simulated'``,
``framework='sim'``), for where rows are stored (Parquet) or printed (``simulate --json``),
its keys in the order the simulator always wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.layout import Layout
from results.schema import Scalar  # a flat row's value (re-exported for the row's readers)

NAN = float("nan")
#: The status of a strategy the topology cannot run (its row holds the reason and NaN).
UNAVAILABLE = "unavailable"


@dataclass(frozen=True, kw_only=True)
class SimulatedRow:
    """One strategy's simulated training step, its fields the schema's columns.

    An ``unavailable`` row (the topology cannot run the strategy) keeps its reason, NaN for
    the step and the defaults below for what was never simulated; its flat row leaves those
    out. A simulation is deterministic: the step's confidence interval is the point.
    """

    strategy: str
    requested_strategy: str
    workload: str
    size: str
    cluster: str
    replicas: int
    case_id: str
    price_per_device_hour: float  # NaN: the system states no price
    calibration_sources: str
    status: str = "ok"
    reason: str = ""
    step_time_median_s: float = NAN
    throughput_samples_s: float = NAN
    scaling_efficiency: float = NAN
    exposed_comm_s: float = NAN
    bytes_per_step: float = NAN
    comm_s: float = NAN
    compute_s: float = NAN
    optimizer_s: float = NAN
    bytes_per_worker: float = NAN
    staleness_mean: float = NAN
    staleness_max: float = NAN
    compute_source: str = ""
    sim_mode: str = ""
    sim_events: int = 0
    sim_wall_s: float = 0.0
    sim_notes: str = ""
    class_bytes: dict[str, float] = field(default_factory=dict)  # per link class
    utilisation: dict[str, float] = field(default_factory=dict)  # per link class
    cost_per_million_samples_usd: float = NAN
    # the fullest device's memory, the runtime's reserve and the device's capacity (NaN:
    # it states none); None where no device is described
    memory_per_device_bytes: float | None = None
    memory_activations_bytes: float | None = None
    memory_reserved_bytes: float | None = None
    device_memory_bytes: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_row(self) -> dict[str, Scalar]:
        """The flat results row (the schema's columns, ``bytes_<class>`` and
        ``utilisation_<class>`` per link class)."""
        return self._identity() | self._outcome() | self._memory()

    def _identity(self) -> dict[str, Scalar]:
        return {"source": "simulated", "framework": "sim", "strategy": self.strategy,
                "requested_strategy": self.requested_strategy, "workload": self.workload,
                "size": self.size, "cluster": self.cluster, "replicas": self.replicas,
                "case_id": self.case_id, "price_per_device_hour": self.price_per_device_hour,
                "calibration_sources": self.calibration_sources}

    def _outcome(self) -> dict[str, Scalar]:
        row: dict[str, Scalar] = {
            "status": self.status, "reason": self.reason,
            "step_time_median_s": self.step_time_median_s,
            "step_time_ci95_low_s": self.step_time_median_s,
            "step_time_ci95_high_s": self.step_time_median_s,
            "throughput_samples_s": self.throughput_samples_s,
            "scaling_efficiency": self.scaling_efficiency, "max_weight_diff": NAN,
            "exposed_comm_s": self.exposed_comm_s}
        if self.status == UNAVAILABLE:
            return row | {"bytes_per_step": self.bytes_per_step}
        row |= {"comm_s": self.comm_s, "compute_s": self.compute_s,
                "optimizer_s": self.optimizer_s, "bytes_per_step": self.bytes_per_step,
                "bytes_per_worker": self.bytes_per_worker,
                "staleness_mean": self.staleness_mean, "staleness_max": self.staleness_max,
                "compute_source": self.compute_source, "sim_mode": self.sim_mode,
                "sim_events": self.sim_events, "sim_wall_s": self.sim_wall_s,
                "sim_notes": self.sim_notes}
        row |= {f"bytes_{k}": v for k, v in self.class_bytes.items()}
        row |= {f"utilisation_{k}": v for k, v in self.utilisation.items()}
        return row | {"cost_per_million_samples_usd": self.cost_per_million_samples_usd}

    def _memory(self) -> dict[str, Scalar]:
        if self.memory_per_device_bytes is None:
            return {}
        return {"memory_per_device_bytes": self.memory_per_device_bytes,
                "memory_activations_bytes": self.memory_activations_bytes,
                "memory_reserved_bytes": self.memory_reserved_bytes,
                "device_memory_bytes": self.device_memory_bytes}


@dataclass(frozen=True, kw_only=True)
class LayoutRow(SimulatedRow):
    """One step of a data x pipeline x tensor (x context x expert) layout: a simulated row
    with the layout's columns and the memory its fullest device needs (always counted:
    capacity NaN where the device states none)."""

    layout: Layout
    global_batch: int
    bubble_fraction: float | None  # mean idle fraction of the pipeline's stages
    memory_per_device_bytes: float
    memory_activations_bytes: float
    memory_recompute_bytes: float  # the working memory recomputation adds
    memory_reserved_bytes: float
    device_memory_bytes: float
    attention: str  # fused | unfused
    recompute: str  # none | selective | full
    precision: str

    def to_row(self) -> dict[str, Scalar]:
        """The flat results row: the layout's columns (``Layout.to_columns``) and its memory
        before the outcome."""
        return self._identity() | self.layout.to_columns() | {
            "global_batch": self.global_batch, "bubble_fraction": self.bubble_fraction,
            "memory_per_device_bytes": self.memory_per_device_bytes,
            "memory_activations_bytes": self.memory_activations_bytes,
            "memory_recompute_bytes": self.memory_recompute_bytes,
            "memory_reserved_bytes": self.memory_reserved_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "attention": self.attention, "recompute": self.recompute,
            "precision": self.precision, "virtual_stages": self.layout.virtual,
            "sequence_parallel": self.layout.sequence_parallel, "zero": self.layout.zero,
        } | self._outcome()


@dataclass(frozen=True, kw_only=True)
class SimulatedCollective:
    """One collective of ``nbytes`` per rank, in nccl-tests' units: what the simulator
    predicts for a ``stratbench comm`` measurement. ``unavailable`` (the topology cannot
    run it): the reason, NaN times and the defaults below."""

    collective: str
    cluster: str
    replicas: int
    nbytes: float
    status: str = "ok"
    reason: str = ""
    time_s: float = NAN
    algbw: float = NAN  # bytes/s
    busbw: float = NAN  # bytes/s
    bytes_sent: float = NAN
    steps: int = 0
    sim_mode: str = ""
    sim_events: int = 0
    sim_wall_s: float = 0.0
