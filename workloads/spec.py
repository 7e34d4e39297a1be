"""The framework-neutral description of a workload: what runners, simulator and reports share.

A `WorkloadSpec` is a plain record (no TensorFlow, no torch): sizes, analytical costs and,
for built-in families, the architecture config that both framework builders follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads import costs
from workloads.configs import EmbeddingTables, ModelConfig, RecsysConfig

if TYPE_CHECKING:
    from workloads.operators import Op

FAMILIES = ("mlp", "cnn", "transformer", "recsys")
SIZES = ("S", "M", "L")
FRAMEWORKS = ("tf", "torch")
BYTES_PER_PARAM = 4  # gradients are exchanged as dense fp32
#: what a parameter-server worker pulls back: the changed rows, or every variable whole
PS_PULLS = ("changed", "whole")

# Task kinds: what the batch holds and which loss applies.
CLASSIFICATION = "classification"  # x -> one of `classes`, softmax cross-entropy
LANGUAGE_MODEL = "language_model"  # tokens -> next token, mean cross-entropy over positions
CLICK = "click"  # dense + multi-hot ids -> click probability, binary cross-entropy


class WorkloadError(ValueError):
    """Bad workload input; the message is one line naming the bad value and the choices."""


def choices_message(kind: str, value: object, allowed: Sequence[str]) -> str:
    """The wording every 'unknown X' error uses (same as the CLI's)."""
    return f"unknown {kind} {value!r} (choose from {', '.join(allowed)})"


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """A workload, the one record every path reads: runners build it, the calibrator sizes
    it, the simulator and the recommender time and place it, reports name it.

    `family`/`size` name a built-in (config set); known models (workloads.known) use family
    'known', user and profile workloads 'user' / 'profile', each with an empty size and its
    own `given_name`. `sparsity` is the expected fraction of gradient entries touched per step
    at `batch_size` (1.0 = dense). It holds what the model is, never how a run deploys it
    (bytes per exchanged element, buckets: ``workloads.execution.Execution``) nor what a
    step costs (a stated or measured compute or update time:
    ``harness.sim.systems.calibration.Calibration``); what the simulator learns of the model
    beyond its definition (a run's size, its blocks) it adds to this same record.
    """

    params: int
    family: str = "profile"
    size: str = ""
    task: str = "profile"
    batch_size: int = 32  # default per-replica batch
    flops_per_sample: float | None = None  # training FLOPs (forward + backward); None = unknown
    sparsity: float = 1.0
    config: ModelConfig | None = None
    # the frameworks whose runners build it: a built-in's both, a user's model its own one,
    # a known model or a profile none
    frameworks: tuple[str, ...] = ()
    given_name: str = ""  # a known model's, a profile's or a user's name
    # Bytes one sample keeps for backward (no recomputation); None = unknown.
    activation_bytes_per_sample: float | None = None
    # the forward operators of one sample (workloads.operators), where known: what the
    # device model times; a built-in's come from its config (``operators``)
    ops: tuple[Op, ...] = ()
    # embedding tables a known model states (a built-in recommender's are its config's)
    tables: EmbeddingTables | None = None
    # what the weights are updated with (a known model's cited setup; Adam otherwise)
    optimizer: str = "adam"
    # micro-batches a replica sums before it exchanges: part of the exchanged gradient's
    # definition (set by ``drawing`` together with ``sparsity``: its embedding gradient holds
    # every one's lookups), not an option of how the run deploys
    draws: int = 1
    # parameters of one of the model's repeated blocks (a transformer's layer, a residual
    # block; ``sim.model.structure.fsdp_unit_params``); 0: unknown, or no blocks. FSDP wraps
    # one per unit where no size is stated (``Execution.fsdp_unit_bytes``)
    block_params: int = 0

    def __post_init__(self) -> None:
        if self.params < 1:
            raise WorkloadError(f"profile params={self.params} must be >= 1")
        if self.batch_size < 1:
            raise WorkloadError(f"profile batch={self.batch_size} must be >= 1")
        if not 0 < self.sparsity <= 1:
            raise WorkloadError(f"profile sparsity={self.sparsity} must be in (0, 1]")

    @property
    def embedding_tables(self) -> EmbeddingTables | None:
        """The workload's embedding tables with sparse gradients, where it has any."""
        if self.tables is not None:
            return self.tables
        return self.config.tables if isinstance(self.config, RecsysConfig) else None

    @property
    def recsys(self) -> RecsysConfig | None:
        """A built-in recommender's config: its tables and id distribution, from which the
        rows any batch touches are counted (``rows_touched``)."""
        return self.config if isinstance(self.config, RecsysConfig) else None

    @property
    def framework(self) -> str | None:
        """A user's model: the one framework its code is written in, so only that
        framework's strategies (and no other stack) can train it; None for what stratbench
        describes itself."""
        return self.frameworks[0] if self.family == "user" and self.frameworks else None

    @property
    def dense_fraction(self) -> float:
        """Fraction of the gradient held by dense tensors; the rest are embedding tables whose
        gradients a framework may send as touched rows (TF's IndexedSlices: values and an
        int64 index per row of ``embedding_row_bytes``)."""
        tables = self.embedding_tables
        return 1.0 if tables is None else max(0.0, 1 - tables.params / self.params)

    @property
    def embedding_row_bytes(self) -> float:
        tables = self.embedding_tables
        return 0.0 if tables is None else float(tables.dim * BYTES_PER_PARAM)

    @property
    def sparse_tables(self) -> int:
        """The sparse gradients a framework exchanges one by one (one per table)."""
        tables = self.embedding_tables
        return 1 if tables is None else len(tables.rows)

    @property
    def embedding_lookups(self) -> float:
        """Rows looked up per sample, all tables, every summed micro-batch (0: unknown)."""
        tables = self.embedding_tables
        return 0.0 if tables is None else float(tables.lookups_per_sample * self.draws)

    @property
    def operators(self) -> tuple[Op, ...]:
        """This workload's operators: stated, or its architecture's."""
        if self.ops or self.config is None:
            return self.ops
        from workloads.operators import config_operators

        return config_operators(self.config)

    @property
    def name(self) -> str:
        """What result rows and answers call it: ``mlp:M``, a known model's or a user's."""
        return self.given_name or f"{self.family}:{self.size}"

    def row_names(self) -> tuple[str, str]:
        """(workload, size) as result rows store the name: ``mlp`` and ``M`` for a built-in,
        the name and '' otherwise."""
        workload, _, size = self.name.partition(":")
        return workload, size

    @property
    def grad_bytes(self) -> int:
        """Bytes of one dense fp32 gradient, as a run records it (its ``grad_bytes`` column);
        what the simulator exchanges is ``gradient_bytes``, at the run's element size
        (``Execution.gradient_element_bytes``)."""
        return self.params * BYTES_PER_PARAM

    def flops_per_step(self, batch_size: int | None = None) -> float | None:
        """Training FLOPs of one step of one replica."""
        if self.flops_per_sample is None:
            return None
        return self.flops_per_sample * (batch_size or self.batch_size)

    def expected_sparsity(self, batch_size: int | None = None) -> float:
        """Expected touched fraction for a batch of this size (1.0 for dense models)."""
        if self.config is None:
            return self.sparsity
        return costs.expected_touched_fraction(self.config, batch_size or self.batch_size)

    def sparsity_of(self, batch: Mapping[str, np.ndarray]) -> float:
        """The touched fraction of this actual batch (counts distinct looked-up rows)."""
        if self.config is None:
            return self.sparsity
        return costs.touched_fraction(self.config, batch)

    # --- what a step exchanges: read by the simulator, the memory model, the recommender

    def at(self, batch: int | None = None) -> WorkloadSpec:
        """This workload at another batch per replica (a sparse gradient's touched rows with
        it: ``rows_touched``)."""
        batch = batch or self.batch_size
        return replace(self, batch_size=batch,
                       sparsity=self._sparsity_over(batch / self.batch_size))

    def gradient_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        """Bytes of one dense gradient (= of the parameters) at ``element_bytes`` each (what
        the run exchanges: ``Execution.gradient_element_bytes``)."""
        return float(self.params * element_bytes)

    def touched_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        """Bytes a sparse-aware exchange (a parameter server) moves per direction."""
        return self.gradient_bytes(element_bytes) * self.sparsity

    def push_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        """What one worker pushes to the parameter servers: dense gradients whole, the
        embedding tables' touched rows with an int64 index each where the rows are known."""
        if not self.embedding_row_bytes:
            return self.touched_bytes(element_bytes)
        return self.dense_bytes(element_bytes) + self.sparse_rows_bytes(element_bytes)

    def pull_bytes(self, workers: int, element_bytes: int = BYTES_PER_PARAM) -> float:
        """What one worker pulls back after a synchronous round: the dense parameters and
        every row some worker changed (the union of ``workers`` independent draws,
        ``_independent_rows``), with their indices."""
        if not self.embedding_row_bytes or self.dense_fraction >= 1:
            return self.touched_bytes(element_bytes)
        dense = self.dense_bytes(element_bytes)
        tables = self.gradient_bytes(element_bytes) - dense
        union = tables * self._independent_rows(max(1, workers))
        return dense + union * (1 + 8 / self.embedding_row_bytes)

    def rows_touched(self, draws: float) -> float:
        """The fraction of the sparse rows (the embedding tables; the whole gradient of a
        profile that gives only a sparsity) that ``draws`` batches of ``batch_size``
        samples touch (fractional draws: a smaller batch): a built-in recommender's by its
        Zipf-distributed ids (``workloads.costs``), else as independent draws."""
        sparse = self._sparse_fraction
        if self.recsys is None or sparse <= 0 or self.sparsity >= 1:
            return self._independent_rows(draws)
        return self._of_tables(costs.expected_touched_fraction(
            self.recsys, max(1, round(self.batch_size * draws))))

    def _independent_rows(self, draws: float) -> float:
        """``rows_touched`` as independent draws, each touching the same fraction f of the
        rows: 1 - (1 - f)^draws, an upper bound where ids are skewed (they repeat more).
        What a parameter-server worker pulls back (``pull_bytes``) is read this way: on
        the checked-in wire runs (validation/2026-11-25-wire) recsys:S's asynchronous
        workers' bytes are then 2% and 8% under the wire on 3 and 4 hosts, and 12% and 22%
        under by the Zipf count of their union."""
        sparse = self._sparse_fraction
        if sparse <= 0 or self.sparsity >= 1:
            return min(1.0, self.sparsity)
        return 1 - (1 - self._of_tables(self.sparsity)) ** draws

    @property
    def _sparse_fraction(self) -> float:
        return 1.0 - self.dense_fraction if self.embedding_row_bytes else 1.0

    def _of_tables(self, gradient_fraction: float) -> float:
        """A touched fraction of the whole gradient as the sparse rows' fraction."""
        sparse = self._sparse_fraction
        return min(1.0, max(0.0, gradient_fraction - (1 - sparse)) / sparse)

    def _sparsity_over(self, draws: float) -> float:
        if draws == 1 or self.sparsity >= 1:
            return self.sparsity
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
            return self.params * min(1.0, self.sparsity)
        dense = self.params * self.dense_fraction
        row = self.embedding_row_bytes / BYTES_PER_PARAM
        if framework == "torch" and self.embedding_lookups:
            return dense + samples * self.embedding_lookups * row
        tables = self.params - dense
        return dense + tables * self.rows_touched(samples / self.batch_size)

    def drawing(self, times: int) -> WorkloadSpec:
        """This workload's exchanged gradient when a replica sums ``times`` micro-batches
        before it exchanges (gradient accumulation): the union of the rows they touch
        (``rows_touched``) and every lookup's row, as TensorFlow concatenates IndexedSlices
        rather than merging them. Its compute stays one micro-batch's; a runner's measured
        per-server traffic no longer applies (``PsDeployment.traffic``)."""
        if times <= 1 or self.sparsity >= 1:
            return self
        return replace(self, sparsity=self._sparsity_over(times), draws=self.draws * times)

    def lookup_rows_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        """One replica's embedding gradients as TensorFlow hands them over: an IndexedSlices
        row (values and an int64 index) per lookup, repeated ids not merged (recsys:S on 3
        hosts: 195 kB on the wire per host and step, 177 kB by this count, 117 kB by
        distinct rows). Distinct rows (at ``element_bytes``) where the lookups are unknown."""
        if not self.embedding_lookups or not self.embedding_row_bytes:
            return self.sparse_rows_bytes(element_bytes)
        return (self.batch_size * self.embedding_lookups
                * (self.embedding_row_bytes + 8))

    @property
    def table_gradient_bytes(self) -> float | None:
        """The bytes a replica's sparse table gradients hold in a step (a row and an int64
        id per lookup, as torch's uncoalesced sparse gradient and TensorFlow's IndexedSlices
        keep them: ``lookup_rows_bytes``), in place of a dense gradient of the tables; None
        for a model without embedding tables."""
        return self.lookup_rows_bytes() if self.embedding_row_bytes else None

    def ps_bytes(self, workers: int, pull: str = "changed",
                 element_bytes: int = BYTES_PER_PARAM) -> tuple[float, float]:
        """(push, pull) bytes of one worker per step. ``pull``: "changed", the rows any
        worker changed (the torch RPC servers here), or "whole": every variable read whole
        (TF's ParameterServerStrategy: measured on the wire, recsys:S on 3 hosts moved 1.8 MB
        per host per step against 0.14 MB of rows). From fractions alone, the union as
        independent draws; where a runner's tables are known (``PsDeployment.traffic``, per
        server: Zipf draws repeat, so the union is smaller) the step model takes those
        instead."""
        if pull not in PS_PULLS:
            raise WorkloadError(choices_message("parameter-server pull", pull, PS_PULLS))
        if pull == "whole":  # TF: IndexedSlices pushed as they come, variables read whole
            pushed = (self.dense_bytes(element_bytes) + self.lookup_rows_bytes(element_bytes)
                      if self.embedding_row_bytes else self.push_bytes(element_bytes))
            return pushed, self.gradient_bytes(element_bytes)
        return self.push_bytes(element_bytes), self.pull_bytes(workers, element_bytes)

    def dense_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        return self.gradient_bytes(element_bytes) * self.dense_fraction

    def sparse_rows_bytes(self, element_bytes: int = BYTES_PER_PARAM) -> float:
        """One replica's touched embedding rows as IndexedSlices: values plus an int64 index
        per row (0 for a dense model)."""
        values = max(0.0, self.touched_bytes(element_bytes) - self.dense_bytes(element_bytes))
        index = 8 * values / self.embedding_row_bytes if self.embedding_row_bytes else 0.0
        return values + index

    def summary(self) -> dict[str, Any]:
        """A flat JSON-able description (for `--json` and tables)."""
        return {"name": self.name, "family": self.family, "size": self.size, "task": self.task,
                "batch_size": self.batch_size, "params": self.params,
                "flops_per_sample": self.flops_per_sample, "grad_bytes": self.grad_bytes,
                "sparsity": self.sparsity, "frameworks": list(self.frameworks),
                "activation_bytes_per_sample": self.activation_bytes_per_sample}
