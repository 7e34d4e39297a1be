"""The recommender's layout search against the layouts experts published: on each published
model-parallel run's cluster, at its batch and precision, does the search find a layout at
least as fast, by the simulator's own reckoning, as the one the authors ran?

    python -m harness.recommend.layout_check

Both sides are simulated alike, with the stack the authors ran (its mechanisms: overlaps,
blocking sends, when and in what precision gradients reduce, given to the search as a user
gives them to ``recommend``), so the comparison isolates the search: a pick slower than the
authors' layout is a layout the search did not try. The published step is printed beside
both, what a user of the answer would have got against what the authors did (the device
model's own error on these runs is ``harness.validate.devices``'). A run whose layout does
not fit the memory model is shown, not compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.recommend.model_parallel import layouts_at
from harness.recommend.targets import parse_targets
from harness.sim import simulate_layout
from harness.sim.model.structure import layered
from harness.sim.systems.calibration import from_preset
from harness.sim.systems.preset import load_preset
from harness.validate.devices import Row, corpus, memory_reach, stack_of
from harness.validate.layout_step import system_spec
from workloads.execution import Execution
from workloads.precision import precision as find_precision

#: the pick may be slower than the authors' layout by this much before the search is said
#: to have missed it (both are one simulator's numbers; ties differ in the last digits)
TOLERANCE = 0.005


@dataclass(frozen=True)
class Pick:
    id: str
    gpus: int
    published_s: float
    theirs: str
    theirs_s: float
    theirs_fits: bool
    pick: str
    pick_s: float
    recompute: str

    @property
    def ratio(self) -> float:
        """The pick's step over the authors' layout's (both simulated)."""
        return self.pick_s / self.theirs_s


def check(row: Row) -> Pick:
    """The search at the row's GPU count and batch against the row's own layout."""
    precision = find_precision(row.precision)
    model = layered(row.model, precision)
    spec = system_spec(row.system, row.gpus)
    (target,) = parse_targets([spec])
    theirs = row.layout()
    # the row's attention, fused or not (BLOOM's was not): what a layout's memory counts
    calibration = from_preset(row.system)
    execution = Execution(fused_attention=row.fused_attention is not False)
    ran = simulate_layout(spec, model, theirs, row.global_batch, calibration,
                          precision=precision, recompute=row.recompute, execution=execution)
    memory = load_preset(row.system).device.usable_memory_bytes
    rows = [r for r in layouts_at(model, target, row.gpus, row.global_batch, calibration,
                                  None, memory, row.optimizer, precision,
                                  stack_of(row), memory_reach().fraction, execution)
            if r.ok]
    best = min(rows, key=lambda r: float(r.step_time_median_s)) if rows else None
    return Pick(row.id, row.gpus, row.global_batch / row.gpus / row.published_samples_per_gpu,
                theirs.describe(), float(ran.step_time_median_s), ran.ok,
                best.layout.describe() if best else "none fits",
                float(best.step_time_median_s) if best else math.nan,
                best.recompute if best else "")


def model_parallel_rows() -> list[Row]:
    """The published runs split beyond data parallelism on more than one host (a run of
    data parallelism alone, Megatron-LM's 1.7B GPT, is the data-parallel candidates' to
    match, not this search's), whose memory the model counts: a search that keeps every
    layout within the device cannot be held to a run whose recomputation it cannot count
    (MaxText's minimal remat, ``Row.memory_unmodelled``)."""
    return [r for r in corpus()[0] if r.model_parallel and r.gpus > 8
            and r.tensor * r.pipeline * r.context * r.expert > 1 and not r.memory_unmodelled]


def format_picks(picks: list[Pick]) -> str:
    lines = [f"{'run':<46}{'GPUs':>5}{'published':>10}{'theirs':>9}{'pick':>9}{'pick/theirs':>12}"
             "  pick's layout"]
    for p in picks:
        mark = "" if p.theirs_fits else " (theirs does not fit as assumed)"
        lines.append(f"{p.id:<46}{p.gpus:>5}{p.published_s:>9.2f}s{p.theirs_s:>8.2f}s"
                     f"{p.pick_s:>8.2f}s{p.ratio:>12.3f}  {p.pick}"
                     f"{', recompute ' + p.recompute if p.recompute != 'none' else ''}{mark}")
    compared = [p for p in picks if p.theirs_fits]
    worst = max((p.ratio for p in compared), default=math.nan)
    lines.append(f"steps in seconds; the pick is at most {worst - 1:+.1%} off the authors' "
                 f"layout over the {len(compared)} runs whose layout fits as assumed "
                 f"(bound +{TOLERANCE:.1%})")
    return "\n".join(lines)


def report(picks: list[Pick] | None = None) -> str:
    """What ``python -m harness.recommend.layout_check`` prints (``picks``: every published
    row's, where a caller has them already)."""
    return format_picks(picks if picks is not None else [check(r) for r in model_parallel_rows()])


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
