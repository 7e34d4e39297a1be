"""A model-parallel layout: the one record of how a training job splits its devices.

Parallel degrees (data, pipeline, tensor, context, expert), the pipeline's micro-batches,
schedule, virtual stages and uneven stages, and the mechanisms a stack runs (sequence
parallelism, optimizer sharding, when gradients reduce and how they accumulate, blocking
sends, the overlaps). The simulator times it (``harness/sim/step/model_parallel.py``), memory
sizes it, the recommender searches over it, and a result row stores it under ``COLUMNS``,
read back by ``from_columns`` (``harness/predict/step``). Precision and recomputation live
elsewhere: the device model and the step own them. torchtitan's ``ParallelDims`` is the
model: one record, every reader.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

#: How the data-parallel axis holds model state: replicated, the optimizer's state sharded
#: (Megatron-LM's distributed optimizer, ZeRO-1), or everything sharded (FSDP, ZeRO-3).
SHARDING = {0: "replicated", 1: "distributed optimizer", 3: "fsdp"}
GRAD_REDUCE = ("overlapped", "after_backward")
CONTEXT_COMM = ("ring", "all_gather")
P2P = ("async", "blocking")
GRAD_ACCUMULATION = ("fused", "fp32_copy", "half")
#: The fields of a layout that are its stack's mechanisms rather than its split: how the
#: stack a user runs reduces, sends and overlaps. ``simulate`` and ``recommend`` take them as
#: options (the recommender searches the split and keeps these as stated); Layout's defaults
#: are what an answer assumes when none is stated.
MECHANISMS = ("grad_reduce", "context_comm", "p2p", "tp_overlap", "param_gather_overlap",
              "ep_overlap", "grad_accumulation")
#: What a searched layout may use unless the stack says otherwise, beyond Layout's literal
#: defaults: sequence parallelism wherever tensor parallelism, and selective recomputation
#: (the attention's scores only) where none does not fit. Megatron-Core and torchtitan have
#: both; BigScience's Megatron-DeepSpeed, which trained BLOOM, had neither (both came with
#: Korthikanti et al. 2022, arXiv 2205.05198, after its fork): ``recommend
#: --no-sequence-parallel --no-selective-recompute``.
SEARCH_DEFAULTS: dict[str, Any] = {"sequence_parallel": True, "selective_recompute": True}
#: a result row's column for each field that runs and the simulator both record; the
#: older names a stored dataset may still carry are read as aliases
COLUMNS = {"data": "data_parallel", "stages": "pipeline_stages", "tensor": "tensor_parallel",
           "context": "context_parallel", "expert": "expert_parallel",
           "microbatches": "microbatches", "schedule": "pipeline_schedule",
           "virtual": "virtual_stages"}
#: uneven stages' blocks per stage, '1,2,1' (absent where the stages are equal runs)
STAGE_LAYERS = "stage_layers"
ALIASES = {"pipeline_stages": ("stages",), "tensor_parallel": ("tensor_parallel_degree",),
           "pipeline_schedule": ("schedule",)}


@dataclass(frozen=True)
class Layout:
    """How devices are split: ``data`` replicas of a ``stages``-stage pipeline whose stages
    each span ``tensor`` devices, running ``microbatches`` micro-batches per step."""

    data: int = 1
    stages: int = 1
    tensor: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    virtual: int = 1  # chunks of layers per device (the interleaved schedule)
    sequence_parallel: bool = False  # norms and dropout split along the sequence (Megatron)
    zero: int = 0  # SHARDING of the data-parallel axis
    # when the data-parallel gradient reduction runs: bucket by bucket during the last
    # backward (torch DDP, Megatron's overlap_grad_reduce) or after the whole backward
    # (Megatron-LM 2021's --DDP-impl local)
    grad_reduce: str = "overlapped"
    # blocks per pipeline chunk (stages x virtual, in chunk order); (): equal runs
    stage_blocks: tuple[int, ...] = ()
    # the sequence split over ``context`` devices (context parallelism): ring attention
    # passing K/V blocks overlapped with the attention (Megatron-Core's p2p) or K/V
    # all-gathered before it (Llama 3's)
    context: int = 1
    context_comm: str = "ring"
    # the experts of each MoE layer sharded over ``expert`` ranks of the data-parallel axis
    # (Megatron-Core's expert parallelism): tokens reach them by all-to-all
    expert: int = 1
    # pipeline sends: in the background (torch's isend, Megatron-Core) or waited for by the
    # sender (Megatron-LM 2021's p2p, synchronised after each exchange)
    p2p: str = "async"
    # tensor-parallel collectives: waited for between the GEMMs, or split into chunks that
    # run under them (Megatron's --tp-comm-overlap, Transformer Engine's userbuffers)
    tp_overlap: bool = False
    # with the distributed optimizer (zero=1): the updated parameters' all-gather run under
    # the next step's first forward (Megatron's --overlap-param-gather), so only the
    # gradients' reduce-scatter ends the step
    param_gather_overlap: bool = False
    # expert parallelism's dispatch and combine all-to-alls run under the adjacent
    # micro-batch's compute (Megatron-Core's combined 1F1B, --overlap-moe-expert-parallel-
    # comm: https://docs.nvidia.com/megatron-core/developer-guide/nightly/user-guide/
    # features/moe_a2a_overlap.html); without it each waits between its layer's parts
    ep_overlap: bool = False
    # how a half-precision run accumulates its micro-batches' gradients: into an fp32 buffer
    # by the weight-gradient GEMM itself (Megatron-LM's gradient-accumulation fusion), or
    # cast and added into an fp32 copy after each micro-batch's backward, the copy then
    # reduced (DeepSpeed's BF16_Optimizer, update_hp_grads: BLOOM's Megatron-DeepSpeed), or
    # into a gradient buffer of the training precision itself, reduced as it is (half: Apex's
    # DistributedFusedAdam with grad_sync_dtype bf16, NeMo's distributed_fused_adam)
    grad_accumulation: str = "fused"

    @property
    def devices(self) -> int:
        return self.data * self.stages * self.tensor * self.context

    def describe(self) -> str:
        parts = [f"dp={self.data}", f"pp={self.stages}", f"tp={self.tensor}"]
        if self.expert > 1:
            parts.append(f"ep={self.expert}")
        if self.context > 1:
            parts.append(f"cp={self.context}"
                         + ("" if self.context_comm == "ring" else f" {self.context_comm}"))
        if self.stages > 1:
            parts += [f"microbatches={self.microbatches}", self.schedule]
            if self.virtual > 1:
                parts.append(f"v={self.virtual}")
            if self.stage_blocks:
                parts.append(f"layers={runs(self.stage_blocks)}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero:
            parts.append("zero1" if self.zero == 1 else "fsdp")
        if self.p2p != "async" and self.stages > 1:
            parts.append("blocking p2p")
        if self.tp_overlap and self.tensor > 1:
            parts.append("tp overlap")
        if self.ep_overlap and self.expert > 1:
            parts.append("ep overlap")
        if self.param_gather_overlap and self.zero == 1:
            parts.append("param gather overlap")
        if self.grad_reduce != "overlapped" and self.data > 1:
            parts.append("reduce after backward")
        if self.grad_accumulation == "fp32_copy":
            parts.append("fp32 gradient copy")
        elif self.grad_accumulation == "half":
            parts.append("half-precision gradients")
        return ",".join(parts)

    def device(self, data: int, stage: int, tensor: int, context: int = 0) -> int:
        """Megatron-LM's order: tensor ranks adjacent (one host), then context, then data,
        then stages."""
        return tensor + self.tensor * (context + self.context * (data + self.data * stage))

    def ranks(self, stage: int, loops: str, next_context: bool = False) -> tuple[int, ...]:
        """``device`` of every (data, context, tensor) rank of ``stage``, listed as nested
        loops over ``loops`` (``d``, ``c``, ``t``, the outermost first); ``next_context``:
        each rank's next in its context ring. Remembered: a recommender places the same
        stages of the same layouts over and over."""
        return _ranks(self, stage, loops, next_context)

    def to_columns(self) -> dict[str, int | str]:
        """The layout as a result row stores it: ``layout`` (its description) and one
        column per ``COLUMNS`` field."""
        return {"layout": self.describe(),
                **{column: getattr(self, name) for name, column in COLUMNS.items()}}

    def case_options(self) -> dict[str, int | str]:
        """What a case carries of its layout (its options, under ``COLUMNS``, and uneven
        stages as ``stage_layers``, '1,2,1'): the runners read it back with
        ``from_columns``, the same as a stored row."""
        options: dict[str, int | str] = {column: getattr(self, name)
                                         for name, column in COLUMNS.items() if name != "data"}
        if self.stage_blocks:
            options[STAGE_LAYERS] = ",".join(map(str, self.stage_blocks))
        return options

    @classmethod
    def from_columns(cls, row: dict[str, Any], replicas: int | None = None) -> Layout | None:
        """The layout a row recorded (its columns, else its ``extra``, under ``COLUMNS`` or
        their older aliases); None where it recorded no split. ``data`` defaults to what
        ``replicas`` leave."""
        extra: dict[str, Any] = row["extra"] if isinstance(row.get("extra"), dict) else {}

        def value(column: str) -> Any:
            for name in (column, *ALIASES.get(column, ())):
                for source in (row, extra):
                    found = source.get(name)
                    if found is not None and not (isinstance(found, float)
                                                  and math.isnan(found)):
                        return found
            return None

        stages, tensor = value("pipeline_stages"), value("tensor_parallel")
        if stages is None and tensor is None:
            return None
        stages, tensor = int(stages or 1), int(tensor or 1)
        context = int(value("context_parallel") or 1)
        replicas = int(replicas if replicas is not None else row.get("replicas") or 1)
        return cls(data=max(1, replicas // (stages * tensor * context)), stages=stages,
                   tensor=tensor, context=context,
                   expert=int(value("expert_parallel") or 1),
                   microbatches=int(value("microbatches") or 1),
                   schedule=str(value("pipeline_schedule") or "1f1b"),
                   virtual=int(value("virtual_stages") or 1),
                   stage_blocks=_counts(value(STAGE_LAYERS)))


def _counts(text: Any) -> tuple[int, ...]:
    """'1,2,1' (or a stored list) -> (1, 2, 1); () for nothing stored."""
    if text is None or text == "":
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    return tuple(int(x) for x in items)


def runs(counts: tuple[int, ...]) -> str:
    """'7,8x14,7': blocks per stage, repeats folded."""
    out = []
    for value, group in itertools.groupby(counts):
        n = len(list(group))
        out.append(f"{value}x{n}" if n > 2 else ",".join([str(value)] * n))
    return ",".join(out)


def ends_lighter(blocks: int, chunks: int) -> tuple[int, ...]:
    """Blocks per chunk when ``chunks`` does not divide ``blocks``: the middle chunks a
    whole share rounded up, the shortfall taken off the first and the last in turn (they
    also hold the embedding and the head). Llama 3 405B: 126 layers on 16 stages ->
    7, 8 x 14, 7 (Meta trained it with fewer layers on the first and last stages;
    Megatron-LM's --decoder-first/last-pipeline-num-layers and torchtitan's split do as much)."""
    per = -(-blocks // chunks)
    counts = [per] * chunks
    short = per * chunks - blocks
    ends = [0, chunks - 1]
    for i in range(short):
        counts[ends[i % 2] if chunks > 1 else 0] -= 1
    if min(counts) < 1 or short > 2 * per - 2:  # the ends cannot absorb it: spread it
        base, extra = divmod(blocks, chunks)
        counts = [base + (1 if i < extra else 0) for i in range(chunks)]
    return tuple(counts)


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` not above ``at_most`` (at least 1): how many equal parts,
    or how large equal parts, ``n`` samples are cut into under a cap."""
    return next(d for d in range(min(n, at_most), 0, -1) if n % d == 0)


