"""How a workload runs, apart from what it is (``workloads.spec``) and what a system measured
(``harness.sim.systems.calibration``): the deployment's own choices, one record
(:class:`Execution`) that the device model, the step models and the commands read beside
the calibration.

Here in the lowest layer so that the profile grammar, the simulator, the predictor and the
commands all read one record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.precision import precision as find_precision
from workloads.spec import (
    BYTES_PER_PARAM,
    PS_PULLS,
    WorkloadError,
    WorkloadSpec,
    choices_message,
)

#: workers per parameter-server shard when no count is given
WORKERS_PER_SHARD = 8
#: DDP's default bucket_cap_mb: its buckets, and FSDP's units where the model has no blocks
DEFAULT_BUCKET = 25 * 2**20


@dataclass(frozen=True, kw_only=True)
class PsDeployment:
    """Where a parameter server's shards sit and what its workers pull back.

    ``shards``: how many servers (None: one per ``WORKERS_PER_SHARD`` workers);
    ``shard_weights``: their relative sizes, one per shard, as a real run's greedy placement
    of whole tensors left them (None: equal shards; given, they fix the count);
    ``colocated``: each server beside a worker rather than on a host of its own, ``beside``
    the workers they sit beside where a run placed them; ``pull``: "changed" rows or "whole"
    variables (TF's ParameterServerStrategy: ``WorkloadSpec.ps_bytes``); ``traffic``: one
    worker's (push, pull) bytes per server where a runner's placement and transport are
    known (``sim.sparse_traffic.torch_ps_traffic``), else the step's bytes split by shard
    size. A step that sums several micro-batches before it pushes (``WorkloadSpec.drawing``)
    pushes more rows than a runner's one batch: the traffic then no longer applies.
    """

    shards: int | None = None
    colocated: bool = False
    beside: tuple[int, ...] | None = None
    shard_weights: tuple[float, ...] | None = None
    pull: str = "changed"
    traffic: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __post_init__(self) -> None:
        if self.pull not in PS_PULLS:
            raise WorkloadError(choices_message("parameter-server pull", self.pull, PS_PULLS))
        if self.shards is not None and self.shards < 1:
            raise WorkloadError(f"ps shards={self.shards} must be >= 1")
        if self.shard_weights is not None:
            weights = tuple(float(x) for x in self.shard_weights)
            if not weights or min(weights) <= 0 or not all(map(math.isfinite, weights)):
                raise WorkloadError(f"shard weights {list(weights)} must be positive")
            object.__setattr__(self, "shard_weights", weights)
        if self.beside is not None:
            object.__setattr__(self, "beside", tuple(int(x) for x in self.beside))

    def shard_count(self, workers: int, colocated: bool | None = None) -> int:
        """The servers for ``workers`` workers: one per weight, else as stated, else one per
        ``WORKERS_PER_SHARD`` workers; colocated ones (``colocated``: where the strategy
        decides, as central storage does) one per worker at most."""
        colocated = self.colocated if colocated is None else colocated
        k = (len(self.shard_weights) if self.shard_weights is not None
             else self.shards if self.shards is not None
             else max(1, -(-workers // WORKERS_PER_SHARD)))
        if colocated and k > workers:
            raise WorkloadError(f"ps shards={k} must be from 1 to {workers} (one colocated "
                                f"server per worker at most)")
        return k

    def weights(self, workers: int) -> tuple[float, ...]:
        """Each shard's relative size (equal where none are stated)."""
        if self.shard_weights is not None:
            return self.shard_weights
        return (1.0,) * self.shard_count(workers)


#: the deployment nothing states: one dedicated server per 8 workers, changed rows pulled
DEFAULT_PS = PsDeployment()


@dataclass(frozen=True, kw_only=True)
class Execution:
    """How a run computes and deploys, beside the system's measured fits.

    ``precision``: what the device computes in (None: its training precision, fp32 bytes);
    ``framework``: whose defaults it runs under (None: torch); ``fused_attention`` and
    ``channels_last``: None is as the framework runs them by default; ``ps``: the parameter
    servers' deployment; ``recomputed``: every layer checkpointed, so the device model runs
    the forward twice (FLOPs- and time-based profiles scale their own figures by 4/3) and a
    replica keeps only the layers' inputs; ``owner_shares``: embedding sharding's each rank's
    share of the rows a replica asks for (one per worker; None: a built-in model's from its
    runner's placement, ``sim.sparse_traffic.embedding_owner_shares``, else an even split);
    ``gradient_element_bytes``: bytes of each gradient element the replicated strategies
    exchange (fp32 by default; DDP's bf16_compress_hook: 2); ``bucket_bytes``: DDP's bucket
    and FSDP's unit as stated (``simulate --bucket``, a profile's ``bucket=``; None: DDP's
    25 MiB, FSDP one unit per block of the model, ``fsdp_unit_bytes``).
    """

    precision: str | None = None
    framework: str | None = None
    fused_attention: bool | None = None
    channels_last: bool | None = None
    ps: PsDeployment = DEFAULT_PS
    recomputed: bool = False
    owner_shares: tuple[float, ...] | None = None
    gradient_element_bytes: int = BYTES_PER_PARAM
    bucket_bytes: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.gradient_element_bytes <= 16:
            raise WorkloadError(f"profile bytes={self.gradient_element_bytes} must be from 1 "
                                f"to 16")
        if self.bucket_bytes is not None and self.bucket_bytes < 1:
            raise WorkloadError(f"profile bucket={self.bucket_bytes} must be >= 1 byte")
        if self.owner_shares is not None and (
                any(not (math.isfinite(x) and x >= 0) for x in self.owner_shares)
                or sum(self.owner_shares) <= 0):
            raise WorkloadError(f"owner shares {list(self.owner_shares)} must be >= 0, not "
                                f"all 0")

    # --- what FSDP exchanges: the step model reads these

    @property
    def sharded_element(self) -> int:
        """Bytes of one element FSDP gathers its parameters and reduce-scatters their
        gradients in: its compute precision's (FSDP2's MixedPrecisionPolicy param_dtype,
        which the reduction takes unless told otherwise), else the exchanged element.
        Replicated weights stay fp32 under autocast, so DDP, all-reduce and
        parameter-server strategies exchange at ``gradient_element_bytes``."""
        if self.precision is None:
            return self.gradient_element_bytes
        return find_precision(self.precision).value_bytes

    def sharded_bytes(self, spec: WorkloadSpec) -> float:
        """Bytes of all the parameters as FSDP gathers them (and reduces their gradients)."""
        return float(spec.params * self.sharded_element)

    @property
    def ddp_bucket_bytes(self) -> int:
        """DDP's bucket: as stated, else its default 25 MiB."""
        return DEFAULT_BUCKET if self.bucket_bytes is None else self.bucket_bytes

    def fsdp_unit_bytes(self, spec: WorkloadSpec) -> float:
        """Bytes of one FSDP unit's gradient: a stated size, else one of the model's blocks
        at ``sharded_element`` (torchtitan wraps each TransformerBlock, torch's
        transformer_auto_wrap_policy each layer class), else DDP's default bucket."""
        if self.bucket_bytes is None and spec.block_params:
            return spec.block_params * self.sharded_element
        return float(self.ddp_bucket_bytes)


#: nothing stated: the device's training precision under torch's defaults
DEFAULT_EXECUTION = Execution()
