"""The device model against published training throughputs: one GPU or one node, the
configuration each row's authors ran (``published/device_training.json``, each row with its
source and the line quoted).

Two comparisons, both printed:

* **out of the box**: every row predicted from the system files alone (datasheet peaks, the
  cited large-GEMM efficiency per precision, memory bandwidth, the launch floor); nothing is
  fitted to these rows;
* **after one fit per device and precision**: the efficiency of each (system, precision)
  fitted on the one row the file names for it, every other row of that group predicted.

    python -m harness.validate.devices

A row's step is ``accumulation`` micro-batches of forward and backward (no faster than their
kernels issue), each after the first adding its gradients into the accumulated ones (torch's
AccumulateGrad), the optimizer's update once (over 1/gpus of the parameters where the
optimizer is sharded), the framework's step overhead, and on several GPUs the gradient
exchange the simulator leaves exposed after the last backward.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from statistics import median
from typing import Any, TypedDict

from harness.core.errors import SpecError
from harness.core.layout import Layout, mechanisms_of
from harness.sim.api import simulate
from harness.sim.model.memory import optimizer_slots
from harness.sim.model.profile import for_simulation
from harness.sim.model.structure import layered
from harness.sim.step.data_parallel import accumulated_step
from harness.sim.systems.calibration import stating
from harness.sim.systems.compute import fit_efficiency
from harness.sim.systems.device_model import (
    FP32_BYTES,
    DeviceRate,
    accumulation_seconds,
    device_rate,
    launch_floor,
    optimizer_kernels,
    optimizer_seconds,
    pass_times,
    training_precision,
)
from harness.sim.systems.preset import load_preset
from harness.validate.layout_step import PER_HOST, layout_step
from workloads.hf import dims_of
from workloads.known import bert_large_ops, get_known
from workloads.operators import Op
from workloads.precision import precision as find_precision
from workloads.spec import WorkloadSpec

CORPUS = "device_training.json"
#: optimizer state slots per parameter (LAMB keeps Adam's two moments)
#: the bounds the issue set: out of the box, and after one fit per device and precision
OUT_OF_BOX_BOUND, FITTED_BOUND = 0.25, 0.10


class Published(TypedDict, total=False):
    """A published figure as its source prints it: ``value`` in ``unit`` over ``scope``;
    FLOP/s rows name the authors' formula (``flops``), a ratio its ``baseline``."""

    value: float
    unit: str
    scope: str
    flops: str
    baseline: float


#: where a row comes from: the source's address, the quoted line and table header, the
#: software, and what is uncertain about it (a list)
Source = dict[str, str | list[str]]
#: a stack's mechanisms as a layout search is given them (core.layout.MECHANISMS, and
#: whether norms split along the sequence and attention can be recomputed alone)
Mechanisms = dict[str, str | bool]


class Lengths(TypedDict):
    """A binning loader's sequence lengths: padded lengths per batch size and their shares."""

    about: str
    padded_at_batch: dict[str, list[float]]
    share: list[float]


class NamedStack(TypedDict):
    """A stack the corpus names: the published run whose mechanisms it is."""

    row: str
    about: str


class GainEntry(TypedDict, total=False):
    """A ``gains`` entry of the corpus file, as ``Gain`` takes it."""

    id: str
    model: str
    system: str
    gpus: int
    batch_per_gpu: int
    recompute: str
    baseline_precision: str
    precision: str
    published: Published
    source: Source
    baseline_gpus: int | None