def splits(counts: tuple[int, ...], blocks: int, chunks: int) -> bool:
    """Whether ``counts`` give each of ``chunks`` chunks at least one of ``blocks`` blocks,
    all of them: the one rule a run's plan and the simulator hold uneven stages to."""
    return len(counts) == chunks and sum(counts) == blocks and min(counts, default=0) >= 1


def parse_stage_layers(text: str, blocks: int, chunks: int) -> tuple[int, ...]:
    """``--stage-layers``: counts per stage ('7,8,8,...,7', repeats as '8x14'), or 'ends'
    (``ends_lighter``); InputError (one line) for text that is neither. Whether the counts
    fit the model is the reader's check (the simulator's ``check_layout``, a run's plan)."""
    from harness.core.errors import InputError

    if text.strip().lower() == "ends":
        return ends_lighter(blocks, chunks)
    counts: list[int] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        value, _, times = item.lower().partition("x")
        if not value.isdigit() or (times and not times.isdigit()):
            raise InputError(f"--stage-layers {text!r}: {item!r} is not a count (7) or a "
                             f"repeated count (8x14)")
        counts += [int(value)] * (int(times) if times else 1)
    return tuple(counts)


def stack_mechanisms(**stated: Any) -> dict[str, Any]:
    """The ``MECHANISMS`` a user stated, as the options spell them ('after-backward' is
    ``after_backward``); the ones left out keep Layout's defaults. ValueError, one line,
    for a name that is not a mechanism or a value that is not one of its choices."""
    names = (*MECHANISMS, *SEARCH_DEFAULTS)
    unknown = sorted(set(stated) - set(names))
    if unknown:
        raise ValueError(f"{unknown[0]} is not a stack mechanism (choose from "
                         f"{', '.join(names)})")
    out: dict[str, Any] = {name: value.replace("-", "_") if isinstance(value, str)
                           else bool(value) for name, value in stated.items()}
    choices = {"grad_reduce": GRAD_REDUCE, "context_comm": CONTEXT_COMM, "p2p": P2P,
               "grad_accumulation": GRAD_ACCUMULATION}
    for name, value in out.items():
        if name in choices and value not in choices[name]:
            raise ValueError(f"{name} {stated[name]!r} (choose from "
                             f"{', '.join(choices[name])})")
    return out


