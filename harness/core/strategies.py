"""Every fact about a strategy, in one record each; and each framework's communication library.

Runners, the planner, the simulator, the predictor, the recommender and the CLI read these
records instead of keeping their own tables, so that a fact changes in one place. Names are
part of the CLI contract (DESIGN.md).

Two facts that one word used to blur are named apart: ``weights_match`` (a run of it must end
with one device's weights, so the weight check runs: TF's parameter_server does not, its
updates land in any order) and ``waits_every_step`` (every step waits for every worker as
our runners run it: TF's parameter_server does, since its coordinator joins each step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from harness.core.errors import InputError, choices_message

CPU, GPU, TPU = "cpu", "gpu", "tpu"
# The simulator's all-reduce algorithms (harness/sim/step/strategies.py names them); a library
# that picks among them per message and topology (NCCL, gloo) can run any of them.
ALLREDUCE_ALGORITHMS = ("allreduce_ring", "allreduce_tree", "allreduce_halving_doubling",
                        "allreduce_hierarchical", "allreduce_binary_tree")


@dataclass(frozen=True)
class Strategy:
    framework: str
    name: str
    # none | allreduce | central | parameter_server | sharded | embedding | pipeline | tensor
    exchange: str
    weights_match: bool  # must end with one device's weights (the weight check runs)
    multi_process: bool  # one process per replica (else one process drives every replica)
    summary: str
    waits_every_step: bool = False  # every step waits for every worker, as our runners run it
    simulated_as: str | None = None  # the simulator's model of it in general (None: baseline)
    measured_as: str | None = None  # what our runners time, where it differs from the above
    # other simulator models that are this strategy with another algorithm its library picks
    also_simulates: tuple[str, ...] = ()
    devices: tuple[str, ...] = (CPU, GPU)  # the devices it trains on
    spans_hosts: bool | None = None  # trains across hosts (default: when multi-process)
    emulated: bool = False  # runs one replica per emulated host (predicted for any cluster)
    across_hosts_as: str | None = None  # the strategy that runs it across hosts, if another
    options: tuple[str, ...] = ()  # run options (CaseOptions fields) it takes beyond all's
    # processes beside the replicas and servers (TF's parameter-server chief, which runs the
    # coordinator), sharing the emulated hosts' cores
    extra_processes: int = 0
    # how an embedding model's tables are updated: "sparse rows" (touched rows only: sparse
    # gradients and optimizer) or "dense" (every row, every step); the compute a worker of it
    # is predicted with (harness.calibrate.workload.worker_compute)
    embedding_updates: str = "dense"
    # its runtime's own time per step (harness.predict.step.runtime_overhead) is tensor work
    # every rank does at once, between collectives, so oversold cores stretch it as they
    # stretch compute (embedding sharding: the lookups' unique, sort, gather and pooling, the
    # owners' index_add; where a runtime's time is threads beside compute, RPC or hooks
    # overlapped with the exchange, it is not)
    runtime_in_lockstep: bool = False

    @property
    def label(self) -> str:
        return f"{self.framework} {self.name}"

    @property
    def timed_as(self) -> str | None:
        """The simulator's model of what our runners time."""
        return self.measured_as or self.simulated_as

    @property
    def uses_collectives(self) -> bool:
        """Whether it exchanges through the library's collectives (gloo's, TF's), whose own
        costs the loopback sweeps measure; parameter servers move tensors by RPC instead
        (TensorPipe, TF's gRPC variable reads and writes)."""
        model = self.timed_as
        return model is not None and not model.startswith("parameter_server")

    def simulates(self, model: str) -> bool:
        """Whether the simulator's ``model`` is this strategy (with some algorithm of its)."""
        return model in (self.simulated_as, *self.also_simulates)

    @property
    def across_hosts(self) -> bool:
        return self.multi_process if self.spans_hosts is None else self.spans_hosts

    def runs(self, model: str, device: str, hosts: int = 1) -> bool:
        """Whether it trains on ``device``s of ``hosts`` hosts and does what the simulator's
        ``model`` does."""
        return (device in self.devices and self.simulates(model)
                and (hosts <= 1 or self.across_hosts))


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("tf", "one_device", "none", True, False, "OneDeviceStrategy: the baseline.",
             options=("tf_loop",)),
    Strategy("tf", "mirrored", "allreduce", True, False,
             "MirroredStrategy: one process, all local devices, all-reduce.",
             waits_every_step=True, simulated_as="allreduce_after_backward",
             across_hosts_as="multi_worker_mirrored", options=("tf_loop", "cross_device_ops")),
    Strategy("tf", "central_storage", "central", True, False,
             "CentralStorageStrategy: variables on one device, compute mirrored.",
             waits_every_step=True, simulated_as="central_storage", options=("tf_loop",)),
    Strategy("tf", "multi_worker_mirrored", "allreduce", True, True,
             "MultiWorkerMirroredStrategy: one process per worker, collective all-reduce.",
             waits_every_step=True, simulated_as="allreduce_after_backward", emulated=True,
             options=("tf_loop", "collective", "collective_timeout_s")),
    # TF's ParameterServerStrategy is asynchronous, but our coordinator joins every step (so
    # that steps are comparable): each measured step is one synchronous round.
    Strategy("tf", "parameter_server", "parameter_server", False, True,
             "ParameterServerStrategy: workers + sharded ps tasks, ClusterCoordinator.",
             waits_every_step=True, simulated_as="parameter_server_async",
             measured_as="parameter_server", emulated=True, options=("ps_shards", "tf_loop"),
             extra_processes=1),
    # TPUStrategy all-reduces along the torus dimensions, on TPUs only.
    # One client process drives the whole slice, pod hosts included.
    Strategy("tf", "tpu", "allreduce", True, False, "TPUStrategy: needs a TPU.",
             waits_every_step=True, simulated_as="allreduce_hierarchical", devices=(TPU,),
             spans_hosts=True,
             options=("tf_loop",)),
    Strategy("torch", "single_device", "none", True, False,
             "One process: the baseline (embedding tables updated by touched rows).",
             embedding_updates="sparse rows"),
    # DDP's all-reduce is the library's choice of algorithm (NCCL's ring or tree, two-level
    # on multi-GPU hosts; gloo's ring or halving-doubling): any of the simulator's.
    Strategy("torch", "ddp", "allreduce", True, True,
             "DistributedDataParallel: bucketed all-reduce overlapped with backward.",
             waits_every_step=True, simulated_as="allreduce_ring",
             also_simulates=ALLREDUCE_ALGORITHMS, emulated=True, options=("bucket_mb",)),
    Strategy("torch", "fsdp", "sharded", True, True,
             "FSDP2 fully_shard: reduce-scatter gradients, all-gather parameters.",
             waits_every_step=True, simulated_as="fsdp", emulated=True),
    Strategy("torch", "parameter_server", "parameter_server", True, True,
             "Synchronous parameter server over torch.distributed.rpc with K shards.",
             waits_every_step=True, simulated_as="parameter_server", emulated=True,
             options=("ps_shards",), embedding_updates="sparse rows"),
    Strategy("torch", "parameter_server_async", "parameter_server", False, True,
             "Asynchronous parameter server over RPC: each push applied at once.",
             simulated_as="parameter_server_async", options=("ps_shards",),
             embedding_updates="sparse rows"),
    # DLRM-style hybrid: dense layers data-parallel, embedding rows sharded over the ranks,
    # looked-up rows and their gradients moved by all-to-all (recsys family; named only).
    Strategy("torch", "embedding_sharding", "embedding", True, True,
             "Embedding tables sharded over the ranks (table- or row-wise), rows and their "
             "gradients moved by all_to_all, dense layers all-reduced (recsys family; named, "
             "never part of 'all').",
             waits_every_step=True, simulated_as="embedding_sharding", emulated=True,
             embedding_updates="sparse rows", runtime_in_lockstep=True),
    Strategy("torch", "pipeline", "pipeline", True, True,
             "torch.distributed.pipelining: one stage per process, GPipe or 1F1B over "
             "micro-batches (transformer family; named, never part of 'all').",
             waits_every_step=True,
             options=("stages", "microbatches", "schedule", "stage_layers")),
    Strategy("torch", "tensor_parallel", "tensor", True, True,
             "DTensor tensor parallelism: each block's attention heads and MLP split over "
             "the ranks (transformer family; named, never part of 'all').",
             waits_every_step=True, options=("tensor",)),
)


