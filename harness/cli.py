"""The `stratbench` command: parse, call, print. Every verb lives in harness/commands/."""

from __future__ import annotations

import importlib
import signal
import sys
import warnings

import click

from harness import __version__
from harness.commands.common import CONTEXT_SETTINGS
from harness.core.errors import InputError
from workloads.spec import WorkloadError

USAGE_EXIT = 2

# verb -> its module under harness/commands/, imported only when the verb runs: importing
# every verb (TensorFlow's and the benchmark's helpers among them) took a second before any
# command started
VERBS = ("env", "workloads", "run", "comm", "simulate", "validate", "recommend", "report",
         "bench", "merge", "cleanup", "devicecheck")


class _LazyVerbs(click.Group):
    """click's documented lazy-loading group: a verb's module is imported when it is called
    or its help is shown (https://click.palletsprojects.com/en/stable/complex/)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in VERBS:
            return None
        command = importlib.import_module(f"harness.commands.{cmd_name}").command
        assert isinstance(command, click.Command) and command.name == cmd_name
        return command


@click.group(cls=_LazyVerbs, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="stratbench")
def cli() -> None:
    """Measure, simulate and recommend distributed-training strategies."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings (e.g. a skipped corrupt results file) as one stderr line each."""
    print(f"stratbench: warning: {_one_line(str(message))}", file=sys.stderr)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a scheduler's or CI's kill, `kill PID`) unwinds like Ctrl-C, so every
    `finally` runs: process groups killed, emulated hosts and namespaces torn down."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Entry point. Bad input: one line on stderr, exit code 2, never a traceback."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    from results.store import StoreError

    warnings.showwarning = _show_warning
    try:
        result = cli.main(args=argv, prog_name="stratbench", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        print("stratbench: interrupted", file=sys.stderr)
        return 130
    except click.UsageError as exc:
        print(f"stratbench: error: {_one_line(exc.format_message())}", file=sys.stderr)
        return USAGE_EXIT
    except click.ClickException as exc:
        print(f"stratbench: error: {_one_line(exc.format_message())}", file=sys.stderr)
        return exc.exit_code
    except (InputError, WorkloadError) as exc:  # both one line by contract
        print(f"stratbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return USAGE_EXIT
    except StoreError as exc:
        print(f"stratbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
