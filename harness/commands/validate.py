"""`stratbench validate`: how far the simulator is off on the emulated runs we measured."""

from __future__ import annotations

import click

from harness.commands.common import info, json_option, print_json, results_option
from harness.core.paths import results_dir
from harness.run import environment
from harness.validate.score import (
    VALIDATION_TABLE,
    cached_validation,
    calibration_gaps,
    format_table,
    inputs_fingerprint,
    summarize,
    validate,
)
from results.store import ResultsStore


@click.command("validate")
@results_option
@json_option
@click.option("--force", is_flag=True,
              help="Predict again even if nothing measured and no prediction code changed "
                   "since the last validation.")
def command(results: str | None, as_json: bool, force: bool) -> None:
    """Predict every measured emulated-host case from calibration alone; store the error.

    When neither the measurements nor the prediction code changed since the newest stored
    validation, that one is shown again instead of re-predicting the whole directory."""
    store = ResultsStore(results_dir(results))
    cached = None if force else cached_validation(store, inputs_fingerprint(store.root))
    if cached is not None:
        stored_in, table = cached
        if as_json:
            print_json({"run_id": stored_in, "cached": True, "summary": summarize(table),
                        "rows": table.to_dict("records")})
        else:
            info(f"nothing changed since the validation in run {stored_in}: shown from it "
                 "(--force predicts again)")
            click.echo(format_table(table))
        _say_gaps(store)
        return
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
        print_json({"run_id": run_id, "cached": False, "summary": summarize(table),
                    "rows": table.to_dict("records")})
    else:
        info(f"validation stored in run {run_id}")
        click.echo(format_table(table))
        _say_gaps(store)


def _say_gaps(store: ResultsStore) -> None:
    from harness.validate.score import unscored_steps

    for gap in calibration_gaps(store):
        info(f"note: {gap}")
    for line in unscored_steps(store):
        info(f"note: {line}")
