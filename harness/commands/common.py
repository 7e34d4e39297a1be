"""Options and output helpers every verb shares, so flags mean the same everywhere."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Machine-readable JSON on stdout and nothing else there.")(func)


def results_option(func: F) -> F:
    return click.option("--results", "results", metavar="DIR", default=None,
                        help="Results directory (default: $STRATBENCH_RESULTS, "
                             "else ./stratbench-results).")(func)


def positive_int(name: str) -> click.IntRange:
    return click.IntRange(min=1)


def jsonable(data: Any) -> Any:
    """``data`` with NaN and infinities as null: JSON has no such numbers."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {str(k): jsonable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [jsonable(v) for v in data]
    return data


def print_json(data: Any) -> None:
    json.dump(jsonable(data), sys.stdout, indent=2, sort_keys=True, default=str,
              allow_nan=False)
    sys.stdout.write("\n")


def info(message: str) -> None:
    """Human-facing progress goes to stderr, keeping stdout for results."""
    click.echo(message, err=True)


class NotBuiltError(click.ClickException):
    """A verb of the CLI contract whose machinery has not landed yet: say so, run nothing."""

    exit_code = 1

    def __init__(self, verb: str, issue: str):
        super().__init__(f"'stratbench {verb}' is not built yet ({issue}); nothing was run")
