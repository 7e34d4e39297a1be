"""`stratbench bench`: the nightly job. Runs every stage that exists and says which do not."""

from __future__ import annotations

import click

from harness import environment
from harness.commands.common import info, results_option
from harness.paths import results_dir
from results.store import ResultsStore

# Stages of the nightly job that have not landed yet, with the issue that builds each.
PENDING_STAGES = (
    ("run", "strategy runners, issues #4/#5"),
    ("comm", "collective benchmarks, issue #5"),
    ("simulate", "simulator, issue #7"),
    ("recommend + report", "issue #8"),
)


@click.command("bench")
@results_option
def command(results: str | None) -> None:
    """The nightly job: environment, run, comm, simulate, recommend, report."""
    store = ResultsStore(results_dir(results))
    store.check_writable()
    info("collecting the environment manifest ...")
    run_id = store.start_run(environment.collect())
    info(f"run {run_id}: manifest stored")
    for stage, where in PENDING_STAGES:
        info(f"stage {stage}: not built yet ({where}); skipped")
    click.echo(store.run_dir(run_id) / "manifest.json")
