"""How a case's child process is started: the one command line every launcher uses.

Apart from the placement rules so that each framework's placement can import it without
importing the other's.
"""

from __future__ import annotations

import sys
from pathlib import Path

LOOPBACK = "127.0.0.1"


def worker_argv(case_file: Path, role: str, index: int) -> tuple[str, ...]:
    return (sys.executable, "-m", "harness.worker", "--case", str(case_file),
            "--role", role, "--index", str(index))
