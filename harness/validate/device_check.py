"""Measured steps on a device beside the device model's, for the same model, batch and
precision: what a lent GPU adds to the published corpus (``devices.py``).

Rows come from ``harness.measure.device_step`` (``stratbench devicecheck``), stored as the
``device_steps`` table of a run. A row's device is matched to the system file that
describes it (its name: an H100 is ``dgx_h100_ib``'s device), and the prediction is the
corpus's own (``devices.predict_step``, one GPU, the system file's efficiency: out of the
box), so the comparison is the corpus's first column on a measured row.
"""

from __future__ import annotations

import math
from typing import Any

from harness.validate.devices import Row, predict_step
from results.schema import DeviceStep

#: a GPU's name as torch reports it -> the system file whose device it is (the first match;
#: H200 before H100, which its name does not contain)
SYSTEM_BY_GPU = (("H200", "hgx_h200"), ("H100", "dgx_h100_ib"), ("A100", "dgx_a100"),
                 ("B200", "hgx_b200"), ("MI300X", "mi300x"))
#: the batches a check runs by default: NVIDIA's per-GPU ResNet-50 batch, BERT phase 1's
#: 64 sequences of 128 tokens, GPT-2 XL at 4 (its fp32 Adam state and activations fit 80 GB)
DEFAULT_BATCH = {"resnet50": 256, "bert_large": 64, "gpt2_xl": 4}


def system_for(device_name: str) -> str | None:
    """The system file describing ``device_name`` (torch's name for it); None if none does."""
    upper = device_name.upper()
    return next((system for part, system in SYSTEM_BY_GPU if part in upper), None)


class DeviceCheck(DeviceStep, total=False):
    """A measured row beside the device model's step for it (``compare``)."""

    predicted_step_s: float
    system: str  # the system file whose device it is, or why none
    error: float  # predicted / measured - 1


def predicted_step_s(measured: DeviceStep) -> tuple[float, str]:
    """(the device model's step for a measured row, the system file it used); NaN and why
    not where no system file describes the device or the row did not run."""
    if measured.get("status") != "ok":
        return math.nan, "not measured"
    system = system_for(str(measured.get("device_name", "")))
    if system is None:
        return math.nan, f"no system file describes {measured.get('device_name')!r}"
    seq = measured.get("seq")
    row = Row(id=f"{measured['model']}_{measured['precision']}", model=str(measured["model"]),
              system=system, framework="torch", precision=str(measured["precision"]),
              gpus=1, batch_per_gpu=int(measured["batch"]), accumulation=1,
              optimizer=str(measured["optimizer"]), published={}, source={},
              seq=int(seq) if seq is not None and not _missing(seq) else None)
    return float(predict_step(row)["step_s"]), system


def _missing(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def compare(rows: list[DeviceStep]) -> list[DeviceCheck]:
    """Each measured row with the predicted step and the error (predicted / measured - 1)."""
    out: list[DeviceCheck] = []
    for measured in rows:
        predicted, system = predicted_step_s(measured)
        step = float(measured.get("step_s", math.nan))
        out.append({**measured, "predicted_step_s": predicted, "system": system,
                    "error": predicted / step - 1 if step > 0 else math.nan})
    return out


def format_comparison(records: list[DeviceCheck]) -> str:
    lines = [f"{'model':<11}{'prec':>5}{'batch':>6}  {'device':<26}{'measured':>10}"
             f"{'predicted':>11}{'error':>8}  peak memory / note"]
    for r in records:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<11}{r['precision']:>5}{r['batch']:>6}  "
                         f"{r.get('status')}: {r.get('reason')}")
            continue
        memory = r.get("peak_memory_bytes", math.nan)
        note = (f"{memory / 1e9:.1f} GB" if not _missing(memory) else "")
        predicted, error = f"{r['predicted_step_s'] * 1e3:>9.1f}ms", f"{r['error']:>+8.1%}"
        if _missing(r["predicted_step_s"]):
            note = f"{note}; {r['system']}".lstrip("; ")
            predicted, error = f"{'-':>11}", f"{'-':>8}"
        lines.append(f"{r['model']:<11}{r['precision']:>5}{r['batch']:>6}  "
                     f"{str(r['device_name'])[:25]:<26}{r['step_s'] * 1e3:>8.1f}ms"
                     f"{predicted}{error}  {note}")
    lines.append("step: forward, backward and the optimizer's update, median of the measured "
                 "steps; predicted: the device model out of the box (the system file's "
                 "efficiency), as the device corpus predicts")
    return "\n".join(lines)
