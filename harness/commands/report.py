"""`stratbench report`: one self-contained HTML file from the stored results (runs nothing)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.commands.common import info, results_option
from harness.errors import InputError
from harness.paths import results_dir


def make_report(results: str | Path | None, out: str | Path | None = None) -> Path:
    """Write the report for a results directory; returns its path (default
    ``<results>/report.html``)."""
    from reports.build import write_report

    root = results_dir(results)
    if not (root / "runs").is_dir():
        raise InputError(f"no results under {root} (run `stratbench run` or `bench` first)")
    if out is not None and Path(out).is_dir():
        raise InputError(f"--out {out} is a directory; give a file name such as report.html")
    return write_report(root, out)


@click.command("report")
@results_option
@click.option("--out", metavar="FILE.html", default=None,
              help="Where to write the report (default: <results>/report.html).")
def command(results: str | None, out: str | None) -> None:
    """Write the HTML report: recommendations, plots, history, regressions."""
    path = make_report(results, out)
    info(f"report written ({path.stat().st_size // 1024} KiB)")
    click.echo(path)