class Corpus(TypedDict, total=False):
    """The corpus file (``published/device_training.json``) as parsed: its rows and the
    notes, fits, stacks and length distributions they refer to."""

    about: str
    conventions: list[str]
    assumed: list[str]
    excluded: list[str]
    fits: dict[str, str]
    stacks: dict[str, NamedStack]
    lengths: dict[str, Lengths]
    # each a Row's fields as published (free-form JSON: Row takes them, the rest is extra);
    # system_sources' also name the ``sets`` they fit and what they are ``relative_to``
    system_sources: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    misses: dict[str, dict[str, str]]
    gains: list[GainEntry]


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    system: str
    framework: str
    precision: str
    gpus: int
    batch_per_gpu: int
    accumulation: int
    optimizer: str
    published: Published
    source: Source
    seq: int | None = None
    channels_last: bool | None = None
    fused_attention: bool | None = None
    sharded_optimizer: bool = False
    fsdp: bool = False  # parameters, gradients and optimizer state sharded (ZeRO-3)
    sparse_embeddings: bool = False
    # a model-parallel run (Megatron-Core, NeMo): its degrees as published; data-parallel
    # is what the GPUs leave, micro-batches per pipeline are ``accumulation``
    tensor: int = 1
    pipeline: int = 1
    context: int = 1
    virtual: int = 1
    expert: int = 1
    recompute: str = "none"
    tp_overlap: bool = False  # tensor-parallel collectives under the GEMMs, where stated
    p2p: str = "async"  # pipeline sends: async, or blocking (DeepSpeed's pipeline engine)
    grad_reduce: str = "overlapped"  # or after_backward (DeepSpeed after the flush)
    stage_layers: tuple[int, ...] = ()  # blocks per pipeline stage where uneven
    param_gather_overlap: bool = False  # Megatron's --overlap-param-gather, where stated
    grad_accumulation: str = "fused"  # fp32_copy (DeepSpeed's BF16_Optimizer), half (NeMo's)
    # norms and dropout split along the sequence in the tensor-parallel group; None: wherever
    # TP > 1 (Megatron-Core's default with TP), False where the stack had none
    sequence_parallel: bool | None = None
    # whether the stack could recompute the attention alone (the layout search's choice;
    # the row's own recomputation is ``recompute``)
    selective_recompute: bool = True
    # why the memory model does not count what the row's stack kept, where it does not (a
    # recomputation it has no mode for): memory_reach leaves such a row out
    memory_unmodelled: str = ""
    # (padded length, share of micro-batches) where the loader bins sequences by length,
    # resolved from the file's ``lengths`` entry the row names (``padded_lengths``)
    padded: tuple[tuple[int, float], ...] = ()
    extra: dict[str, str] = field(default_factory=dict)  # the entry's other keys (lengths)

    def __post_init__(self) -> None:
        if self.model_parallel and self.grad_accumulation in EAGER_GRADIENT:
            raise SpecError(f"row {self.id}: grad_accumulation {self.grad_accumulation!r} is a "
                            f"data-parallel stack's; a model-parallel row accumulates as its "
                            f"layout does (fused, fp32_copy or half)")

    @property
    def model_parallel(self) -> bool:
        """Timed by the layout's step: split models, and any run beyond one host."""
        return (self.tensor * self.pipeline * self.context * self.expert > 1
                or self.gpus > PER_HOST or self.fsdp)

    @property
    def data(self) -> int:
        return self.gpus // (self.tensor * self.pipeline * self.context)

    @property
    def global_batch(self) -> int:
        return self.batch_per_gpu * self.accumulation * self.data

    def layout(self) -> Layout:
        """The layout as its authors ran it, the optimizer sharded over data-parallel ranks
        where they say so (Megatron's distributed optimizer)."""
        return Layout(data=self.data, stages=self.pipeline, tensor=self.tensor,
                      microbatches=self.accumulation, context=self.context,
                      expert=self.expert, virtual=self.virtual,
                      schedule="interleaved" if self.virtual > 1 else "1f1b",
                      sequence_parallel=(self.tensor > 1 if self.sequence_parallel is None
                                         else self.sequence_parallel),
                      zero=3 if self.fsdp else int(self.sharded_optimizer),
                      tp_overlap=self.tp_overlap, p2p=self.p2p,
                      grad_reduce=self.grad_reduce, stage_blocks=tuple(self.stage_layers),
                      param_gather_overlap=self.param_gather_overlap,
                      grad_accumulation=self.grad_accumulation)

    @property
    def group(self) -> str:
        return f"{self.system}/{self.precision}"

    @property
    def published_samples_per_gpu(self) -> float:
        """Samples (images, sequences, records) per second per GPU, as published."""
        value = float(self.published["value"])
        if self.published["scope"] == "step":  # seconds per optimizer step, all GPUs
            return self.global_batch / self.gpus / value
        if "flops" in self.published:  # model FLOP/s, counted by the authors' formula
            return value * 1e12 / published_flops_per_sample(self)
        if self.published["scope"] == "total_all_gpus":
            value /= self.gpus
        if "token" in self.published["unit"].lower():
            if not self.seq:
                raise SpecError(f"row {self.id}: tokens published but no seq")
            value /= self.seq
        return value


