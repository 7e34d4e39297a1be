"""A workload as the simulator and the recommender see it: sizes and operators, not code.

The one record every path from a workload's numbers to a prediction reads: built by
``harness.calibrate.workload.workload_facts`` from whatever names the workload (a built-in, a
known model, a ``transformer:`` shape, a ``profile:`` string, a user's model after one run),
or from the profile grammar by hand (``--profile K=V,...``, the grammar of workloads/profile.py):

    params=25M,batch=32,flops_per_sample=4.5e9        (compute from FLOPs and device speed)
    params=25M,batch=32,step_compute=120ms            (compute time given)
    params=1G,batch=64,step_compute=80ms,sparsity=0.01  (embedding-heavy: 1% of rows touched)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harness.core.errors import SpecError
from workloads.configs import RecsysConfig
from workloads.costs import expected_touched_fraction
from workloads.operators import Op
from workloads.profile import KEYS as PROFILE_GRAMMAR_KEYS
from workloads.spec import BYTES_PER_PARAM, DEFAULT_BUCKET, WorkloadSpec


@dataclass(frozen=True)
class WorkloadProfile:
    """A model as the network sees it: how many bytes move, how long compute takes."""

    params: int
    batch_per_replica: int = 32
    bytes_per_element: int = 4
    flops_per_sample: float | None = None  # training FLOPs (forward + backward) per sample
    step_compute_s: float | None = None  # forward + backward per replica, if known
    gradient_sparsity: float = 1.0  # fraction of gradient entries a step touches
    optimizer_s: float = 0.0
    bucket_bytes: int = DEFAULT_BUCKET
    name: str = "custom"
    size: str = ""
    # Fraction of the gradient held by dense tensors; the rest are embedding tables whose
    # gradients a framework may send as touched rows (TF's IndexedSlices: values and an
    # int64 index per row of ``embedding_row_bytes``).
    dense_fraction: float = 1.0
    embedding_row_bytes: float = 0.0
    embedding_tables: int = 1  # sparse gradients a framework exchanges one by one
    embedding_lookups: float = 0.0  # rows looked up per sample, all tables (0: unknown)
    # one worker's (push, pull) bytes per parameter server, where a runner's placement and
    # transport are known (sim.sparse_traffic.torch_ps_traffic); else ps_bytes, by shard size
    ps_traffic: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    # embedding sharding: each rank's share of the rows a replica asks for (one per worker);
    # when None, a built-in model's from its runner's placement
    # (sim.sparse_traffic.embedding_owner_shares), else an even split
    owner_shares: tuple[float, ...] | None = None
    # one sample's forward operators (workloads.operators): what the device model times on
    # a described device; empty: FLOPs over the device's speed
    ops: tuple[Op, ...] = ()
    # every layer checkpointed: the device model runs the forward twice (FLOPs- and
    # time-based profiles scale their own figures by 4/3)
    recomputed: bool = False
    # bytes one sample keeps for backward (no recomputation), where known
    activation_bytes_per_sample: float | None = None
    sized_by: str = "definition"  # definition | declared by the workload | measured run ID
    # a built-in recommender's tables and id distribution: the rows any batch touches, by
    # workloads.costs' Zipf count rather than independent draws (``rows_touched``)
    recsys: RecsysConfig | None = None
    optimizer: str = "adam"  # what updates the weights: its state's memory, its traffic
    # FSDP's wrapping unit, in parameters: one block where the workload has blocks (torchtitan
    # wraps each TransformerBlock, torch's transformer_auto_wrap_policy each layer class); 0:
    # units of ``bucket_bytes``
    unit_params: int = 0
    # a user's model: the one framework its code is written in, so only that framework's
    # strategies (and no other stack) can train it; None for what stratbench describes itself
    framework: str | None = None

    @property
    def fsdp_unit_bytes(self) -> float:
        """Bytes of one FSDP unit's gradient (its parameters at ``bytes_per_element``)."""
        return (self.unit_params * self.bytes_per_element if self.unit_params
                else float(self.bucket_bytes))

    def __post_init__(self) -> None:
        if self.params < 1:
            raise SpecError(f"profile params={self.params} must be >= 1")
        if self.batch_per_replica < 1:
            raise SpecError(f"profile batch={self.batch_per_replica} must be >= 1")
        if not 0 < self.gradient_sparsity <= 1:
            raise SpecError(f"profile sparsity={self.gradient_sparsity} must be in (0, 1]")
        if not 0 <= self.dense_fraction <= 1:
            raise SpecError(f"profile dense_fraction={self.dense_fraction} must be in [0, 1]")
        if self.owner_shares is not None and (
                any(not (math.isfinite(x) and x >= 0) for x in self.owner_shares)
                or sum(self.owner_shares) <= 0):
            raise SpecError(f"owner shares {list(self.owner_shares)} must be >= 0, not all 0")
        if self.bucket_bytes < 1:
            raise SpecError(f"profile bucket={self.bucket_bytes} must be >= 1 byte")

    @property
    def label(self) -> str:
        """What result rows call the workload: ``mlp:M``, a known model's or a user's name."""
        return f"{self.name}:{self.size}" if self.size else self.name

    def at(self, step_compute_s: float | None = None, batch: int | None = None
           ) -> WorkloadProfile:
        """This workload with a compute time per step (where one is measured or stated) or
        another batch per replica (a sparse gradient's touched rows with it:
        ``rows_touched``)."""
        batch = batch or self.batch_per_replica
        return replace(self, batch_per_replica=batch,
                       gradient_sparsity=self._sparsity_over(batch / self.batch_per_replica),
                       step_compute_s=(step_compute_s if step_compute_s is not None
                                       else self.step_compute_s))

    @property
    def gradient_bytes(self) -> float:
        """Bytes of one dense gradient (= of the parameters)."""
        return float(self.params * self.bytes_per_element)

    @property
    def touched_bytes(self) -> float:
        """Bytes a sparse-aware exchange (a parameter server) moves per direction."""
        return self.gradient_bytes * self.gradient_sparsity

    @property
    def push_bytes(self) -> float:
        """What one worker pushes to the parameter servers: dense gradients whole, the
        embedding tables' touched rows with an int64 index each where the rows are known."""
        if not self.embedding_row_bytes:
            return self.touched_bytes
        return self.dense_bytes + self.sparse_rows_bytes

    def pull_bytes(self, workers: int) -> float:
        """What one worker pulls back after a synchronous round: the dense parameters and
        every row some worker changed (the union of ``workers`` independent draws,
        ``_independent_rows``), with their indices."""
        if not self.embedding_row_bytes or self.dense_fraction >= 1:
            return self.touched_bytes
        tables = self.gradient_bytes - self.dense_bytes
        union = tables * self._independent_rows(max(1, workers))
        return self.dense_bytes + union * (1 + 8 / self.embedding_row_bytes)

    def rows_touched(self, draws: float) -> float:
        """The fraction of the sparse rows (the embedding tables; the whole gradient of a
        profile that gives only a sparsity) that ``draws`` batches of ``batch_per_replica``
        samples touch (fractional draws: a smaller batch): a built-in recommender's by its
        Zipf-distributed ids (``workloads.costs``), else as independent draws."""
        sparse = self._sparse_fraction
        if self.recsys is None or sparse <= 0 or self.gradient_sparsity >= 1:
            return self._independent_rows(draws)
        return self._of_tables(expected_touched_fraction(
            self.recsys, max(1, round(self.batch_per_replica * draws))))

    def _independent_rows(self, draws: float) -> float:
        """``rows_touched`` as independent draws, each touching the same fraction f of the
        rows: 1 - (1 - f)^draws, an upper bound where ids are skewed (they repeat more).
        What a parameter-server worker pulls back (``pull_bytes``) is read this way: on
        the checked-in wire runs (docs/validation/2026-11-25-wire) recsys:S's asynchronous
        workers' bytes are then 2% and 8% under the wire on 3 and 4 hosts, and 12% and 22%
        under by the Zipf count of their union."""
        sparse = self._sparse_fraction
        if sparse <= 0 or self.gradient_sparsity >= 1:
            return min(1.0, self.gradient_sparsity)
        return 1 - (1 - self._of_tables(self.gradient_sparsity)) ** draws

    @property
    def _sparse_fraction(self) -> float:
        return 1.0 - self.dense_fraction if self.embedding_row_bytes else 1.0

    def _of_tables(self, gradient_fraction: float) -> float:
        """A touched fraction of the whole gradient as the sparse rows' fraction."""
        sparse = self._sparse_fraction
        return min(1.0, max(0.0, gradient_fraction - (1 - sparse)) / sparse)

    def _sparsity_over(self, draws: float) -> float:
        if draws == 1 or self.gradient_sparsity >= 1:
            return self.gradient_sparsity
        sparse = self._sparse_fraction
        return (1.0 - sparse) + sparse * self.rows_touched(draws)

    def updated_values(self, samples: float, framework: str = "torch") -> float:
        """Gradient values the optimizer applies in a step of ``samples`` samples: every
        parameter's, or where embedding tables have sparse gradients the dense layers' and
        the tables' rows. torch's sparse gradient is uncoalesced, a row per looked-up id with
        repeats not merged (its sparse embedding backward; NVIDIA DLRM's fused gather,
        dlrm/cuda_src/gather_gpu_fused_pytorch_impl.cu), and SGD adds it row by row (``add_``
        of an uncoalesced sparse tensor is ``index_add_``: aten/src/ATen/native/sparse/cuda/
        SparseCUDATensorMath.cu, add_out_dense_sparse_cuda): one row per lookup. Elsewhere
        the distinct rows the samples touched (``rows_touched``)."""
        if not self.embedding_row_bytes:
            return self.params * min(1.0, self.gradient_sparsity)
        dense = self.params * self.dense_fraction
        row = self.embedding_row_bytes / BYTES_PER_PARAM
        if framework == "torch" and self.embedding_lookups:
            return dense + samples * self.embedding_lookups * row
        tables = self.params - dense
        return dense + tables * self.rows_touched(samples / self.batch_per_replica)

    def drawing(self, times: int) -> WorkloadProfile:
        """This workload's exchanged gradient when a replica sums ``times`` micro-batches
        before it exchanges (gradient accumulation): the union of the rows they touch
        (``rows_touched``) and every lookup's row, as TensorFlow concatenates IndexedSlices
        rather than merging them. Its compute stays one micro-batch's; a runner's measured
        per-server traffic no longer applies."""
        if times <= 1 or self.gradient_sparsity >= 1:
            return self
        return replace(self, gradient_sparsity=self._sparsity_over(times),
                       embedding_lookups=self.embedding_lookups * times, ps_traffic=None)

    @property
    def lookup_rows_bytes(self) -> float:
        """One replica's embedding gradients as TensorFlow hands them over: an IndexedSlices
        row (values and an int64 index) per lookup, repeated ids not merged (recsys:S on 3
        hosts: 195 kB on the wire per host and step, 177 kB by this count, 117 kB by
        distinct rows). Distinct rows where the lookups are unknown."""
        if not self.embedding_lookups or not self.embedding_row_bytes:
            return self.sparse_rows_bytes
        return (self.batch_per_replica * self.embedding_lookups
                * (self.embedding_row_bytes + 8))

    @property
    def table_gradient_bytes(self) -> float | None:
        """The bytes a replica's sparse table gradients hold in a step (a row and an int64
        id per lookup, as torch's uncoalesced sparse gradient and TensorFlow's IndexedSlices
        keep them: ``lookup_rows_bytes``), in place of a dense gradient of the tables; None
        for a model without embedding tables."""
        return self.lookup_rows_bytes if self.embedding_row_bytes else None

    def ps_bytes(self, workers: int, pull: str = "changed") -> tuple[float, float]:
        """(push, pull) bytes of one worker per step. ``pull``: "changed", the rows any
        worker changed (the torch RPC servers here), or "whole": every variable read whole
        (TF's ParameterServerStrategy: measured on the wire, recsys:S on 3 hosts moved 1.8 MB
        per host per step against 0.14 MB of rows). From fractions alone, the union as
        independent draws; where a runner's tables are known (``ps_traffic``, per server:
        Zipf draws repeat, so the union is smaller) the step model takes those instead."""
        if pull not in PS_PULLS:
            raise SpecError(f"unknown parameter-server pull {pull!r} (choose from "
                            f"{', '.join(PS_PULLS)})")
        if pull == "whole":  # TF: IndexedSlices pushed as they come, variables read whole
            pushed = (self.dense_bytes + self.lookup_rows_bytes if self.embedding_row_bytes
                      else self.push_bytes)
            return pushed, self.gradient_bytes
        return self.push_bytes, self.pull_bytes(workers)

    @property
    def dense_bytes(self) -> float:
        return self.gradient_bytes * self.dense_fraction

    @property
    def sparse_rows_bytes(self) -> float:
        """One replica's touched embedding rows as IndexedSlices: values plus an int64 index
        per row (0 for a dense model)."""
        values = max(0.0, self.touched_bytes - self.dense_bytes)
        index = 8 * values / self.embedding_row_bytes if self.embedding_row_bytes else 0.0
        return values + index


