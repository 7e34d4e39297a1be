"""The simulator against a published table: Megatron-LM's weak scaling of GPT models on up to
3,072 A100 GPUs (Narayanan et al. 2021, arXiv:2104.04473, Table 1).

The table is data (``published/megatron_lm_2021_table1.json``, with its source and what it
states). The procedure fixes every constant but one before comparing: the DGX A100 system file
(datasheet figures), the memory-bandwidth efficiency of ``harness/sim/systems/compute.py``, the
model's shape and the layout of each row. The matmul efficiency of the A100 is then fitted on
the smallest row alone, and every other row is predicted with it:

    python -m harness.validate.megatron

prints, per row, the published and predicted teraFLOP/s per GPU, the error and what the
simulator assumed that the paper does not state.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypedDict

from harness.core.layout import Layout
from harness.sim.model.layered import LayeredModel
from harness.sim.model.structure import layered
from harness.sim.systems.compute import fit_efficiency
from harness.validate.layout_step import layout_step
from workloads.precision import PRECISIONS

TABLE = "megatron_lm_2021_table1.json"
SEQUENCE, VOCAB = 2048, 51200
PRECISION = PRECISIONS["fp16"]
DROPOUT = 0.1


@dataclass(frozen=True)
class Row:
    params_billion: float
    heads: int
    hidden: int
    layers: int
    tensor: int
    pipeline: int
    gpus: int
    batch: int
    micro_batch: int  # samples per micro-batch (run_table_1.sh's MBS)
    layers_per_virtual_stage: int  # 0: no interleaving
    ddp: str  # torch: reduced during the backward; local: after it
    tflops_per_gpu: float

    @property
    def data(self) -> int:
        return self.gpus // (self.tensor * self.pipeline)

    @property
    def workload(self) -> str:
        return (f"transformer:layers={self.layers},hidden={self.hidden},heads={self.heads},"
                f"seq={SEQUENCE},vocab={VOCAB},dropout={DROPOUT}")

    def layout(self) -> Layout:
        """The layout run_table_1.sh ran: its micro-batch size, its interleaving, its DDP, and
        the 2021 code's point-to-point exchanges, which each stage waited for."""
        virtual = (self.layers // (self.pipeline * self.layers_per_virtual_stage)
                   if self.layers_per_virtual_stage else 1)
        return Layout(data=self.data, stages=self.pipeline, tensor=self.tensor,
                      microbatches=self.batch // (self.data * self.micro_batch),
                      schedule="interleaved" if virtual > 1 else "1f1b", virtual=virtual,
                      grad_reduce="overlapped" if self.ddp == "torch" else "after_backward",
                      p2p="blocking")

    @property
    def flops_per_iteration(self) -> float:
        """The paper's count: 96 B s l h^2 (1 + s / (6h) + V / (16 l h)), recomputation
        included."""
        b, s, h, n = self.batch, SEQUENCE, self.hidden, self.layers
        return 96 * b * s * n * h * h * (1 + s / (6 * h) + VOCAB / (16 * n * h))

    def published_step_s(self) -> float:
        return self.flops_per_iteration / (self.tflops_per_gpu * 1e12 * self.gpus)


class Configuration(TypedDict):
    """The script the authors published with the table, its lines per row, how to read it."""

    source: str
    script_lines: dict[str, str]
    read_as: list[str]


class Table(TypedDict):
    """The table file as parsed: each row's values under ``columns``, with its source."""

    source: str
    url: str
    system: str
    stated: list[str]
    assumed: list[str]
    columns: list[str]
    configuration: Configuration
    rows: list[list[Any]]  # a Row's fields in ``columns`` order


class Record(TypedDict):
    """One row of the table beside its simulated step (``compare``)."""

    params_billion: float
    layout: str
    gpus: int
    batch: int
    published_tflops: float
    predicted_tflops: float
    error: float
    step_s: float
    published_step_s: float
    fitted_here: bool
    assumed: str


def table() -> tuple[list[Row], Table]:
    """The rows and the file's source, stated and assumed notes."""
    text = (resources.files("harness.validate") / "published" / TABLE).read_text("utf-8")
    data: Table = json.loads(text)
    rows = [Row(**dict(zip(data["columns"], values, strict=True))) for values in data["rows"]]
    return rows, data


def predict_step(row: Row, efficiency: float, system: str = "dgx_a100",
                 model: LayeredModel | None = None) -> float:
    """The simulated step time of ``row`` with the A100 at ``efficiency`` of its fp16 peak.
    Megatron-LM's 2021 attention is unfused (its fused scale-mask-softmax kernel, the scores
    in memory), before FlashAttention."""
    model = model or layered(row.workload, PRECISION)
    return layout_step(system, row.gpus, model, row.layout(), row.batch, PRECISION,
                       efficiency, fused_attention=False, recompute="full").step_time_s


def compare(system: str = "dgx_a100") -> tuple[float, list[Record]]:
    """(the fitted efficiency, one record per row): calibrated on the first row only."""
    rows, _ = table()
    first = rows[0]
    first_model = layered(first.workload, PRECISION)
    efficiency = fit_efficiency(lambda e: predict_step(first, e, system, first_model),
                                first.published_step_s())
    out: list[Record] = []
    for row in rows:
        step = predict_step(row, efficiency, system)
        predicted = row.flops_per_iteration / (step * row.gpus) / 1e12
        out.append({
            "params_billion": row.params_billion, "layout": row.layout().describe(),
            "gpus": row.gpus, "batch": row.batch, "published_tflops": row.tflops_per_gpu,
            "predicted_tflops": predicted, "error": predicted / row.tflops_per_gpu - 1,
            "step_s": step, "published_step_s": row.published_step_s(),
            "fitted_here": row is first,
            "assumed": "dropout 0.1 (the rest as run_table_1.sh ran it)",
        })
    return efficiency, out


def format_comparison(efficiency: float, records: list[Record]) -> str:
    lines = [f"A100 matmul efficiency fitted on the {records[0]['params_billion']}B row: "
             f"{efficiency:.1%} of 312 TFLOP/s; every other constant fixed",
             f"{'params':>8} {'layout':<66}{'GPUs':>6}{'published':>11}{'predicted':>11}"
             f"{'error':>8}"]
    for r in records:
        lines.append(f"{r['params_billion']:>7}B {r['layout']:<66}{r['gpus']:>6}"
                     f"{r['published_tflops']:>11.0f}{r['predicted_tflops']:>11.1f}"
                     f"{r['error']:>+8.1%}" + ("  (fitted)" if r["fitted_here"] else ""))
    errors = [abs(r["error"]) for r in records[1:]]
    lines.append(f"mean |error| over the {len(errors)} predicted rows: "
                 f"{sum(errors) / len(errors):.1%}, worst {max(errors):.1%}")
    return "\n".join(lines)


def report() -> str:
    """What ``python -m harness.validate.megatron`` prints."""
    return format_comparison(*compare())


def main() -> None:
    efficiency, records = compare()
    print(format_comparison(efficiency, records))
    if not all(math.isfinite(r["error"]) for r in records):
        raise SystemExit(1)


if __name__ == "__main__":
    main()