def published_flops_per_sample(row: Row) -> float:
    """One sequence's model FLOPs, forward and backward, as the row's authors counted them
    (``published.flops`` names the formula and whether it halves causal attention)."""
    return _authors_flops(row, row.published["flops"])


#: each FLOP formula a row may name: whose count it is, and the share of attention's s²
#: square it counts (0.5: halved for the causal mask)
FLOP_FORMULAS = {"nemo_llama_causal": ("nemo", 0.5), "nemo_llama_full_square": ("nemo", 1.0),
                 "megatron_causal": ("megatron", 0.5),
                 "megatron_full_square": ("megatron", 1.0), "maxtext_causal": ("maxtext", 0.5)}
#: the other reading of each, printed beside it
OTHER_READING = {name: other for name, (family, share) in FLOP_FORMULAS.items()
                 for other, (family2, share2) in FLOP_FORMULAS.items()
                 if family2 == family and share2 != share}


def _authors_flops(row: Row, formula: str) -> float:
    """``nemo_llama_*``: NeMo's llama2 formula (nemo/utils/flops_formulas.py),
    s·l·h²·(12 + 12g/a + 18f/h + 12s/h + 6V/(l·h)), g query groups of a heads, f the MLP
    width. ``megatron_*``: Megatron-LM's num_floating_point_operations (training.py, MCore
    v0.8), 12·s·l·h²·((1 + g/a + s/h) + m·k·f/h + V/(2·l·h)), m 1.5 for a SwiGLU MLP and 1
    for GELU's, k the experts each token is routed to. Both took the whole s² square of
    attention until they halved it for the causal mask (NeMo in commit 6251117f, 2025-08):
    ``_causal`` reads it halved. ``maxtext_causal``: MaxText's calculate_training_tflops
    (MaxText/train.py at 76bd53b0f, 2023-12), 6·N·s for the weights (N every parameter, the
    tied embedding once) and 12·a·d·l·s² for attention, halved in its own code "due to
    causality": one reading only."""
    dims = dims_of(row.model)
    if dims is None or formula not in FLOP_FORMULAS:
        raise SpecError(f"row {row.id}: no FLOP formula {formula!r} for {row.model}")
    family, share = FLOP_FORMULAS[formula]
    s, n, h = dims.seq, dims.layers, dims.hidden
    if family == "maxtext":
        head = dims.head_size or h // dims.heads
        return 6 * dims.params * s + 12 * dims.heads * head * n * s * s * share
    square = s / h * share
    if family == "megatron":
        mlp = (dims.top_k or 1) * (1.5 if dims.gated else 1.0) * dims.width / h
        return 12 * s * n * h * h * ((1 + dims.groups / dims.heads + square) + mlp
                                     + dims.vocab / (2 * n * h))
    return s * n * h * h * (12 + 12 * dims.groups / dims.heads + 18 * dims.width / h
                            + 12 * square + 6 * dims.vocab / (n * h))


def corpus() -> tuple[list[Row], Corpus]:
    """The rows and the file (its conventions, assumptions, exclusions and fit rows)."""
    text = (resources.files("harness.validate") / "published" / CORPUS).read_text("utf-8")
    data: Corpus = json.loads(text)
    return [_row(r, data) for r in data["rows"]], data


def _row(entry: dict[str, Any], data: Corpus) -> Row:
    known = {f for f in Row.__dataclass_fields__ if f not in ("extra", "padded")}
    return Row(**{k: v for k, v in entry.items() if k in known},
               padded=padded_lengths(entry["id"], entry.get("lengths"),
                                     entry["batch_per_gpu"], data.get("lengths", {})),
               extra={k: v for k, v in entry.items() if k not in known})


