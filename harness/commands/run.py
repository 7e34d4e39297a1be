"""`stratbench run`: benchmark strategies on real workloads (runners land with issues 4/5)."""

from __future__ import annotations

import click

from harness import catalog, specs
from harness.commands.common import NotBuiltError, json_option, results_option


@click.command("run")
@click.option("--suite", type=click.Choice(["quick", "nightly", "full"]), default=None,
              help="A predefined case matrix.")
@click.option("--framework", default="all", show_default=True, help="tf, torch or all.")
@click.option("--strategy", "strategy_names", multiple=True, metavar="NAME",
              help="Strategy name (repeatable) or all.")
@click.option("--workload", "workloads", multiple=True, metavar="FAMILY:SIZE",
              help="Workload (repeatable), e.g. mlp:S, or module:callable.")
@click.option("--cluster", default="local", show_default=True,
              help="local | netns:hosts=N,rate=RATE[,...] | slurm[:...]")
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=1.0), default=600.0, show_default=True,
              help="Seconds per case before its process tree is killed.")
@click.option("--resume", is_flag=True, help="Finish the latest run; skip finished cases.")
@results_option
@json_option
def command(suite: str | None, framework: str, strategy_names: tuple[str, ...],
            workloads: tuple[str, ...], cluster: str, steps: int, warmup: int, repeats: int,
            timeout: float, resume: bool, results: str | None, as_json: bool) -> None:
    """Train workloads under each strategy and store one row per case."""
    catalog.strategies(framework, strategy_names)
    specs.parse_cluster(cluster)
    raise NotBuiltError("run", "strategy runners: issues #4 and #5")
