"""Errors a user can act on.

Anything raised as :class:`InputError` (or a subclass) reaches the user as one line on stderr
and exit code 2, never as a traceback: it means the input was wrong, not that stratbench is.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: the message names the bad value and, where useful, the allowed ones."""


def choices_message(kind: str, value: object, allowed: list[str] | tuple[str, ...]) -> str:
    """The one wording every 'unknown X' error uses, so users learn it once."""
    return f"unknown {kind} {value!r} (choose from {', '.join(allowed)})"
