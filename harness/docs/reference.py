"""docs/COMMANDS.md, written from the commands' own help so the two cannot drift.

Write it again after changing a command's options or help:
``python -m harness.docs.reference > docs/COMMANDS.md`` (a test compares them).
"""

from __future__ import annotations

import click

from harness.cli import VERBS, cli

WIDTH = 100
HEADER = """# Command reference

Written by `python -m harness.docs.reference` from each command's `--help`; edit the help
(in `harness/commands/`), not this file. Every command takes `-h/--help`. Bad input gets one
line on stderr and exit code 2. Results go to `--results DIR`, else `$STRATBENCH_RESULTS`, else
`./stratbench-results`. `--json` puts machine-readable output on stdout and nothing else there;
progress goes to stderr. Commands that start a framework probe it once (its versions and
devices, in a child that imports it: seconds); `$STRATBENCH_PROBE_CACHE`, where it names a
folder, keeps that probe there for later commands until the framework or the visible devices
change.
"""


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    return click.Context(command, info_name=name, parent=parent, terminal_width=WIDTH,
                         max_content_width=WIDTH, help_option_names=["-h", "--help"])


def render() -> str:
    root = _context(cli, "stratbench", None)
    parts = [HEADER, "```text", cli.get_help(root), "```", ""]
    for verb in VERBS:
        command = cli.get_command(root, verb)
        assert command is not None
        parts += [f"## stratbench {verb}", "", "```text",
                  command.get_help(_context(command, verb, root)), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