@dataclass(frozen=True)
class SystemFit:
    """A system file's efficiency for one precision as its published run gives it: the run,
    the efficiency, and the corpus run of the same recipe on the reference device where the
    efficiency is the reference file's times the two fits' ratio ("" where fitted directly)."""

    run: str
    efficiency: float
    relative_to: str = ""


def system_file_fits() -> dict[str, SystemFit]:
    """Each system-file efficiency taken from a published run outside the corpus (the file's
    ``system_sources``), by device and precision, refitted with this device model. An entry
    ``relative_to`` a corpus row ran the same recipe on another device: the ratio of the two
    fits is the devices' ratio under one stack, applied to the reference device's own file
    (so devices compare as one stack runs them, not each by its own stack's recipe).
    A test holds the system files to these, so a change to the device model that moves a fit
    shows as a stale system file rather than as a quietly better table."""
    _, data = corpus()
    out = {}
    for entry in data.get("system_sources", []):
        row = _row({k: v for k, v in entry.items() if k not in ("sets", "relative_to")}, data)
        fitted = _fit_on(row)
        reference = row_by_id(entry["relative_to"]) if "relative_to" in entry else None
        for group in entry["sets"]:
            if reference is None:
                out[group] = SystemFit(row.id, fitted)
                continue
            stated = load_preset(reference.system).device.efficiency(group.split("/")[1])
            out[group] = SystemFit(row.id, stated * fitted / _fit_on(reference), reference.id)
    return out


def _fit_on(row: Row) -> float:
    """The efficiency at which the device model gives ``row``'s published throughput."""
    return fit_efficiency(_step_at(row), row.global_batch / row.gpus
                          / row.published_samples_per_gpu)


def row_by_id(row_id: str) -> Row:
    """The corpus row ``row_id`` names."""
    (row,) = [r for r in corpus()[0] if r.id == row_id]
    return row


def stack_of(row: Row) -> Mechanisms:
    """The mechanisms ``row``'s authors ran, as a layout search is given a stack
    (``recommend``'s options): its layout's, and whether the stack splits norms along the
    sequence and can recompute selectively."""
    return mechanisms_of(row.layout()) | {
        "sequence_parallel": row.sequence_parallel is not False,
        "selective_recompute": row.selective_recompute}


def named_stack(name: str) -> tuple[Mechanisms, str]:
    """A stack by name (the corpus file's ``stacks``: each a published run whose
    mechanisms it is): (its mechanisms, what it is and which run). ValueError, one line,
    naming the choices."""
    stacks = corpus()[1].get("stacks", {})
    if name not in stacks:
        raise ValueError(f"unknown stack {name!r} (choose from {', '.join(stacks)})")
    entry = stacks[name]
    row = row_by_id(entry["row"])
    return stack_of(row), f"{name}: {entry['about']} (as {row.id} ran)"


def resolve_stack(stated: Mechanisms) -> Mechanisms:
    """A project target's stack as the search takes it: the stack ``like`` names
    (``named_stack``), with the mechanisms stated beside it over it. ValueError, one line,
    for an unknown name."""
    rest = {k: v for k, v in stated.items() if k != "like"}
    if "like" not in stated:
        return rest
    return named_stack(str(stated["like"]))[0] | rest


@dataclass(frozen=True)
class MemoryReach:
    """How full the published model-parallel runs' devices are by this memory model: the
    fullest one's share of its device's usable memory (capacity less the runtime's
    reserve), and which run it is."""

    row: str
    fraction: float
    needed: float
    usable: float


