"""What the tests check after a case: no process of a case outlived it."""

from __future__ import annotations

import os

import psutil

# Every process a test session starts inherits this marker (set in conftest.py), so checks
# find ours even after they were re-parented, and never blame anyone else's.
SESSION_MARKER = "STRATBENCH_TEST_SESSION"


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


def session_case_processes() -> list[str]:
    """Case processes of this test session, wherever they were re-parented (a killed parent
    leaves orphans that are no longer anybody's descendants)."""
    found = []
    marker = os.environ[SESSION_MARKER]
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            ours = proc.environ().get(SESSION_MARKER) == marker
        except psutil.Error:
            continue
        cmd = " ".join(proc.info["cmdline"] or [])
        if ours and ("harness." in cmd or "ip netns exec" in cmd):  # not multiprocessing's
            found.append(f"process {proc.info['pid']}: {cmd[:120]}")
    return found
