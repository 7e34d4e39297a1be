"""What the tests check after a case: no process of a case outlived it."""

from __future__ import annotations

import psutil


def case_processes() -> set[int]:
    """This test process's descendants that are case processes (`harness.worker`); other
    helpers (multiprocessing's resource tracker, a browser driver) are not ours to judge."""
    alive = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if "harness.worker" in " ".join(proc.cmdline()):
                alive.add(proc.pid)
        except psutil.Error:
            continue
    return alive
