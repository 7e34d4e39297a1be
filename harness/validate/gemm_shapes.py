"""The GEMMs the device model times for the published runs, beside the same GEMMs measured.

The corpus's largest misses after one fit (``python -m harness.validate.devices``) run the
widest GEMMs: Megatron-LM's 314B and 462B rows and NeMo's Llama 3.1 405B are slow by
10-15% while its 1.7B row is fast, and Megatron-LM's README says why in its own words
("larger GEMMs have higher arithmetic intensity"). The device model's GEMM efficiency
depends on shape only through tile and wave quantization. Whether wider GEMMs reach more
of the peak is for a GPU to say, not for a fit:

    python -m harness.validate.gemm_shapes --list > shapes.jsonl        # here
    python -m harness.measure.gemm_step --shapes shapes.jsonl > gemms.jsonl   # on a GPU
    python -m harness.validate.gemm_shapes --compare gemms.jsonl        # here

``--list`` runs each corpus row of the system (dgx_h100_ib by default) through the device
model and records every GEMM it times (``device_model.recorded_gemms``), so the shapes are
the model's own, layouts, sequence lengths and recomputation included. ``--compare`` puts
the measured beside the modelled, per shape and per row (each of a row's distinct shapes
once, weighted by its FLOPs). Convolutions are left out: cuDNN's implicit GEMMs are not
matmuls.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.core.errors import SpecError
from harness.sim.systems.device_model import GemmCall, recorded_gemms
from harness.validate.devices import corpus, predict_step

if TYPE_CHECKING:  # gemm_step imports torch; its rows arrive as JSON lines
    from harness.measure.gemm_step import GemmTime

Key = tuple[int, int, int, int, str]


@dataclass
class Shape:
    """One distinct GEMM of the corpus: its modelled seconds and the rows that run it."""

    call: GemmCall
    rows: set[str] = field(default_factory=set)

    @property
    def key(self) -> Key:
        return shape_key(self.call.m, self.call.n, self.call.k, self.call.repeat,
                         self.call.precision)

    @property
    def modelled_efficiency(self) -> float:
        return self.call.flops / self.call.seconds / self.call.peak


def shape_key(m: float, n: float, k: float, repeat: float, precision: str) -> Key:
    """A shape as a GPU can run it: whole dimensions (a MoE's rows per expert are a mean)."""
    return (max(1, round(m)), max(1, round(n)), max(1, round(k)), max(1, round(repeat)),
            precision)


def corpus_shapes(system: str = "dgx_h100_ib") -> dict[Key, Shape]:
    """Every distinct GEMM the device model times for the corpus rows run on ``system``, at
    the system file's own efficiencies."""
    shapes: dict[Key, Shape] = {}
    rows = [row for row in corpus()[0] if row.system == system]
    if not rows:
        raise SpecError(f"no corpus row runs on {system!r}")
    for row in rows:
        with recorded_gemms() as calls:
            predict_step(row)
        for call in calls:
            if call.conv:
                continue
            shape = Shape(call)
            shapes.setdefault(shape.key, shape).rows.add(row.id)
    return shapes


def shape_lines(shapes: dict[Key, Shape]) -> list[str]:
    """``--list``: one JSON object a shape, the most FLOPs first (what gemm_step reads)."""
    ordered = sorted(shapes.values(), key=lambda s: -s.call.flops)
    return [json.dumps(dict(zip(("m", "n", "k", "repeat", "precision"), s.key, strict=True)))
            for s in ordered]


def read_measured(lines: Iterable[str]) -> dict[Key, GemmTime]:
    """gemm_step's rows that ran, by shape."""
    measured = {}
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("status") == "ok":
            key = shape_key(row["m"], row["n"], row["k"], row.get("repeat", 1),
                            row["precision"])
            measured[key] = row
    return measured


@dataclass(frozen=True)
class RowGemms:
    """One corpus row's distinct GEMM shapes, each once: modelled and measured efficiency
    (their FLOPs over their seconds, of the precision's peak)."""

    row: str
    shapes: int
    modelled: float
    measured: float


def compare(shapes: dict[Key, Shape], measured: dict[Key, GemmTime]
            ) -> tuple[list[tuple[Shape, float]], list[RowGemms]]:
    """Each measured shape with its measured efficiency, and each row whose shapes were all
    measured with both efficiencies."""
    per_shape = [(shape, shape.call.flops / measured[key]["seconds"] / shape.call.peak)
                 for key, shape in shapes.items() if key in measured]
    rows = sorted({row for shape in shapes.values() for row in shape.rows})
    per_row = []
    for row in rows:
        own = [(key, shape) for key, shape in shapes.items() if row in shape.rows]
        if not own or any(key not in measured for key, _ in own):
            continue
        peak_s = sum(shape.call.flops / shape.call.peak for _, shape in own)
        modelled_s = sum(shape.call.seconds for _, shape in own)
        measured_s = sum(float(measured[key]["seconds"]) for key, _ in own)
        per_row.append(RowGemms(row, len(own), peak_s / modelled_s, peak_s / measured_s))
    return per_shape, per_row


def format_comparison(per_shape: list[tuple[Shape, float]], per_row: list[RowGemms],
                      device: str) -> str:
    lines = [f"GEMMs measured on {device}; efficiency: FLOPs over seconds, of the system "
             f"file's peak at the GEMM's precision",
             f"{'m':>7} {'n':>7} {'k':>7} {'rep':>4} {'prec':>5} {'GFLOP':>9} "
             f"{'measured':>9} {'modelled':>9}  rows"]
    for shape, efficiency in sorted(per_shape, key=lambda se: -se[0].call.flops):
        m, n, k, repeat, precision = shape.key
        lines.append(f"{m:>7} {n:>7} {k:>7} {repeat:>4} {precision:>5} "
                     f"{shape.call.flops / 1e9:>9.1f} {efficiency:>8.1%} "
                     f"{shape.modelled_efficiency:>8.1%}  {len(shape.rows)}")
    lines.append("per row (its distinct GEMM shapes, each once, weighted by FLOPs):")
    lines.append(f"{'row':<52} {'shapes':>6} {'measured':>9} {'modelled':>9}")
    for row in sorted(per_row, key=lambda r: r.measured):
        lines.append(f"{row.row:<52} {row.shapes:>6} {row.measured:>8.1%} "
                     f"{row.modelled:>8.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="dgx_h100_ib")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="the shapes, as JSON lines")
    what.add_argument("--compare", metavar="FILE", help="gemm_step's output to compare")
    args = parser.parse_args(argv)
    try:
        shapes = corpus_shapes(args.system)
        if args.list:
            print("\n".join(shape_lines(shapes)))
            return
        with open(args.compare, encoding="utf-8") as fh:
            measured = read_measured(fh)
    except (OSError, ValueError, KeyError, SpecError) as exc:
        print(f"gemm_shapes: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not measured:
        print(f"gemm_shapes: error: {args.compare} has no GEMM that ran", file=sys.stderr)
        raise SystemExit(2)
    devices = sorted({str(row.get("device_name", row.get("device"))) for row in
                      measured.values()})
    per_shape, per_row = compare(shapes, measured)
    print(format_comparison(per_shape, per_row, ", ".join(devices)))


if __name__ == "__main__":
    main()
