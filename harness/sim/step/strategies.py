"""Strategy names: the simulator's, and how the real frameworks' names map onto them.

The simulator reasons about exchanges, not APIs: DDP, MirroredStrategy and
MultiWorkerMirroredStrategy all-reduce gradient buckets (NCCL's ring for large messages);
FSDP reduce-scatters gradients and all-gathers parameters; TF's ParameterServerStrategy is
asynchronous (a coordinator dispatches steps to workers independently), torch's RPC parameter
server here is synchronous; CentralStorageStrategy reduces to one device; TPUStrategy
all-reduces along the torus dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from harness.core.errors import SpecError, choices_message
from harness.core.strategies import ALLREDUCE_ALGORITHMS, LIBRARIES, SIMULATED_AS
from harness.core.strategies import BASELINES as BASELINE_STRATEGIES
from harness.sim.network.topology import Hierarchy, Topology, TopologyError, Torus, n_devices
from harness.sim.schedules.collectives import (
    binary_tree_allreduce,
    channel_orders,
    double_binary_tree_allreduce,
    halving_doubling_allreduce,
    multidim_allreduce,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)
from harness.sim.schedules.schedule import Schedule, parallel

ALLREDUCE = ALLREDUCE_ALGORITHMS  # the records own the list
# TensorFlow's custom training loop under (MultiWorker)MirroredStrategy: every gradient
# first, then one all-reduce of the dense ones and an all-gather of the sparse ones' rows.
AFTER_BACKWARD = "allreduce_after_backward"
# Embedding sharding: the dense layers all-reduced, the tables' looked-up rows and their
# gradients moved by all-to-all (sparse models only).
EMBEDDING_SHARDING = "embedding_sharding"
SIM_STRATEGIES = (*ALLREDUCE, AFTER_BACKWARD, "fsdp", "parameter_server", "parameter_server_async",
                  "central_storage", EMBEDDING_SHARDING)
#: The strategies `--strategy all` simulates (the unpipelined binary tree is a reference only;
#: embedding sharding is simulated when named, as it runs).
DEFAULT_STRATEGIES = tuple(s for s in SIM_STRATEGIES
                           if s not in ("allreduce_binary_tree", EMBEDDING_SHARDING))

#: (framework, real name) -> simulated strategy: the strategy records' (harness.core).
REAL_TO_SIM: dict[tuple[str, str], str] = dict(SIMULATED_AS)
#: Single-device baselines: nothing to simulate on a network.
BASELINES = {(s.framework, s.name) for s in BASELINE_STRATEGIES}


def resolve_strategy(name: str, framework: str | None = None) -> str:
    """A simulator strategy for a simulator name, a real name, or 'framework:name'.

    A bare 'parameter_server' means the simulator's synchronous one; say
    'tf:parameter_server' for TensorFlow's asynchronous strategy.
    """
    text = name.strip()
    if ":" in text:
        framework, _, text = text.partition(":")
    if framework is None and text in SIM_STRATEGIES:
        return text
    if framework is not None and (framework, text) in REAL_TO_SIM:
        return REAL_TO_SIM[(framework, text)]
    if framework is None:
        for (_fw, real), sim in REAL_TO_SIM.items():
            if real == text:
                return sim
    known = sorted({*SIM_STRATEGIES, *(f"{fw}:{n}" for fw, n in REAL_TO_SIM)})
    raise SpecError(choices_message("strategy", name, known))


def expand_strategies(names: str | Sequence[str]) -> list[tuple[str, str]]:
    """[(requested, simulated)] for 'all', one name, or a list; a strategy that several names
    map onto is simulated once, under the first name that asked for it."""
    items = [names] if isinstance(names, str) else list(names)
    out: list[tuple[str, str]] = []
    for item in items:
        pairs = ([(s, s) for s in DEFAULT_STRATEGIES] if item == "all"
                 else [(item, resolve_strategy(item))])
        out += [p for p in pairs if p[1] not in {sim for _, sim in out}]
    return out


def tree_chunks(nbytes: float) -> int:
    """Pipeline depth of the tree: about 1 MiB per chunk per tree, 1 to 64 chunks."""
    return int(min(64, max(1, math.ceil(nbytes / 2 / 2**20))))


def allreduce_schedule(strategy: str, topology: Topology, workers: int, nbytes: float
                       ) -> Schedule:
    """The all-reduce schedule of a strategy for ``workers`` ranks on devices 0..W-1."""
    if strategy == "allreduce_ring":
        return channel_rings(ring_allreduce, topology, workers)
    if strategy == "allreduce_tree":
        return double_binary_tree_allreduce(workers, tree_chunks(nbytes))
    if strategy == "allreduce_binary_tree":
        return binary_tree_allreduce(workers)
    if strategy == "allreduce_halving_doubling":
        return halving_doubling_allreduce(workers)
    if strategy == "allreduce_hierarchical":
        return multidim_allreduce(hierarchy_dims(topology, workers))
    raise SpecError(choices_message("all-reduce strategy", strategy, ALLREDUCE))


def hierarchy_dims(topology: Topology, workers: int) -> tuple[int, ...]:
    """The dimensions a hierarchical all-reduce runs along: (devices per host, hosts) or the
    torus dimensions; raises TopologyError where the workers do not fill them."""
    if isinstance(topology, Torus):
        if workers != n_devices(topology):
            raise TopologyError(f"a hierarchical all-reduce on a torus needs the whole slice "
                                f"({n_devices(topology)} workers, not {workers})")
        return topology.dims
    assert isinstance(topology, Hierarchy)
    g = topology.per_host
    if workers <= g:
        return (workers,)
    if workers % g:
        raise TopologyError(f"a hierarchical all-reduce needs whole hosts: {workers} workers "
                            f"are not a multiple of {g} devices per host")
    return (g, workers // g)


def fsdp_schedules(topology: Topology, workers: int, library: str = "nccl"
                   ) -> tuple[Schedule, Schedule]:
    """FSDP's two collectives: all-gather parameters, reduce-scatter gradients (rings, one
    per rail where NCCL would run several). gloo's reduce-scatter is an all-reduce whose
    result each rank slices: twice the bytes (measured on the wire, 2-4 ranks)."""
    scatter = ring_allreduce if library == "gloo" else ring_reduce_scatter
    return (channel_rings(ring_all_gather, topology, workers),
            channel_rings(scatter, topology, workers))


#: What a parameter-server worker pulls back, per framework (WorkloadSpec.ps_bytes):
#: the torch RPC servers here send the rows any worker changed, TF's ParameterServerStrategy
#: reads variables whole (both measured on the wire).
PS_PULL = {framework: lib.ps_pull for framework, lib in LIBRARIES.items()}


def rail_orders(topology: Topology, workers: int) -> list[np.ndarray]:
    """The rings NCCL builds on hosts of several GPUs with a NIC each (DGX-style rails):
    one channel per GPU position c, entering every host at GPU c and leaving it from GPU
    c-1, so that each channel crosses the network through its own NIC and all NICs carry a
    ring at once. One plain ring anywhere else (one device per host, a shared NIC, a single
    host, or workers that do not fill whole hosts): gloo and TF's CPU collectives build one.

    NCCL's graph search is richer (two channels per NIC, trees for small messages, NVLink
    SHARP); what matters for large messages is that every NIC carries bytes, which a single
    ring cannot do: its host boundaries all pass one NIC each.
    """
    if (not isinstance(topology, Hierarchy) or topology.per_host < 2 or topology.nic != "per_device"
            or workers <= topology.per_host or workers % topology.per_host):
        return [np.arange(workers)]
    return channel_orders(workers // topology.per_host, topology.per_host)


def channel_rings(ring: Callable[[int, np.ndarray], Schedule], topology: Topology,
                  workers: int) -> Schedule:
    """``ring`` (an all-reduce, reduce-scatter or all-gather) run once per channel on its own
    slice of the buffer, all channels at the same time."""
    orders = rail_orders(topology, workers)
    rings = [ring(workers, order) for order in orders]
    if len(rings) == 1:
        return rings[0]
    return parallel(rings[0].name, *rings)
