"""docs/VALIDATION.md: every validation on published figures, as its command prints it.

Write it again after a change that moves a figure:
``python -m harness.docs.validation > docs/VALIDATION.md`` (a test compares them, so a change
to the model and its documented error move together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.recommend import layout_check
from harness.validate import devices, gemm_table, layout_sweep, megatron

HEADER = """# Validation tables

Written by `python -m harness.docs.validation`, each section by the command it names (run it
to see the same table); edit the model or the data, never this file. How each part of the
model is validated, and why a row stays off, is in docs/SIMULATOR.md.
"""


@dataclass(frozen=True)
class Section:
    title: str
    command: str
    what: str
    text: Callable[[], str]


def sections(device_comparison: tuple[dict[str, float], list[dict[str, Any]]] | None = None,
             layout_picks: list[layout_check.Pick] | None = None) -> list[Section]:
    """The sections, lowest part of the model first; a caller that computed the device corpus
    or the layout picks already passes them in (the tests compute each once a run)."""
    return [
        Section("Device corpus", "python -m harness.validate.devices",
                "Published single-GPU and single-node training throughputs against the device "
                "model, out of the box (the system files' cited efficiencies) and with one "
                "efficiency fitted per system and precision on its named row.",
                lambda: devices.report(device_comparison)),
        Section("GEMM table", "python -m harness.validate.gemm_table",
                "OpenXLA's per-shape H100 GEMM table against the device model's GEMM time; "
                "the kernel's two constants fitted on it.", gemm_table.report),
        Section("Megatron-LM table", "python -m harness.validate.megatron",
                "Megatron-LM's published table (Narayanan et al. 2021) against the "
                "model-parallel step, one efficiency fitted on the smallest row.",
                megatron.report),
        Section("Layout check", "python -m harness.recommend.layout_check",
                "On each published model-parallel run's cluster and batch, the layout search's "
                "pick beside the authors' layout, both simulated with the authors' stack.",
                lambda: layout_check.report(layout_picks)),
        Section("Layout sweep", "python -m harness.validate.layout_sweep",
                "A sweep one team measured (BigScience on Jean Zay) against the simulator's "
                "ranking of the same layouts.", layout_sweep.report),
    ]


def render(device_comparison: tuple[dict[str, float], list[dict[str, Any]]] | None = None,
           layout_picks: list[layout_check.Pick] | None = None) -> str:
    parts = [HEADER]
    for section in sections(device_comparison, layout_picks):
        parts += [f"## {section.title}", "", f"{section.what} Written by `{section.command}`.",
                  "", "```text", section.text(), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