@functools.cache
def memory_reach() -> MemoryReach:
    """The fullest device among the corpus's model-parallel runs, every one of which ran
    (those whose memory the model does not count, ``memory_unmodelled``, left out).
    A layout that needs more of its device than that is beyond what any published run is
    known to fit, and the memory model counts less than a stack holds (on BigScience's
    measured layout sweep, ``harness.validate.layout_sweep.memory_gap_gb``)."""
    from harness.sim.model.memory import model_parallel_memory

    fullest: MemoryReach | None = None
    for row in corpus()[0]:
        if not row.model_parallel or row.memory_unmodelled:
            continue
        precision = find_precision(row.precision)
        layout = row.layout()
        needed = model_parallel_memory(
            layered(row.model, precision), layout,
            row.global_batch // (layout.data * layout.microbatches), row.optimizer,
            row.recompute, precision, row.fused_attention is not False).total
        usable = load_preset(row.system).device.usable_memory_bytes
        if fullest is None or needed / usable > fullest.fraction:
            fullest = MemoryReach(row.id, needed / usable, needed, usable)
    assert fullest is not None
    return fullest


def row_ops(row: Row, seq: int | None = None) -> tuple[Op, ...]:
    """One sample's operators of the row's model at ``seq`` tokens (the row's length)."""
    if row.model == "bert_large":
        return bert_large_ops(seq or row.seq or 512)
    return get_known(row.model).ops


def padded_lengths(row_id: str, name: str | None, batch_per_gpu: int,
                   lengths: dict[str, Lengths]) -> tuple[tuple[int, float], ...]:
    """(padded length, share of micro-batches) of the length distribution ``name`` that row
    ``row_id`` names, at its batch per GPU.

    A binning loader (NVIDIA's LDDL) draws each micro-batch from one length bin, chosen with
    the bin's share of the data, and pads it to its longest sequence, so the padded length
    depends on the batch: the entry gives it per batch size. The mean step is the shares'
    weighted sum of the steps at those lengths, not the step at the mean length (attention's
    s² and the GEMMs' shapes are not linear in it)."""
    if not name:
        return ()
    if name not in lengths:
        raise SpecError(f"row {row_id}: no length distribution {name!r}")
    entry = lengths[name]
    padded = entry["padded_at_batch"].get(str(batch_per_gpu))
    if padded is None:
        raise SpecError(f"row {row_id}: {name!r} has no padded lengths at batch "
                        f"{batch_per_gpu}")
    return tuple((round(length), share)
                 for length, share in zip(padded, entry["share"], strict=True))


def updated_params(row: Row) -> float:
    """Gradient values the optimizer applies each step (``WorkloadSpec.updated_values``):
    every parameter's, or for sparse embeddings the dense layers' and one row per lookup."""
    model = get_known(row.model) if row.model != "bert_large" else get_known("bert_large")
    if not row.sparse_embeddings:
        return float(model.params)
    return for_simulation(model.spec()).updated_values(row.batch_per_gpu * row.accumulation)


def dense_params(row: Row) -> float:
    """The values a micro-batch's backward adds into dense gradients: every parameter, or
    the dense layers' where the embeddings' gradients are sparse (torch appends a sparse
    gradient's rows rather than adding them)."""
    spec = for_simulation(get_known(row.model).spec())
    return float(spec.params) * (spec.dense_fraction if row.sparse_embeddings else 1.0)


#: how a data-parallel row's stack accumulates micro-batches' gradients (the row's
#: ``grad_accumulation``): fused into the weight-gradient GEMM's buffer (Megatron's, the
#: default: nothing more to pay), or added by torch after each backward (AccumulateGrad) into
#: fp32 gradients (fp32 weights, or autocast over them: ``eager``) or into the half-precision
#: gradients of a halved model (``eager_half``: NVIDIA's BERT calls ``model.half()``)
EAGER_GRADIENT = {"eager": lambda precision: FP32_BYTES,
                  "eager_half": lambda precision: find_precision(precision).value_bytes}


def add_seconds(row: Row, rate: DeviceRate) -> float:
    """One micro-batch's gradients added into the sum, where the row's stack adds them after
    each backward; 0 where it fuses the add into the weight-gradient GEMM."""
    element = EAGER_GRADIENT.get(row.grad_accumulation)
    if element is None:
        return 0.0
    return accumulation_seconds(dense_params(row), element(row.precision), rate)


def rate_of(row: Row, efficiency: float | None) -> DeviceRate:
    device = load_preset(row.system).device
    return device_rate(device, row.precision, efficiency,
                       "fitted" if efficiency is not None else "",
                       row.framework, row.fused_attention, row.channels_last)


