"""`stratbench recommend`: ranked strategies per workload and target cluster, with reasons."""

from __future__ import annotations

import click

from harness.commands.common import json_option, print_json, results_option
from harness.paths import results_dir


@click.command("recommend")
@click.option("--workload", "workloads", multiple=True, metavar="FAMILY:SIZE",
              help="Workload(s) to recommend for (default: every measured one).")
@click.option("--target", "targets", multiple=True, metavar="SPEC",
              help="local, netns:..., or preset:NAME[,hosts=1|4|32] (repeatable; default: "
                   "the measured clusters plus preset:eth25_v100,hosts=4 and "
                   "preset:dgx_h100_ib,hosts=1|16).")
@click.option("--samples", type=float, default=None, metavar="N",
              help="Samples to train (dataset size x epochs) for the time and cost columns "
                   "[default: 1e7].")
@click.option("--price", type=float, default=None, metavar="USD",
              help="Price per device-hour for measured and emulated targets (presets carry "
                   "their own).")
@results_option
@json_option
def command(workloads: tuple[str, ...], targets: tuple[str, ...], samples: float | None,
            price: float | None, results: str | None, as_json: bool) -> None:
    """Rank strategies by throughput, memory fit and cost, and say why."""
    from harness.recommend import (
        DEFAULT_SAMPLES,
        format_table,
        recommend_from_store,
        to_records,
    )

    frame = recommend_from_store(results_dir(results), workloads=workloads, targets=targets,
                                 samples=DEFAULT_SAMPLES if samples is None else samples,
                                 price=price)
    if as_json:
        print_json(to_records(frame))
    else:
        click.echo(format_table(frame))