def strategy(framework: str, name: str) -> Strategy | None:
    """The record of ``framework``'s ``name``, None for a name it does not have."""
    return _BY_KEY.get((framework, name))


_BY_KEY = {(s.framework, s.name): s for s in STRATEGIES}
#: (framework, name) -> the simulator's model of it, for every strategy that has one.
SIMULATED_AS: Mapping[tuple[str, str], str] = MappingProxyType(
    {(s.framework, s.name): s.simulated_as for s in STRATEGIES if s.simulated_as})
#: The strategies an emulated cluster runs, one replica per host.
EMULATED: tuple[Strategy, ...] = tuple(s for s in STRATEGIES if s.emulated)
#: The one-device baselines.
BASELINES: tuple[Strategy, ...] = tuple(s for s in STRATEGIES if s.exchange == "none")


def baseline(framework: str) -> Strategy:
    return next(s for s in BASELINES if s.framework == framework)


def running(model: str, device: str, hosts: int = 1) -> tuple[Strategy, ...]:
    """The framework strategies that train on ``device``s (cpu, gpu, tpu) of ``hosts`` hosts
    and do what the simulator's ``model`` does: what a user would run for a simulated
    answer (MirroredStrategy all-reduces one host's GPUs only)."""
    return tuple(s for s in STRATEGIES if s.runs(model, device, hosts))