def predict_step(row: Row, efficiency: float | None = None) -> dict[str, float | str]:
    """The row's optimizer step on one of its GPUs, in parts: its micro-batches composed as
    the recommender composes a data-parallel step (``data_parallel.accumulated_step``)."""
    if row.model_parallel:
        return _model_parallel_step(row, efficiency)
    rate = rate_of(row, efficiency)
    micro, launch_bound = 0.0, True
    for seq, share in row.padded or ((row.seq or 0, 1.0),):
        passes = pass_times(row_ops(row, seq or None), row.batch_per_gpu, rate)
        floor = launch_floor(passes.kernels, rate)
        micro += share * max(passes.device_s, floor)
        launch_bound = launch_bound and floor >= passes.device_s
    params = updated_params(row)
    add = add_seconds(row, rate)
    slots = optimizer_slots(row.optimizer)
    shard = row.gpus if row.sharded_optimizer else 1
    update = max(optimizer_seconds(params / shard, find_precision(row.precision), slots, rate),
                 launch_floor(optimizer_kernels(params / shard, slots), rate))
    exposed = 0.0
    if row.gpus > 1:
        profile = WorkloadSpec(params=int(get_known(row.model).params),
                               batch_size=row.batch_per_gpu, given_name=row.id)
        (result,) = simulate(f"preset:{row.system},hosts=1", row.gpus, "ddp", profile,
                             stating(None, compute_s=micro))
        exposed = float(result.exposed_comm_s)
    one = micro + update + exposed + rate.device.step_overhead_s  # a step of one micro-batch
    step = accumulated_step("ddp", one, micro, update, row.accumulation, add)
    return {"step_s": step, "micro_s": micro, "optimizer_s": update, "exposed_comm_s": exposed,
            "accumulate_s": (row.accumulation - 1) * add,
            "samples_per_gpu": row.batch_per_gpu * row.accumulation / step,
            "bound": "launch" if launch_bound else "device"}


def _model_parallel_step(row: Row, efficiency: float | None) -> dict[str, float | str]:
    """A model-parallel row: its pipeline scheduled, its collectives placed on the system
    file's hosts (harness/validate/layout_step.py)."""
    precision = find_precision(row.precision)
    result = layout_step(row.system, row.gpus, layered(row.model, precision), row.layout(),
                         row.global_batch, precision, efficiency,
                         fused_attention=row.fused_attention is not False,
                         recompute=row.recompute, optimizer_slots=optimizer_slots(row.optimizer))
    step = result.step_time_s
    return {"step_s": step, "micro_s": math.nan, "optimizer_s": math.nan,
            "exposed_comm_s": math.nan,
            "samples_per_gpu": row.global_batch / row.gpus / step, "bound": "layout"}


def fitted_efficiencies(rows: list[Row], fits: dict[str, str]) -> dict[str, float]:
    """Each group's efficiency, fitted on its named row alone."""
    by_id = {r.id: r for r in rows}
    out = {}
    for group, rid in fits.items():
        row = by_id[rid]
        target = row.global_batch / row.gpus / row.published_samples_per_gpu
        out[group] = fit_efficiency(_step_at(row), target)
    return out


def _step_at(row: Row) -> Callable[[float], float]:
    return lambda efficiency: float(predict_step(row, efficiency)["step_s"])


