"""docs/VALIDATION.md: every validation on published figures, as its command prints it.

Write it again after a change that moves a figure:
``python -m harness.docs.validation > docs/VALIDATION.md`` (a test compares them, so a change
to the model and its documented error move together).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.recommend import layout_check
from harness.validate import devices, gemm_table, layout_sweep, megatron
from harness.validate.score import summarize, validate
from results.store import ResultsStore

HEADER = """# Validation tables

Written by `python -m harness.docs.validation`, each section by the command it names (run it
to see the same figures; an emulated campaign's hundreds of collective points are summarised
per collective and rank count); edit the model or the data, never this file. How each part
of the model is validated, and why a row stays off, is in docs/SIMULATOR.md.
"""


# The campaigns' folder: the checkout's, not the installed package's (run from its root)
CAMPAIGNS = Path("validation")
# The emulated campaigns, each predicted from its own folder's calibration alone and scored by
# `stratbench validate`: what the runs were is in each folder's campaign script or README.
EMULATED = {
    "2026-11-24": "Collectives (gloo and TF's) and mlp:M steps on 2-6 emulated hosts at 100 and "
                  "800 Mbit/s.",
    "2026-11-25-steps": "Step times per strategy: torch ddp and parameter_server, TF "
                        "multi_worker_mirrored and parameter_server, on mlp:M and recsys:S, 2, "
                        "4 and 6 hosts at 100 Mbit/s, 300 Mbit/s and 1 Gbit/s, and a racked "
                        "cluster.",
    "2026-11-25-pipeline": "Pipelines of 2 and 4 stages, 4 and 8 micro-batches, at 400 and "
                           "100 Mbit/s.",
    "2026-11-25-wire": "Bytes on the wire per host and step (each host's interface counters), "
                       "every multi-process strategy of both frameworks, mlp:M and recsys:S.",
    "2026-11-26-sparse": "Sparse models: recsys:M and recsys:L on 2, 4 and 6 hosts at 100 and "
                         "300 Mbit/s, every strategy that trains them across hosts.",
    "2026-11-27-racked": "Racked clusters: three clusters split across two racks behind a "
                         "slower uplink, a sparse and a dense model.",
}


def emulated_tables(root: Path = CAMPAIGNS) -> dict[str, pd.DataFrame]:
    """Every emulated campaign under ``root`` scored (`validate`), by folder name; the slowest
    input here, so a caller that scored them already passes them to :func:`render`."""
    missing = [name for name in EMULATED if not (root / name / "runs").is_dir()]
    if missing:
        raise FileNotFoundError(f"no campaign {root / missing[0]} (run from the repository's "
                                f"root, where validation/ is)")
    return {name: validate(ResultsStore(root / name)) for name in EMULATED}


def emulated_report(table: pd.DataFrame) -> str:
    """One campaign: its collectives summarised per collective and rank count (hundreds of
    message sizes), then every step, wire and memory row with the cluster it ran on."""
    collectives = table[table["kind"] == "collective"]
    lines = []
    if not collectives.empty:
        lines.append(f"{'collective':<30}{'n':>3}{'points':>8}{'median |error|':>16}"
                     f"{'max |error|':>13}")
        errors = collectives["error"].abs()
        for (what, n), group in errors.groupby([collectives["what"],
                                                collectives["replicas"].astype(int)]):
            lines.append(f"{what:<30}{n:>3}{len(group):>8}{group.median():>16.1%}"
                         f"{group.max():>13.0%}")
        lines.append("")
    rest = table[table["kind"] != "collective"]
    if not rest.empty:
        width = 2 + max(len(_cluster(c)) for c in rest["cluster"])
        lines.append(f"{'kind':<8}{'what':<38}{'cluster':<{width}}{'n':>3}{'measured':>12}"
                     f"{'predicted':>12}{'error':>8}")
        lines += [_scored_row(r, width) for _, r in rest.iterrows()]
        lines.append("")
    lines += [f"median |error| {kind}: {error:.1%}"
              for kind, error in summarize(table).items() if not math.isnan(error)]
    return "\n".join(lines)


def _cluster(spec: object) -> str:
    return str(spec).removeprefix("netns:")


def _scored_row(r: pd.Series, width: int) -> str:
    """A step in ms, a host's wire bytes per step in kB, a replica's memory in MB."""
    if r["kind"] == "step":
        measured, predicted = f"{r['measured_s'] * 1e3:.2f} ms", f"{r['predicted_s'] * 1e3:.2f} ms"
    else:
        unit, scale = ("kB", 1e3) if r["kind"] == "wire" else ("MB", 1e6)
        measured = f"{r['measured_bytes'] / scale:.0f} {unit}"
        predicted = f"{r['predicted_bytes'] / scale:.0f} {unit}"
    return (f"{r['kind']:<8}{str(r['what'])[:37]:<38}{_cluster(r['cluster']):<{width}}"
            f"{int(r['replicas']):>3}"
            f"{measured:>12}{predicted:>12}{r['error']:>+8.0%}")


@dataclass(frozen=True)
class Section:
    title: str
    command: str
    what: str
    text: Callable[[], str]


def sections(device_comparison: tuple[dict[str, float], list[dict[str, Any]]] | None = None,
             layout_picks: list[layout_check.Pick] | None = None,
             emulated: Mapping[str, pd.DataFrame] | None = None) -> list[Section]:
    """The sections, lowest part of the model first; a caller that computed the device corpus,
    the layout picks or the emulated campaigns' scores already passes them in (the tests
    compute each once a run)."""
    scored = emulated if emulated is not None else emulated_tables()
    return [*(Section(f"Emulated hosts: validation/{name}",
                      f"stratbench validate --results COPY` on a copy of `validation/{name}",
                      f"{what} Predicted from the folder's own calibration (local runs, "
                      "loopback and cluster sweeps) alone.",
                      functools.partial(emulated_report, scored[name]))
              for name, what in EMULATED.items()),
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
           layout_picks: list[layout_check.Pick] | None = None,
           emulated: Mapping[str, pd.DataFrame] | None = None) -> str:
    parts = [HEADER]
    for section in sections(device_comparison, layout_picks, emulated):
        parts += [f"## {section.title}", "", f"{section.what} Written by `{section.command}`.",
                  "", "```text", section.text(), "```", ""]
    return "\n".join(parts)


def main() -> int:
    """The tables on stdout; one line on stderr and exit 2 where the campaigns are not here."""
    try:
        text = render()
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
