"""The strategies stratbench knows, per framework, and what kind of exchange each one does.

The kind is what the simulator and the recommender reason about: an all-reduce strategy,
a parameter server, a sharded one. Names are part of the CLI contract (DESIGN.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import InputError, choices_message


@dataclass(frozen=True)
class Strategy:
    framework: str
    name: str
    exchange: str  # none | allreduce | central | parameter_server | sharded
    synchronous: bool
    multi_process: bool
    summary: str


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("tf", "one_device", "none", True, False, "OneDeviceStrategy: the baseline."),
    Strategy("tf", "mirrored", "allreduce", True, False,
             "MirroredStrategy: one process, all local devices, all-reduce."),
    Strategy("tf", "central_storage", "central", True, False,
             "CentralStorageStrategy: variables on one device, compute mirrored."),
    Strategy("tf", "multi_worker_mirrored", "allreduce", True, True,
             "MultiWorkerMirroredStrategy: one process per worker, collective all-reduce."),
    Strategy("tf", "parameter_server", "parameter_server", False, True,
             "ParameterServerStrategy: workers + sharded ps tasks, ClusterCoordinator."),
    Strategy("tf", "tpu", "allreduce", True, False, "TPUStrategy: needs a TPU."),
    Strategy("torch", "single_device", "none", True, False, "One process: the baseline."),
    Strategy("torch", "ddp", "allreduce", True, True,
             "DistributedDataParallel: bucketed all-reduce overlapped with backward."),
    Strategy("torch", "fsdp", "sharded", True, True,
             "FSDP2 fully_shard: reduce-scatter gradients, all-gather parameters."),
    Strategy("torch", "parameter_server", "parameter_server", True, True,
             "Synchronous parameter server over torch.distributed.rpc with K shards."),
    Strategy("torch", "parameter_server_async", "parameter_server", False, True,
             "Asynchronous parameter server over RPC: each push applied at once."),
    Strategy("torch", "pipeline", "pipeline", True, True,
             "torch.distributed.pipelining: one stage per process, GPipe or 1F1B over "
             "micro-batches (transformer family; named, never part of 'all')."),
    Strategy("torch", "tensor_parallel", "tensor", True, True,
             "DTensor tensor parallelism: each block's attention heads and MLP split over "
             "the ranks (transformer family; named, never part of 'all')."),
)
#: Model-parallel strategies split one model: they run only when named, on models with layers.
MODEL_PARALLEL = ("pipeline", "tensor_parallel")

#: `run --tf-loop`: TensorFlow's two ways to train under a strategy.
TF_LOOPS = ("custom", "fit")
#: Why Keras 3's `model.fit` cannot train under these strategies on TF 2.21 (checked here,
#: ../shared/ENVIRONMENT.md); tf-keras could, but stratbench's TF models are Keras 3 models.
FIT_UNAVAILABLE = {
    "multi_worker_mirrored": "Keras 3's model.fit does not support MultiWorkerMirroredStrategy "
                             "(keras-team/keras#20585); --tf-loop custom trains it",
    "parameter_server": "Keras 3's model.fit has no ClusterCoordinator support for "
                        "ParameterServerStrategy; --tf-loop custom trains it",
}

FRAMEWORKS = ("tf", "torch")
# A synchronous strategy's weights must end this close to one device trained on the global
# batch (float32 reductions in another order); farther is a mismatch every output shows.
WEIGHT_TOLERANCE = 1e-4


def frameworks(option: str) -> tuple[str, ...]:
    if option == "all":
        return FRAMEWORKS
    if option not in FRAMEWORKS:
        raise InputError(choices_message("framework", option, (*FRAMEWORKS, "all")))
    return (option,)


def strategies(framework_option: str, names: tuple[str, ...] | list[str]) -> list[Strategy]:
    """Resolve `--framework` and `--strategy` into strategies; `all` or none means every
    data-parallel one (model-parallel strategies run when named)."""
    fws = frameworks(framework_option)
    pool = [s for s in STRATEGIES if s.framework in fws]
    if not names or "all" in names:
        return [s for s in pool if s.name not in MODEL_PARALLEL]
    chosen: list[Strategy] = []
    for name in names:
        matches = [s for s in pool if s.name == name]
        if not matches:
            allowed = sorted({s.name for s in pool})
            raise InputError(choices_message(
                "strategy", name, [*allowed, "all"]))
        chosen.extend(m for m in matches if m not in chosen)
    return chosen
