"""`stratbench merge`: several results directories (machines, nights) into one."""

from __future__ import annotations

from pathlib import Path

import click

from harness.commands.common import CONTEXT_SETTINGS, info
from harness.core.errors import InputError

HELP = """
Copy every run of SOURCES into --into, each with its own environment manifest: history and
regressions stay per machine (environment fingerprint), so merged machines are never compared
with each other.

Every run of A, B, ... copied into C with its environment: history from several machines or
nights in one directory, compared only within each machine.
"""


@click.command("merge", help=HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--into", "into", required=True, type=click.Path(path_type=Path),
              help="The results directory to merge into (created if missing).")
def command(sources: tuple[Path, ...], into: Path) -> None:
    """Copy every run of SOURCES into --into, each with its own environment manifest:
    history and regressions stay per machine (environment fingerprint), so merged
    machines are never compared with each other."""
    from results.store import merge_into

    for source in sources:
        if source.resolve() == into.resolve():
            raise InputError(f"{source} is the directory merged into; name it once, as --into")
        if not (source / "runs").is_dir():
            raise InputError(f"no results under {source} (run `stratbench run` or `bench` "
                             f"first)")
    copied, present = merge_into(list(sources), into)
    info(f"merged {len(copied)} run(s) into {into}"
         + (f"; {len(present)} already there" if present else ""))
    click.echo(into)
