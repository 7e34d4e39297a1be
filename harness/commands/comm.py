"""`stratbench comm`: nccl-tests-style collective micro-benchmarks (issue 5)."""

from __future__ import annotations

import click

from harness import catalog, specs
from harness.commands.common import NotBuiltError, json_option, results_option


@click.command("comm")
@click.option("--framework", default="torch", show_default=True, help="tf, torch or all.")
@click.option("--cluster", default="local", show_default=True)
@click.option("--sizes", default="1KiB:256MiB", show_default=True, metavar="MIN:MAX")
@results_option
@json_option
def command(framework: str, cluster: str, sizes: str, results: str | None,
            as_json: bool) -> None:
    """Time all-reduce, broadcast, reduce-scatter, all-gather and PS push/pull by size."""
    catalog.frameworks(framework)
    specs.parse_cluster(cluster)
    specs.parse_size_range(sizes)
    raise NotBuiltError("comm", "collective benchmarks: issue #5")
