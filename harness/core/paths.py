"""Where results live: one rule, used by every command."""

from __future__ import annotations

import os
from pathlib import Path

RESULTS_ENV = "STRATBENCH_RESULTS"
DEFAULT_RESULTS = "stratbench-results"


def results_dir(option: str | os.PathLike[str] | None = None) -> Path:
    """`--results DIR`, else `$STRATBENCH_RESULTS`, else `./stratbench-results` (DESIGN.md)."""
    if option:
        return Path(option)
    env = os.environ.get(RESULTS_ENV)
    if env:
        return Path(env)
    return Path.cwd() / DEFAULT_RESULTS
