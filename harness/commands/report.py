"""`stratbench report`: one self-contained HTML file from the stored results (runs nothing)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from harness.commands.common import CONTEXT_SETTINGS, info, results_option
from harness.core.errors import InputError
from harness.core.paths import results_dir

if TYPE_CHECKING:
    from harness.core.project import Project

Command = TypeVar("Command", bound=Callable[..., object])


def make_report(results: str | Path | None, project: Project | None = None,
                out: str | Path | None = None) -> Path:
    """Write the report for a results directory; returns its path (default
    ``<results>/report.html``). With a project, its verdict cards lead, in its order."""
    from reports.build import write_report

    root = results_dir(results)
    if not (root / "runs").is_dir():
        raise InputError(f"no results under {root} (run `stratbench run` or `bench` first)")
    if out is not None and Path(out).is_dir():
        raise InputError(f"--out {out} is a directory; give a file name such as report.html")
    return write_report(root, out, project)


def fail_on_regression_option(fn: Command) -> Command:
    return click.option("--fail-on-regression", is_flag=True,
                        help="Exit 1 when the latest run of any case is flagged as a "
                             "regression (the report's rule).")(fn)


def exit_on_regressions(results: str | Path | None) -> None:
    """Name each flagged case on stderr and exit 1; nothing when none is flagged."""
    from reports.history import latest_regressions

    flagged = latest_regressions(results_dir(results))
    if flagged.empty:
        return
    for r in flagged.to_dict("records"):
        info(f"regression: {r['case_id']} {r['step_time_median_s'] * 1e3:.2f} ms vs "
             f"{r['base_s'] * 1e3:.2f} ms before ({r['change']:+.0%}) in run {r['run_id']}")
    raise SystemExit(1)


HELP = """
Write the HTML report: recommendations, plots, history, regressions.

One self-contained HTML file that leads with the verdict: per workload the pick (strategy,
devices, time and cost to train), why, how sure and the runner-up, then time to train against
devices; the tables and plots behind it follow, collapsed. With a project file (--config, or
./stratbench.toml), its cards lead, one per workload and target, and every section covers the
project's workloads on its targets and clusters only. Each card's "why" is written from the rule
that decided (slower than one device, scaling efficiency under the threshold, over the budget,
past the deadline, does not fit), with the numbers and the baseline they were compared with; a
pick or runner-up is always a strategy a framework runs on those devices.
"""


@click.command("report", help=HELP, context_settings=CONTEXT_SETTINGS)
@results_option
@click.option("--out", metavar="FILE.html", default=None,
              help="Where to write the report (default: <results>/report.html).")
@click.option("--config", default=None, metavar="FILE",
              help="A project file: its verdict cards lead the report (default: "
                   "./stratbench.toml where there is one).")
@fail_on_regression_option
def command(results: str | None, out: str | None, config: str | None,
            fail_on_regression: bool) -> None:
    """Write the HTML report: recommendations, plots, history, regressions."""
    from harness.core.project import find_project

    project = find_project(config)
    if results is None and project is not None and project.results:
        results = project.results
    path = make_report(results, project, out)
    info(f"report written ({path.stat().st_size // 1024} KiB)")
    click.echo(path)
    if fail_on_regression:
        exit_on_regressions(results)