@dataclass(frozen=True)
class CommLibrary:
    """A framework's communication library as the step rules need it, measured here
    (docs/SIMULATOR.md): passed to the rules instead of `if framework == ...` inside them."""

    framework: str
    name: str
    # Its own cost adds to the wire's rather than hiding under it. Measured on emulated hosts
    # at 100 Mbit/s (2 and 4 hosts, 256 KiB-4 MiB): TF's gRPC ring all-reduce and all-gather
    # took their wire time plus their loopback time (errors -10..-47% with the larger of the
    # two, -8..+3% with the sum); gloo took the larger of the two (the sum over-predicted
    # 16-64 KiB points by 30-60%). Checked afterwards on 800 Mbit/s and 6 hosts.
    serial_software: bool
    # One-way crossings a message of a collective costs, where more than one. Gloo's TCP
    # transport is a rendezvous protocol: a send waits for the receiver's "ready to receive"
    # notice (gloo/transport/tcp/pair.cc), and in a ring step every rank posts its send and
    # its receive at once, so each step pays the notice, then the data. Measured on 4 emulated
    # hosts at 800 Mbit/s (probed RTT 72-92 us), real-time priority: small all-reduce and
    # all-gather took 85-95 us per ring step more than on loopback, one RTT; the broadcast
    # tree, whose receivers are posted long before the data comes, 45 us per hop, one way.
    latency_trips: Mapping[str, int] = field(default_factory=dict)
    # What a parameter-server worker pulls each step (WorkloadSpec.ps_bytes): torch's
    # runner pulls the rows that changed, TF's workers read whole variables.
    ps_pull: str = "changed"
    # What `stratbench comm` times for it by default, and what only when named (`--ops`)
    sweep_ops: tuple[str, ...] = ()
    named_ops: tuple[str, ...] = ()

    def trips(self, collective: str) -> int:
        return self.latency_trips.get(collective, 1)

    def ops(self, asked: Sequence[str] | None) -> tuple[str, ...]:
        """The operations of ``asked`` (its default set when None) that it can time."""
        if asked is None:
            return self.sweep_ops
        return tuple(o for o in asked if o in self.sweep_ops or o in self.named_ops)


