"""The `stratbench` command: parse, call, print. Every verb lives in harness/commands/."""

from __future__ import annotations

import signal
import sys
import warnings

import click

from harness import __version__
from harness.commands import (
    bench,
    cleanup,
    comm,
    devicecheck,
    env,
    merge,
    recommend,
    report,
    run,
    simulate,
    validate,
    workloads,
)
from harness.core.errors import InputError

USAGE_EXIT = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="stratbench")
def cli() -> None:
    """Measure, simulate and recommend distributed-training strategies."""


for module in (env, workloads, run, comm, simulate, validate, recommend, report, bench, merge,
               cleanup, devicecheck):
    cli.add_command(module.command)


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
    except InputError as exc:
        print(f"stratbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return USAGE_EXIT
    except StoreError as exc:
        print(f"stratbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
