"""Model-parallel candidates for the recommender: when one replica does not fit a device.

For each device count of the sweep, every data x pipeline x tensor split the model can take
(tensor groups within a host, as Megatron-LM places them; stages dividing the blocks, or
any count the devices allow with the first and last stages lighter; one
sample per micro-batch, the smallest bubble; the 1F1B and interleaved schedules; FSDP x
tensor parallelism), each with the least activation recomputation that fits, is simulated
(``harness.sim.simulate_layout``); the fastest that fits the device's memory stands for
that count, else the one that needs the least. The same samples per device and
step as the data-parallel candidates, so the two compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from harness.core.errors import SpecError
from harness.core.layout import SEARCH_DEFAULTS, Layout, ends_lighter, largest_divisor
from harness.recommend.targets import Target, device_counts
from harness.sim.model.layered import RECOMPUTE, LayeredModel, check_layout
from harness.sim.model.memory import model_parallel_memory
from harness.sim.rows import LayoutRow
from harness.sim.step.model_parallel import layout_name
from harness.sim.systems.calibration import Calibration
from workloads.execution import DEFAULT_EXECUTION, Execution
from workloads.precision import FP32, Precision

MODEL_PARALLEL = "model_parallel"  # the exchange kind of these candidates
# Context-parallel splits are candidates where each rank keeps at least this many tokens:
# the shortest chunk of the published CP runs (NeMo's Llama 3 8B and 70B and NVIDIA's Llama
# 3.1 405B recipe, CP 2 at 8,192 tokens: harness/validate/published/device_training.json;
# Llama 3's long-context stage, CP 16 at 131,072). At 8,192 tokens CP 2 halves the
# activations a rank keeps, so a layout can drop recomputation (NVIDIA's 405B recipe runs
# none); shorter chunks only widen the search.
MIN_CONTEXT_CHUNK = 4096
# The interleaved schedule is tried only where 1F1B idles at least this share of the step
# (its bubble, (S - 1) / (M + S - 1)): a search bound, not a model figure.
INTERLEAVE_BUBBLE = 0.01


# The most micro-batches a candidate's pipeline is cut into: one sample each (the smallest
# bubble) up to this, larger ones beyond (the bubble is under 1% of 8,192 micro-batches on
# 64 stages either way), so that a large --global-batch does not schedule millions of passes.
MAX_MICROBATCHES = 8192


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _microbatches(samples: int) -> int:
    """Micro-batches for ``samples`` per pipeline: one sample each, else the most, up to
    ``MAX_MICROBATCHES``, that split them evenly."""
    return largest_divisor(samples, MAX_MICROBATCHES)


def candidate_layouts(model: LayeredModel, devices: int, per_host: int,
                      global_batch: int, mechanisms: Mapping[str, bool | str] | None = None
                      ) -> list[Layout]:
    """Every split of ``devices`` with a pipeline or tensor degree above one that the model
    and the batch allow, as Megatron-LM and torchtitan run them: sequence parallelism with
    tensor parallelism, the distributed optimizer with data parallelism, the sequence split
    over context ranks where it is long (``_contexts``), and beside each pipeline its
    interleaved schedule (``_virtual_stages``) where the blocks and micro-batches allow; and
    FSDP over the data axis with tensor parallelism (torchtitan's 2D). A data degree that
    does not divide the batch rules out only its own split, not the context-parallel ones
    that leave fewer data ranks. ``mechanisms``: the stack's (``harness.core.layout.
    MECHANISMS``, as the user stated them), the same on every candidate."""
    stack = SEARCH_DEFAULTS | dict(mechanisms or {})
    sequence_parallel = bool(stack.pop("sequence_parallel"))
    stack.pop("selective_recompute")  # what the step recomputes: layouts_at's
    # tensor groups inside a host, dividing it: a group of 3 or 6 on 8-GPU hosts straddles
    # two, its all-reduces leaving NVLink every layer, and Megatron's --tp-comm-overlap
    # (userbuffers over CUDA IPC) needs the group on one host; no published run does either
    tensors = ([t for t in _divisors(model.heads) if per_host % t == 0] if model.heads
               else [1])
    blocks = len(model.blocks)
    out = []
    for tensor in tensors:
        # stages that divide the blocks, and any stage count the devices allow with the
        # blocks split unevenly (fewer on the first and last: Llama 3 405B's 126 layers on
        # 16 stages), so power-of-two clusters are not held to the divisors of the layers
        counts = sorted(set(_divisors(blocks))
                        | {s for s in _divisors(devices // tensor) if s <= blocks}
                        if devices % tensor == 0 else _divisors(blocks))
        for stages in counts:
            if (stages == 1 and tensor == 1) or devices % (stages * tensor):
                continue
            replicas = devices // (stages * tensor)  # data x context
            for context in _contexts(model.seq, replicas):
                data = replicas // context
                if global_batch % data:
                    continue
                base = Layout(data, stages, tensor, _microbatches(global_batch // data),
                              sequence_parallel=tensor > 1 and sequence_parallel,
                              zero=1 if replicas > 1 else 0,
                              stage_blocks=_uneven(blocks, stages), context=context,
                              **stack)
                variants = [base]
                for virtual in _virtual_stages(blocks, stages, base.microbatches):
                    variants.append(replace(base, schedule="interleaved", virtual=virtual,
                                            stage_blocks=_uneven(blocks, virtual * stages)))
                if stages == 1 and base.microbatches > 1:  # no bubble to shrink: the
                    # replica's samples in one micro-batch, its reduction under all of it
                    variants.append(replace(base, microbatches=1))
                if context == 1 and stages == 1 and tensor > 1 and data > 1:
                    variants.append(replace(base, zero=3, microbatches=1))
                for expert in (2, 4, 8, 16, 32, 64):  # experts sharded over data ranks
                    if context == 1 and model.experts % expert == 0 and data % expert == 0:
                        variants.append(replace(base, expert=expert))
                out += _valid(model, variants, global_batch)
    return out


def _valid(model: LayeredModel, layouts: list[Layout], global_batch: int) -> list[Layout]:
    valid = []
    for layout in layouts:
        try:
            check_layout(model, layout, global_batch)
        except SpecError:
            continue
        valid.append(layout)
    return valid


def _contexts(seq: int, replicas: int) -> list[int]:
    """Context-parallel degrees to try: 1, and each power of two dividing the replicas that
    leaves every rank ``MIN_CONTEXT_CHUNK`` tokens or more in 2 C load-balanced chunks (NeMo's
    1M-token Llama 2 ran CP 32)."""
    out, context = [1], 2
    while context <= replicas and seq // context >= MIN_CONTEXT_CHUNK:
        if replicas % context == 0 and seq % (2 * context) == 0:
            out.append(context)
        context *= 2
    return out


def _virtual_stages(blocks: int, stages: int, microbatches: int) -> list[int]:
    """Chunks per device of the interleaved schedule: one block each, as Megatron-LM's 2024
    H100 table ran it. More chunks shrink both the bubble and, per Megatron's schedule, the
    activations the first device holds (L (1 + (P - 1) / (P V)) blocks' worth), at the cost
    of more sends, which the simulator times: on every published model-parallel run of the
    corpus it rated one block per chunk faster than two chunks per device
    (harness/recommend/layout_check.py). Not where 1F1B's bubble is already under
    ``INTERLEAVE_BUBBLE``: interleaving only shrinks the bubble, and a schedule of thousands
    of micro-batches in many chunks is the costliest to simulate."""
    bubble = (stages - 1) / (microbatches + stages - 1)
    if stages == 1 or 2 * stages > blocks or bubble < INTERLEAVE_BUBBLE:
        return []
    return [blocks // stages]


def _uneven(blocks: int, chunks: int) -> tuple[int, ...]:
    """() where the chunks divide the blocks, else the first and last lighter."""
    return () if blocks % chunks == 0 else ends_lighter(blocks, chunks)


def best_layouts(model: LayeredModel, target: Target, batch_per_device: int,
                 calibration: Calibration | None, step_compute_s: float | None,
                 device_memory: float, optimizer: str,
                 precision: Precision | None = None, *,
                 global_batch: int | None = None,
                 mechanisms: Mapping[str, bool | str] | None = None,
                 headroom: float = 1.0,
                 execution: Execution = DEFAULT_EXECUTION) -> list[LayoutRow]:
    """``layouts_at`` every device count of the sweep. ``global_batch``: the samples of every
    step at every device count (else ``batch_per_device`` per device)."""
    out: list[LayoutRow] = []
    for n in device_counts(target):
        out += layouts_at(model, target, n, global_batch or batch_per_device * n,
                          calibration, step_compute_s, device_memory, optimizer, precision,
                          mechanisms, headroom, execution)
    return out


def layouts_at(model: LayeredModel, target: Target, devices: int, batch: int,
               calibration: Calibration | None, step_compute_s: float | None,
               device_memory: float, optimizer: str, precision: Precision | None = None,
               mechanisms: Mapping[str, bool | str] | None = None,
               headroom: float = 1.0, execution: Execution = DEFAULT_EXECUTION
               ) -> list[LayoutRow]:
    """On ``devices`` devices at ``batch`` samples a step, per kind of split, the simulated
    row of the fastest layout that fits (else the one that needs the least memory),
    ``recompute`` saying what it recomputes: for each layout the least recomputation that
    fits (none, then selective, then full, where the stack recomputes selectively), as less
    is always faster. Memory is a formula, so only the layouts that fit are simulated.

    ``headroom``: the share of ``device_memory`` a layout stays under where it can (the
    fullest published run's, ``validate.devices.memory_reach``: the memory model counts less
    than a stack holds): the least recomputation that fits under it, and per kind of split
    only such layouts where any fits so; a kind none of whose layouts does keeps those that
    fit at all (the answer then says it is tight)."""
    from harness.sim.api import fuses_attention

    fused = fuses_attention(execution)
    selective = (SEARCH_DEFAULTS | dict(mechanisms or {}))["selective_recompute"]
    kinds = [how for how in RECOMPUTE if selective or how != "selective"]
    options = []
    for layout in candidate_layouts(model, devices, max(1, target.per_host), batch,
                                    mechanisms):
        micro = batch // (layout.data * layout.microbatches)
        needs = []
        for how in kinds:  # less recomputation first: the first roomy one is the answer
            needs.append((model_parallel_memory(model, layout, micro, optimizer, how,
                                                precision or FP32, fused).total, how))
            if (not math.isfinite(device_memory)
                    or needs[-1][0] <= min(headroom, 1.0) * device_memory):
                break
        fits = [(need, how) for need, how in needs
                if not math.isfinite(device_memory) or need <= device_memory]
        roomy = [(need, how) for need, how in fits
                 if not math.isfinite(device_memory) or need <= headroom * device_memory]
        need, how = roomy[0] if roomy else fits[0] if fits else min(needs)
        options.append((need, how, layout, bool(fits), bool(roomy)))
    if not options:
        return []
    fitting = [o for o in options if o[3]] or [min(options, key=lambda o: o[0])]
    roomy_kinds = {layout_name(o[2]) for o in fitting if o[4]}
    chosen = [o for o in fitting if o[4] or layout_name(o[2]) not in roomy_kinds]
    return _fastest_per_kind([(o[2], o[1]) for o in chosen], model, target,
                             batch, calibration, step_compute_s, optimizer, precision,
                             execution)


def _fastest_per_kind(options: list[tuple[Layout, str]], model: LayeredModel, target: Target,
                      batch: int, calibration: Calibration | None,
                      step_compute_s: float | None, optimizer: str,
                      precision: Precision | None,
                      execution: Execution = DEFAULT_EXECUTION) -> list[LayoutRow]:
    """Per kind of split (data+tensor+expert, ...), the simulated row of the fastest of
    ``options`` (the first listed among equals), kinds in the order they are first listed.
    Simulated in the order of a lower bound on their step (``layout_step_bound``: no
    pipeline scheduled); one whose bound already exceeds its kind's best step is skipped,
    so the answer is the one simulating every option gives (a test compares them)."""
    from harness.sim import layout_step_bound, simulate_layout

    bounds = [layout_step_bound(target.spec, model, layout, batch, calibration,
                                step_compute_s=step_compute_s, recompute=how,
                                precision=precision, execution=execution)
              for layout, how in options]
    best: dict[str, tuple[float, int, LayoutRow]] = {}
    for i in sorted(range(len(options)), key=lambda i: bounds[i]):
        layout, how = options[i]
        kind = layout_name(layout)
        if kind in best and bounds[i] > best[kind][0]:
            continue
        row = simulate_layout(target.spec, model, layout, batch, calibration,
                              step_compute_s=step_compute_s, optimizer=optimizer,
                              recompute=how, precision=precision, execution=execution)
        step = float(row.step_time_median_s)
        if kind not in best or (step, i) < best[kind][:2]:
            best[kind] = (step, i, row)
    first = {layout_name(layout): i for i, (layout, _) in reversed(list(enumerate(options)))}
    return [best[kind][2] for kind in sorted(best, key=first.__getitem__)]