LIBRARIES: Mapping[str, CommLibrary] = MappingProxyType({
    "torch": CommLibrary("torch", "gloo", serial_software=False,
                         latency_trips=MappingProxyType(
                             {"allreduce_ring": 2, "all_gather_ring": 2}),
                         ps_pull="changed",
                         sweep_ops=("all_reduce", "broadcast", "reduce_scatter", "all_gather",
                                    "all_to_all", "ps_push", "ps_pull"),
                         # torch RPC (TensorPipe), the parameter server's transport
                         named_ops=("rpc",)),
    # what MultiWorkerMirroredStrategy exposes
    "tf": CommLibrary("tf", "TF gRPC", serial_software=True, ps_pull="whole",
                      sweep_ops=("all_reduce", "all_gather")),
})


def library(framework: str) -> CommLibrary:
    return LIBRARIES[framework]


#: Model-parallel strategies split one model: they run only when named, on models with layers.
MODEL_PARALLEL = tuple(s.name for s in STRATEGIES if s.exchange in ("pipeline", "tensor"))


def exchange_kind(framework: str, name: str) -> str:
    """none | allreduce | central | parameter_server | sharded | embedding | model_parallel,
    from the strategy records (a simulator name: the exchange of the real strategies it
    models): what a replica of it holds in memory follows from this."""
    if name in ("single_device", "one_device"):
        return "none"
    if name in MODEL_PARALLEL or "+" in name:
        return "model_parallel"
    if framework == "sim":
        kinds = [s.exchange for s in STRATEGIES if s.simulates(name)]
        return kinds[0] if kinds else "allreduce"
    record = strategy(framework, name)
    return record.exchange if record else "allreduce"


#: Strategies that fit one family of models run only when named, never under 'all'.
NAMED_ONLY = (*MODEL_PARALLEL,
              *(s.name for s in STRATEGIES if s.exchange == "embedding"))

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
#: A TF parameter-server cluster's gRPC server tasks: they run the graphs the chief sends.
TF_PS_SERVER_ROLES = ("worker", "ps")

FRAMEWORKS = ("tf", "torch")
# A synchronous strategy's weights must end this close to one device trained on the global
# batch (float32 reductions in another order); farther is a mismatch every output shows.
WEIGHT_TOLERANCE = 1e-4
# Beyond that, a run still matches where one device alone, trained again on another thread
# count, ends at least 1/ROUNDING_MARGIN as far from the reference: float32 order then moves
# the weights that much by itself, amplified step after step by training (mlp:L, TF, one
# device on 1 and on 2 threads at batch 384: 1.5e-8 apart after one step, 6.9e-5 after eight,
# 1.1e-4 after nine; six shards' gradients summed against one device, 2.4e-5 after eight; TF
# multi_worker_mirrored on 6 hosts had ended 1.9e-4 from one device and was flagged). A real
# divergence (a lost update, a gradient scaled wrong) moves weights by the learning rate times
# a gradient, orders above.
ROUNDING_MARGIN = 10.0


def weights_agree(diff: float, rounding_floor: float | None = None) -> bool:
    """Whether a synchronous run ended with one device's weights: within WEIGHT_TOLERANCE,
    or within ROUNDING_MARGIN x the rounding floor measured for it."""
    if diff <= WEIGHT_TOLERANCE:
        return True
    return rounding_floor is not None and diff <= ROUNDING_MARGIN * rounding_floor


def frameworks(option: str) -> tuple[str, ...]:
    if option == "all":
        return FRAMEWORKS
    if option not in FRAMEWORKS:
        raise InputError(choices_message("framework", option, (*FRAMEWORKS, "all")))
    return (option,)


def strategies(framework_option: str, names: tuple[str, ...] | list[str]) -> list[Strategy]:
    """Resolve `--framework` and `--strategy` into strategies; `all` or none means every
    data-parallel one (model-parallel strategies and embedding sharding run when named)."""
    fws = frameworks(framework_option)
    pool = [s for s in STRATEGIES if s.framework in fws]
    if not names or "all" in names:
        return [s for s in pool if s.name not in NAMED_ONLY]
    chosen: list[Strategy] = []
    for name in names:
        matches = [s for s in pool if s.name == name]
        if not matches:
            allowed = sorted({s.name for s in pool})
            raise InputError(choices_message(
                "strategy", name, [*allowed, "all"]))
        chosen.extend(m for m in matches if m not in chosen)
    return chosen