PS_PULLS = ("changed", "whole")
# The one grammar of a workload as numbers is workloads.profile's (`--workload profile:` too).
PROFILE_KEYS = PROFILE_GRAMMAR_KEYS


def from_spec(spec: WorkloadSpec, *, sized_by: str = "definition") -> WorkloadProfile:
    """The one converter from a workload's record (a built-in, a known model, a profile, a
    transformer by its dimensions) to the simulator's: its numbers, its operators, and for a
    built-in recommender how its gradient splits into dense layers and embedding rows."""
    dense, row, tables, lookups = _embedding_split(spec)
    family, _, size = spec.name.partition(":")
    return WorkloadProfile(
        params=max(1, int(spec.params)), batch_per_replica=spec.batch_size,
        flops_per_sample=spec.flops_per_sample, step_compute_s=spec.step_time_s,
        gradient_sparsity=spec.expected_sparsity(), name=family, size=size,
        dense_fraction=dense, embedding_row_bytes=row, embedding_tables=tables,
        embedding_lookups=lookups, ops=spec.operators,
        recsys=spec.config if isinstance(spec.config, RecsysConfig) else None,
        optimizer=spec.optimizer,
        bytes_per_element=spec.bytes_per_element, optimizer_s=spec.optimizer_s,
        bucket_bytes=spec.bucket_bytes,
        activation_bytes_per_sample=spec.activation_bytes_per_sample, sized_by=sized_by)


def _embedding_split(spec: WorkloadSpec) -> tuple[float, float, int, float]:
    """(fraction of the gradient in dense tensors, bytes of one embedding row, tables, rows
    looked up per sample) of a model with embedding tables (a built-in recommender, DLRM);
    (1, 0, 1, 0) for everything else."""
    tables = spec.embedding_tables
    if tables is None:
        return 1.0, 0.0, 1, 0.0
    return (max(0.0, 1 - tables.params / spec.params), float(tables.dim * BYTES_PER_PARAM),
            len(tables.rows), float(tables.lookups_per_sample))
