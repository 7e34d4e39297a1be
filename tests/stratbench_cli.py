"""The one way tests call `stratbench`: in this process where nothing needs a fresh one.

A fresh interpreter costs seconds of imports per call. Verbs that compute and print
(simulate, recommend, workloads, validate, report) run in-process through `harness.cli.main`,
their stdout and stderr captured apart, exactly as a subprocess would give them; verbs that
start processes, read signals or the environment (run, comm, bench, env, ...), and any call
given its own working directory or environment, get a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

IN_PROCESS = frozenset({"simulate", "recommend", "workloads", "validate", "report"})


def stratbench(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
               timeout: float = 600, subprocess_only: bool = False
               ) -> subprocess.CompletedProcess[str]:
    """``stratbench ARGS`` as the user runs it: its exit code, stdout and stderr."""
    if (not subprocess_only and cwd is None and env is None and args
            and args[0] in IN_PROCESS and "-h" not in args and "--help" not in args):
        return _in_process(list(args))
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env} if env is not None else None)


def _in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # as the interpreter would end
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # an uncaught error: a traceback and exit 1, as python -m gives
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["stratbench", *argv], code, out.getvalue(),
                                       err.getvalue())
