"""`stratbench validate`: how far the simulator is off on the emulated runs we measured."""

from __future__ import annotations

import click

from harness.commands.common import CONTEXT_SETTINGS, info, json_option, print_json, results_option
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

HELP = """
Predict every measured emulated-host case from calibration alone; store the error.

Predict every measured point on emulated hosts (collective sweeps and step times) from
calibration alone and store (predicted - measured) / measured; prints the table and the median
error per kind. Kind `wire` sets the simulator's bytes per host and step beside what each
emulated host's interface counters saw (wire_bytes_per_step); kind `memory` the memory model
beside the measured model memory. Reports and recommendations show the newest such table.

When nothing measured and no prediction code changed since it, that table is shown again instead
of re-predicting the directory (--force predicts again). It names, one `note:` line each, the
calibration a prediction went without (a library's loopback sweep, a rank count, a cluster's
all-reduce sweep, torch's all-to-all swept near embedding sharding's exchange, a strategy's
local run) and the command that fills it.

A collective's floor (what the library, the cores and the emulated path cost with no bandwidth
limit) comes from a sweep on the same number of unshaped hosts where there is one, else from
loopback: sweep `--cluster netns:hosts=N,rate=unshaped` beside the shaped runs
(docs/SIMULATOR.md says why and by how much it helps). Step times take each library's own cost
per message and byte from loopback sweeps at the run's rank count (`stratbench comm --framework
all --world N`, three times: the median of the latest 3 is used, one sweep being one noisy
sample), the share of the links each library's collectives reach from its all-reduce swept on
the cluster (`stratbench comm --framework all --cluster netns:... --world N --sizes
16MiB:16MiB`, as one runs nccl-tests before a job; for embedding sharding also torch's
all-to-all near its exchange's size, `stratbench comm --cluster netns:... --world N --sizes
256KiB:4MiB`) and each runtime's own time from local runs of the strategy (`stratbench run` with
no --cluster); validate names what a directory lacks.
"""


@click.command("validate", help=HELP, context_settings=CONTEXT_SETTINGS)
@results_option
@json_option
@click.option("--force", is_flag=True,
              help="Predict again even if nothing measured and no prediction code changed "
                   "since the last validation.")
def command(results: str | None, as_json: bool, force: bool) -> None:
    """Predict every measured emulated-host case from calibration alone; store the error."""
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
