"""The training stacks an answer sends a user to, one record each, where no runner here runs
what was simulated: context and expert parallelism on GPUs, any sharded model on TPUs.

Each names the option that sets each parallel degree it is named for, so that an answer can
say how to run its layout there; the recommender tells its candidates apart by the layout,
not by the stack's name (``LAYOUT_STACKS``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from harness.core.layout import MECHANISMS
from harness.core.strategies import GPU, TPU


@dataclass(frozen=True, kw_only=True)
class Stack:
    """A training stack: the name answers print, the framework it is written in, the devices
    it shards a model on, the parallel degrees an answer sends a user to it for (each with the
    option that sets it: its configuration's key), and the mechanisms (``core.layout
    .MECHANISMS``) a layout search takes as stated for it."""

    name: str
    framework: str
    device: str
    degrees: Mapping[str, str]
    mechanisms: tuple[str, ...] = MECHANISMS
    source: str = field(default="", compare=False)  # where its options are read

    def __post_init__(self) -> None:
        unknown = set(self.mechanisms) - set(MECHANISMS)
        if unknown:
            raise ValueError(f"stack {self.name}: {sorted(unknown)} are not mechanisms")
        object.__setattr__(self, "degrees", MappingProxyType(dict(self.degrees)))

    def setting(self, dims: Sequence[str]) -> str:
        """How ``dims`` are set in it, in words: its name and each one's option."""
        options = dict.fromkeys(self.degrees[d] for d in dims if d in self.degrees)
        return f"{self.name} {', '.join(options)}"


#: Parallel dimensions the simulator models that no runner here runs, run on GPUs by these
#: stacks, each with the option that sets the degree (Megatron-LM's
#: megatron/training/arguments.py; torchtitan's [parallelism] config).
MEGATRON_CORE = Stack(name="Megatron-Core", framework="torch", device=GPU,
                      degrees={"context": "--context-parallel-size",
                               "expert": "--expert-model-parallel-size"},
                      source="megatron/training/arguments.py")
TORCHTITAN = Stack(name="torchtitan", framework="torch", device=GPU,
                   degrees={"context": "--parallelism.context_parallel_degree",
                            "expert": "--parallelism.expert_parallel_degree"},
                   source="torchtitan's [parallelism] config")
#: The stack that shards a model on TPUs, where no runner here does (TF's TPUStrategy
#: replicates it whole): MaxText (JAX), each parallel degree one axis of its device mesh,
#: set within a slice as below (across slices, the dcn_ keys of the same names), per
#: MaxText/configs/base.yml at 315ebb5 (AI-Hypercomputer/maxtext: mesh_axes data, stage,
#: fsdp, context, tensor, expert; ici_*_parallelism).
MAXTEXT = Stack(name="MaxText (JAX)", framework="jax", device=TPU,
                degrees={"data": "ici_data_parallelism", "fsdp": "ici_fsdp_parallelism",
                         "pipeline": "ici_pipeline_parallelism",
                         "tensor": "ici_tensor_parallelism",
                         "tensor_parallel": "ici_tensor_parallelism",
                         "context": "ici_context_parallelism",
                         "expert": "ici_expert_parallelism"},
                source="MaxText/configs/base.yml at 315ebb5")

#: every stack, in the order answers name them
STACKS: tuple[Stack, ...] = (MEGATRON_CORE, TORCHTITAN, MAXTEXT)

#: Stacks that run many layouts of one model: what tells their candidates apart is the
#: layout, not the stack's name.
LAYOUT_STACKS = frozenset(s.name for s in STACKS)


def stacks_on(device: str) -> tuple[Stack, ...]:
    """The stacks that shard a model on ``device``s."""
    return tuple(s for s in STACKS if s.device == device)


def needs_stack(dims: Sequence[str]) -> bool:
    """Whether some of ``dims`` no runner here runs, only another stack (context and
    expert parallelism: Megatron-Core, torchtitan)."""
    return any(d in s.degrees for s in stacks_on(GPU) for d in dims)


def stacks_running(dims: Sequence[str], device: str) -> tuple[str, str]:
    """(the stacks that run every one of ``dims`` on ``device``s, in words; how to set
    them): ('', '') where none of ``dims`` needs another stack, or none runs them there.
    On TPUs every split and sharded data axis needs one (``MAXTEXT``)."""
    if device == TPU:
        (tpu,) = stacks_on(TPU)
        if not any(d in tpu.degrees for d in dims) or list(dims) == ["data"]:
            return "", ""
        return tpu.name, tpu.setting(dims)
    gpu = stacks_on(GPU)
    needed = [d for d in dims if any(d in s.degrees for s in gpu)]
    if not needed or device != GPU:
        return "", ""
    running = [s for s in gpu if needed[0] in s.degrees]
    return " or ".join(s.name for s in running), "; ".join(s.setting(needed) for s in running)
