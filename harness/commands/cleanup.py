"""`stratbench cleanup`: remove what killed runs left behind (issue 6 adds emulated hosts)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from harness.commands.common import CONTEXT_SETTINGS, info, results_option
from harness.core.paths import results_dir
from harness.launch import netns

STALE_TMP_S = 3600.0


def remove_stale_temporaries(root: Path, older_than_s: float = STALE_TMP_S) -> list[Path]:
    """Hidden temporaries of writers that died before their rename (never visible rows)."""
    now = time.time()
    removed = []
    for tmp in root.glob("runs/*/*/.*.tmp") if root.is_dir() else []:
        try:
            if now - tmp.stat().st_mtime > older_than_s:
                tmp.unlink()
                removed.append(tmp)
        except FileNotFoundError:
            continue
    return removed


@click.command("cleanup", context_settings=CONTEXT_SETTINGS)
@results_option
def command(results: str | None) -> None:
    """Remove leftovers of earlier runs: emulated hosts, stale temporary files."""
    removed = remove_stale_temporaries(results_dir(results))
    info(f"removed {len(removed)} stale temporary file(s)")
    if netns.unavailable_reason() is None:
        hosts = netns.remove_leftovers()
        info(f"removed {len(hosts)} emulated host namespace(s)"
             + (f": {', '.join(hosts)}" if hosts else ""))
