"""Errors a user can act on.

Anything raised as :class:`InputError` (or a subclass) reaches the user as one line on stderr
and exit code 2, never as a traceback: it means the input was wrong, not that stratbench is.
"""

from __future__ import annotations

# The one wording of 'unknown X' errors; defined with the workloads, which import nothing
# from harness, so that both sides word it the same.
from workloads.spec import choices_message

__all__ = ["InputError", "SpecError", "choices_message"]


class InputError(ValueError):
    """Bad user input: the message names the bad value and, where useful, the allowed ones."""


class SpecError(InputError):
    """A spec (topology, cluster, profile, a quantity) that cannot be parsed; the message names
    the bad part."""