def compare() -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(the fitted efficiencies, one record per row)."""
    rows, data = corpus()
    fits = data["fits"]
    fitted = fitted_efficiencies(rows, fits)
    out = []
    for row in rows:
        published = row.published_samples_per_gpu
        box = predict_step(row)
        after = predict_step(row, fitted.get(row.group))
        out.append({
            "id": row.id, "model": row.model if not row.model.startswith("transformer:")
            else "llama2_7b (by dims)", "system": row.system, "precision": row.precision,
            "gpus": row.gpus, "batch": row.batch_per_gpu, "published": published,
            "out_of_box": box["samples_per_gpu"],
            "out_of_box_error": float(box["samples_per_gpu"]) / published - 1,
            "fitted": after["samples_per_gpu"],
            "fitted_error": float(after["samples_per_gpu"]) / published - 1,
            "fit_row": fits.get(row.group) == row.id, "group": row.group,
            "source": row.source.get("source_url", ""),
            "other_reading": _other_reading(row, float(after["samples_per_gpu"])),
        })
    return fitted, out


@dataclass(frozen=True)
class PublishedCheck:
    """How far the device model was off on the published runs of one system and precision,
    with the system file's own efficiencies: what a prediction for that system uses, so the
    error a recommendation on it can carry (out of the box, not after the corpus's fits)."""

    system: str
    precision: str
    rows: int
    median_abs_error: float
    worst_abs_error: float

    def describe(self) -> str:
        runs = f"{self.rows} published {self.system} {self.precision} run" + (
            "s" if self.rows != 1 else "")
        return (f"the device model's median |error| on {runs}, worst "
                f"{self.worst_abs_error:.0%}: python -m harness.validate.devices")


@functools.cache
def published_check(system: str, precision: str | None = None) -> PublishedCheck | None:
    """The corpus rows on ``system`` at ``precision`` (None: the device's training precision,
    as a prediction takes it), predicted out of the box; None where the corpus has none (a
    system file of the user's own: its efficiency is not ours)."""
    if precision is None:
        device = load_preset(system).device
        if device is None:
            return None
        precision = training_precision(device)
    rows = [r for r in corpus()[0] if r.system == system and r.precision == precision]
    if not rows:
        return None
    errors = [abs(float(predict_step(r)["samples_per_gpu"]) / r.published_samples_per_gpu - 1)
              for r in rows]
    return PublishedCheck(system, precision, len(rows), median(errors), max(errors))


class OtherReading(TypedDict):
    """A FLOP/s row's fitted error under its formula's other reading."""

    formula: str
    fitted_error: float


def _other_reading(row: Row, predicted: float) -> OtherReading | None:
    """The fitted error had the published FLOP/s been counted by the formula's other reading
    (the authors did not say which): how much the comparison moves with the assumption."""
    formula = row.published.get("flops")
    if formula is None:
        return None
    other = OTHER_READING.get(formula)
    if other is None:  # the authors' code says which
        return None
    published = float(row.published["value"]) * 1e12 / _authors_flops(row, other)
    return {"formula": other, "fitted_error": predicted / published - 1}


def format_comparison(fitted: dict[str, float], records: list[dict[str, Any]]) -> str:
    lines = [f"{'row':<52}{'prec':>5}{'GPUs':>5}{'published':>11}{'out of box':>12}"
             f"{'error':>8}{'fitted':>11}{'error':>8}"]
    for r in records:
        mark = "  (fit here)" if r["fit_row"] else ""
        lines.append(f"{r['id']:<52}{r['precision']:>5}{r['gpus']:>5}{r['published']:>11.4g}"
                     f"{r['out_of_box']:>12.4g}{r['out_of_box_error']:>+8.1%}"
                     f"{r['fitted']:>11.4g}{r['fitted_error']:>+8.1%}{mark}")
    others = [r for r in records if r["other_reading"]]
    if others:
        lines.append("rows published as model FLOP/s, read by the other formula instead:")
    for r in others:
        lines.append(f"  {r['id']:<50}{r['other_reading']['formula']:<26}fitted error "
                     f"{r['other_reading']['fitted_error']:+.1%}")
    box = [abs(r["out_of_box_error"]) for r in records]
    after = [abs(r["fitted_error"]) for r in records if not r["fit_row"]]
    lines.append("samples/s per GPU (images, sequences, records; tokens / sequence length)")
    lines.append(f"out of the box (system files only): worst |error| {max(box):.1%}, "
                 f"median {sorted(box)[len(box) // 2]:.1%} (bound {OUT_OF_BOX_BOUND:.0%})")
    lines.append(f"after one fit per device and precision: worst |error| {max(after):.1%} "
                 f"over the {len(after)} rows not fitted (bound {FITTED_BOUND:.0%}); fitted "
                 + ", ".join(f"{g} {e:.1%}" for g, e in fitted.items()))
    return "\n".join(lines)


@dataclass(frozen=True)
class Gain:
    """A published ratio of per-GPU throughput between two runs of one model and stack that
    differ in precision (torchtitan's Float8 over bf16) or in GPUs (its FSDP on 8 and on 128):
    a ratio, so it holds where the absolute figures were measured on parts the system files
    do not describe."""

    id: str
    model: str
    system: str
    gpus: int
    batch_per_gpu: int
    recompute: str
    baseline_precision: str
    precision: str
    published: Published
    source: Source
    baseline_gpus: int | None = None  # the baseline's GPUs where they differ

    @property
    def published_gain(self) -> float:
        return float(self.published["value"]) / float(self.published["baseline"])

    def step_s(self, precision_name: str, gpus: int) -> float:
        """The step under FSDP (parameters, gradients and optimizer state sharded over every
        GPU) on ``gpus``, at the system file's cited efficiency: the same samples a GPU
        either way, so steps compare as per-GPU throughputs."""
        precision = find_precision(precision_name)
        layout = Layout(data=gpus, zero=3)
        return layout_step(self.system, gpus, layered(self.model, precision), layout,
                           self.batch_per_gpu * gpus, precision, None,
                           fused_attention=True, recompute=self.recompute).step_time_s


#: a published ratio beside the simulator's (``compare_gains``), from precision@GPUs to
#: precision@GPUs (``from`` is a keyword: the functional form)
GainRecord = TypedDict("GainRecord", {"id": str, "gpus": int, "published": float,
                                      "predicted": float, "error": float, "from": str,
                                      "to": str})


def compare_gains() -> list[GainRecord]:
    """Each published ratio beside the simulator's, out of the box."""
    _, data = corpus()
    out: list[GainRecord] = []
    for entry in data.get("gains", []):
        gain = Gain(**entry)
        before = gain.baseline_gpus or gain.gpus
        predicted = (gain.step_s(gain.baseline_precision, before)
                     / gain.step_s(gain.precision, gain.gpus))
        out.append({"id": gain.id, "gpus": gain.gpus, "published": gain.published_gain,
                    "predicted": predicted, "error": predicted / gain.published_gain - 1,
                    "from": f"{gain.baseline_precision}@{before}",
                    "to": f"{gain.precision}@{gain.gpus}"})
    return out


def format_gains(records: list[GainRecord]) -> str:
    lines = ["per-GPU throughput ratios, precision@GPUs to precision@GPUs (out of the box, at "
             "the system file's cited efficiencies):",
             f"{'row':<48}{'from':>10}{'to':>10}{'published':>11}{'predicted':>11}"
             f"{'error':>8}"]
    for r in records:
        lines.append(f"{r['id']:<48}{r['from']:>10}{r['to']:>10}"
                     f"{r['published']:>10.3f}x{r['predicted']:>10.3f}x{r['error']:>+8.1%}")
    return "\n".join(lines)


def format_system_fits(fits: dict[str, SystemFit]) -> str:
    lines = ["system files' efficiencies fitted on published runs outside the corpus:"]
    for group, fit in fits.items():
        system, precision = group.split("/")
        stated = load_preset(system).device.efficiency(precision)
        lines.append(f"  {group:<20}{fit.efficiency:>7.1%} on {fit.run} (the system file: "
                     f"{stated:.1%})")
        if fit.relative_to:
            lines.append(f"  {'':<27}relative to {fit.relative_to}")
    return "\n".join(lines)


def report(comparison: tuple[dict[str, float], list[dict[str, Any]]] | None = None) -> str:
    """What ``python -m harness.validate.devices`` prints (``comparison``: compare()'s, where
    a caller has it already)."""
    fitted, records = comparison or compare()
    return "\n".join([format_comparison(fitted, records), format_gains(compare_gains()),
                      format_system_fits(system_file_fits())])


def main() -> None:
    comparison = compare()
    print(report(comparison))
    if not all(math.isfinite(r["out_of_box_error"]) for r in comparison[1]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