def mechanisms_of(layout: Layout) -> dict[str, Any]:
    """The stack's mechanisms ``layout`` runs with (its ``MECHANISMS`` fields)."""
    return {name: getattr(layout, name) for name in MECHANISMS}


def mechanisms_in_words(stated: dict[str, Any]) -> str:
    """What a searched layout assumes of the stack (``SEARCH_DEFAULTS``, then what was
    stated), each with the option that changes it."""
    merged = SEARCH_DEFAULTS | stated
    m = Layout(**{k: v for k, v in merged.items() if k in Layout.__dataclass_fields__})
    return "; ".join((
        "with tensor parallelism, norms and dropout " + (
            "split along the sequence" if m.sequence_parallel else "whole on every rank")
        + " (--no-sequence-parallel)",
        "the least recomputation that fits: " + (
            "none, the attention's scores, or every layer" if merged["selective_recompute"]
            else "none or every layer") + " (--no-selective-recompute)",
        "data-parallel gradients reduced " + (
            "bucket by bucket under the last backward" if m.grad_reduce == "overlapped"
            else "after the whole backward") + " (--grad-reduce)",
        "tensor-parallel collectives " + ("under the GEMMs" if m.tp_overlap
                                          else "waited for between the GEMMs")
        + " (--tp-overlap)",
        "the distributed optimizer's parameter all-gather " + (
            "under the next step's first forward" if m.param_gather_overlap
            else "at the end of the step") + " (--overlap-param-gather)",
        "pipeline sends " + ("in the background" if m.p2p == "async"
                             else "waited for by the sender") + " (--p2p)",
        "context ranks " + ("pass K/V blocks in a ring" if m.context_comm == "ring"
                            else "all-gather K/V") + " (--context-comm)",
        "expert all-to-alls " + ("under the adjacent micro-batch" if m.ep_overlap
                                 else "between their layer's parts") + " (--ep-overlap)",
        "micro-batch gradients accumulated " + {
            "fused": "in fp32 by the weight-gradient GEMM",
            "fp32_copy": "into an fp32 copy after each backward",
            "half": "in the training precision"}[m.grad_accumulation]
        + " (--grad-accumulation)"))


@functools.lru_cache(maxsize=4096)
def _ranks(layout: Layout, stage: int, loops: str, next_context: bool) -> tuple[int, ...]:
    size = {"d": layout.data, "c": layout.context, "t": layout.tensor}
    if sorted(loops) != ["c", "d", "t"]:
        raise ValueError(f"loops {loops!r}: name d, c and t once each")
    grid = dict(zip(loops, np.meshgrid(*(np.arange(size[a]) for a in loops), indexing="ij"),
                    strict=True))
    context = (grid["c"] + 1) % layout.context if next_context else grid["c"]
    placed = layout.device(cast(int, grid["d"]), stage, cast(int, grid["t"]),
                           cast(int, context))
    return tuple(np.asarray(placed).ravel().tolist())
