"""`stratbench validate`: how far the simulator is off on the emulated runs we measured."""

from __future__ import annotations

import click

from harness import environment
from harness.commands.common import info, json_option, print_json, results_option
from harness.paths import results_dir
from harness.validate import VALIDATION_TABLE, format_table, summarize, validate
from results.store import ResultsStore


@click.command("validate")
@results_option
@json_option
def command(results: str | None, as_json: bool) -> None:
    """Predict every measured emulated-host case from calibration alone; store the error."""
    store = ResultsStore(results_dir(results))
    table = validate(store)
    if table.empty:
        raise click.ClickException(
            f"nothing to validate under {store.root}: run `stratbench comm` or `stratbench run`"
            " with --cluster netns:... first")
    store.check_writable()
    manifest = environment.collect(frameworks=False)
    manifest.update(kind="validate")
    run_id = store.start_run(manifest)
    store.write_table(run_id, VALIDATION_TABLE, "simulator", table)
    if as_json:
        print_json({"run_id": run_id, "summary": summarize(table),
                    "rows": table.to_dict("records")})
    else:
        info(f"validation stored in run {run_id}")
        click.echo(format_table(table))
