"""The layout search's ranking against a measured one: BigScience's own sweep of 3D layouts
for BLOOM-class models on Jean Zay (``published/bigscience_layout_sweep.json``), every
layout run on the same 384 A100s, stack and day.

The device corpus checks the simulator's step on the layout each team chose; a
recommendation rests on something else, the order of the layouts it did not choose. Here
each measured layout is simulated with the stack BigScience ran (the corpus's BLOOM row
states it, ``stack_of``) and compared three ways: its step in seconds, its step relative to
the authors' eventual layout (what ranking depends on: a constant error cancels), and the
layout the simulator would have picked, at its measured step against the measured best.

    python -m harness.validate.layout_sweep
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, TypedDict

import pandas as pd

from harness.core.layout import Layout
from harness.sim.model.memory import model_parallel_memory, optimizer_slots
from harness.sim.model.structure import layered
from harness.sim.systems.preset import load_preset
from harness.validate import devices
from harness.validate.layout_step import layout_step
from workloads.precision import precision as find_precision

SWEEP = "bigscience_layout_sweep.json"
GPUS = 384  # 48 nodes of 8, every row


@dataclass(frozen=True)
class Measured:
    """One measured layout of a table: data x tensor x pipeline, micro-batch, global batch
    (heads where the table varies them), seconds per iteration (None: out of memory)."""

    table: str
    data: int
    tensor: int
    pipeline: int
    microbatch: int
    global_batch: int
    seconds: float | None
    quote: str
    heads: int | None = None
    mem_gb: float | None = None
    oom: bool = False
    repeat: bool = False  # the table lists this layout twice; the second run

    @property
    def layout_name(self) -> str:
        heads = f" h{self.heads}" if self.heads else ""
        return (f"dp={self.data},tp={self.tensor},pp={self.pipeline},mbs={self.microbatch}"
                f"{heads}")

    def is_reference(self, reference: list[int]) -> bool:
        return ([self.data, self.tensor, self.pipeline, self.microbatch, self.global_batch,
                 *([self.heads] if self.heads else [])] == reference and not self.repeat)


class SweepRow(TypedDict, total=False):
    """A measured layout as the sweep's table prints it (dp, tp, pp, micro- and global batch;
    heads where the table varied them), its seconds per iteration or an out-of-memory."""

    dp: int
    tp: int
    pp: int
    mbs: int
    gbs: int
    heads: int
    seconds: float | None
    mem_gb: float | None
    oom: bool
    repeat: bool
    quote: str


class SweepTable(TypedDict, total=False):
    """One table of the sweep: its model, precision, accumulation, reference layout, rows."""

    id: str
    section: str
    model: str  # a transformer spec, ``{heads}`` filled from the row where heads vary
    model_quote: str
    precision: str
    grad_accumulation: str
    stack_quote: str
    stage_layers: dict[str, list[int]]  # blocks per stage, by stages, where uneven
    reference: list[int]
    rows: list[SweepRow]


class Miss(TypedDict):
    """A layout the simulator ranks otherwise than measured, and why."""

    table: str
    layout: str
    why: str


class Sweep(TypedDict):
    """The checked-in sweep file as parsed."""

    about: str
    source: dict[str, str]
    stack_of: str
    stack_note: str
    tables: list[SweepTable]
    unmodelled: str
    misses: list[Miss]


def sweep() -> Sweep:
    """The checked-in sweep, as published."""
    text = resources.files("harness.validate.published").joinpath(SWEEP).read_text()
    data: Sweep = json.loads(text)
    return data


def rows_of(table: SweepTable) -> list[Measured]:
    return [Measured(table=table["id"], data=r["dp"], tensor=r["tp"], pipeline=r["pp"],
                     microbatch=r["mbs"], global_batch=r["gbs"], seconds=r["seconds"],
                     quote=r["quote"], heads=r.get("heads"), mem_gb=r.get("mem_gb"),
                     oom=bool(r.get("oom")), repeat=bool(r.get("repeat")))
            for r in table["rows"]]


def stack_row(data: Sweep) -> devices.Row:
    """The corpus row whose stack the sweep ran (BigScience's Megatron-DeepSpeed)."""
    return devices.row_by_id(data["stack_of"])


def simulate(table: SweepTable, row: Measured, stack: devices.Row) -> dict[str, float]:
    """The measured layout's step and its fullest device's memory, simulated with the stack
    BigScience ran that day."""
    precision = find_precision(table["precision"])
    model = layered(table["model"].format(heads=row.heads), precision)
    stages = table.get("stage_layers", {}).get(str(row.pipeline))
    layout: Layout = replace(
        stack.layout(), data=row.data, tensor=row.tensor, stages=row.pipeline,
        microbatches=row.global_batch // (row.data * row.microbatch), virtual=1,
        schedule="1f1b", stage_blocks=tuple(stages) if stages else (),
        grad_accumulation=table["grad_accumulation"])
    fused = stack.fused_attention is not False
    memory = model_parallel_memory(model, layout, row.microbatch, stack.optimizer,
                                   stack.recompute, precision, fused)
    device = load_preset(stack.system).device
    fits = memory.total + device.reserved_bytes <= device.memory_bytes
    step = layout_step(stack.system, GPUS, model, layout, row.global_batch, precision, None,
                       fused_attention=fused, recompute=stack.recompute,
                       optimizer_slots=optimizer_slots(stack.optimizer)).step_time_s
    return {"step_s": step, "memory_gb": memory.total / 1e9, "fits": float(fits)}


def compare() -> pd.DataFrame:
    """One record per measured layout: seconds measured and simulated, each per sample as a
    ratio to the table's reference layout, and the memory beside the fit."""
    data = sweep()
    stack = stack_row(data)
    records = []
    for table in data["tables"]:
        rows = rows_of(table)
        simulated = {row: simulate(table, row, stack) for row in rows}
        (reference,) = [r for r in rows if r.is_reference(table["reference"])]
        assert reference.seconds is not None
        ref_measured = reference.seconds / reference.global_batch
        ref_simulated = simulated[reference]["step_s"] / reference.global_batch
        for row in rows:
            sim = simulated[row]
            measured = row.seconds if row.seconds is not None else math.nan
            measured_ratio = measured / row.global_batch / ref_measured
            simulated_ratio = sim["step_s"] / row.global_batch / ref_simulated
            records.append({
                "table": row.table, "layout": row.layout_name, "repeat": row.repeat,
                "measured_s": measured, "simulated_s": sim["step_s"],
                "error": sim["step_s"] / measured - 1,
                "measured_ratio": measured_ratio, "simulated_ratio": simulated_ratio,
                "ratio_error": simulated_ratio / measured_ratio - 1,
                "oom": row.oom, "mem_gb": row.mem_gb, "simulated_mem_gb": sim["memory_gb"],
                "fits": bool(sim["fits"]), "reference": row is reference,
                "tensor": row.tensor, "pipeline": row.pipeline})
    return pd.DataFrame.from_records(records)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per table: the rank correlation of the simulated and measured per-sample steps, the
    layout the simulator ranks first among those that ran, and what it measured against the
    measured best (the cost of taking the simulator's word)."""
    out = []
    for table, group in frame.groupby("table", sort=False):
        ran = group[group["measured_s"].notna() & ~group["repeat"]]
        measured = ran["measured_ratio"]
        simulated = ran["simulated_ratio"]
        pick = ran.iloc[int(simulated.to_numpy().argmin())]
        best = ran.iloc[int(measured.to_numpy().argmin())]
        out.append({"table": table, "layouts": len(ran),
                    "spearman": measured.rank().corr(simulated.rank()),
                    "pick": pick["layout"], "pick_measured_ratio": pick["measured_ratio"],
                    "best": best["layout"],
                    "regret": pick["measured_ratio"] / best["measured_ratio"] - 1,
                    "median_abs_ratio_error": ran["ratio_error"].abs().median(),
                    "median_abs_error": ran["error"].abs().median()})
    return pd.DataFrame.from_records(out)


@functools.cache
def memory_gap_gb() -> float:
    """The median of what nvidia-smi showed beyond the memory model's fullest device, over
    the sweep's layouts that report their memory (GB): how much more a stack held."""
    frame = compare()
    reported = frame[frame["mem_gb"].notna()]
    return float((reported["mem_gb"] - reported["simulated_mem_gb"]).median())


def headroom_note(needed: float, usable: float) -> str:
    """What an answer says of a layout that fits but needs more of its device than the
    fullest published run does (``devices.memory_reach``); '' within it."""
    reach = devices.memory_reach()
    if not (usable > 0 and needed <= usable and needed / usable > reach.fraction):
        return ""
    return (f"tight: {needed / usable:.0%} of the device's usable memory, where the fullest "
            f"published run needs {reach.fraction:.0%} by the same count ({reach.row}) and a "
            f"stack held a median {memory_gap_gb():.1f} GB more than it counts (python -m "
            f"harness.validate.layout_sweep)")


def headroom_rule() -> str:
    """The headroom the layout search keeps, in words (a recommendation's table says it)."""
    reach = devices.memory_reach()
    return (f"model-parallel layouts kept under {reach.fraction:.0%} of a device's usable "
            f"memory where one of their kind can be: the fullest published run's by the same "
            f"count, {reach.row}")


def _memory(gb: Any, oom: bool) -> str:
    if oom:
        return "OOM"
    return f"{float(gb):.0f}GB" if pd.notna(gb) else "-"


def format_comparison(frame: pd.DataFrame) -> str:
    lines = []
    for table, group in frame.groupby("table", sort=False):
        lines.append(f"{table}: seconds per iteration, and per sample as a ratio to the "
                     "reference layout (*)")
        lines.append(f"{'layout':<28} {'measured':>9} {'simulated':>9} {'error':>7} "
                     f"{'ratio':>7} {'sim':>7} {'error':>7}  {'mem':>5} {'sim mem':>8}")
        for r in group.sort_values("measured_ratio", na_position="last").itertuples():
            mark = "*" if r.reference else ("r" if r.repeat else " ")
            mem = _memory(r.mem_gb, bool(r.oom))
            fit = "" if r.fits else " NO"
            if r.oom:
                lines.append(f"{r.layout:<27}{mark} {'OOM':>9} {r.simulated_s:>8.1f}s "
                             f"{'':>7} {'':>7} {'':>7} {'':>7}  {mem:>5} "
                             f"{r.simulated_mem_gb:>6.0f}GB{fit}")
                continue
            lines.append(f"{r.layout:<27}{mark} {r.measured_s:>8.1f}s {r.simulated_s:>8.1f}s "
                         f"{r.error:>+7.1%} {r.measured_ratio:>7.3f} {r.simulated_ratio:>7.3f} "
                         f"{r.ratio_error:>+7.1%}  {mem:>5} {r.simulated_mem_gb:>6.0f}GB{fit}")
    lines.append("(*) the authors' eventual layout; r: the table's second run of a layout; "
                 "sim mem: the fullest device's model state and activations (measured: "
                 "nvidia-smi, the runtime and the allocator's cache included); NO: the "
                 "simulator says it does not fit")
    for s in summary(frame).itertuples():
        lines.append(f"{s.table}: {s.layouts} layouts, rank correlation {s.spearman:.2f}; "
                     f"median |error| {s.median_abs_error:.1%}, of the ratio "
                     f"{s.median_abs_ratio_error:.1%}; the simulator's pick {s.pick} "
                     f"measured {s.regret:+.1%} against the best ({s.best})")
    return "\n".join(lines)


def report() -> str:
    """What ``python -m harness.validate.layout_sweep`` prints."""
    return format_comparison(compare())


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
