"""Start a group of worker processes, wait with a deadline, and always kill the whole tree.

The parent never times anything (pyperf's rule): each process writes its own JSON report.
Every process starts in its own session, so a timeout or a dead peer ends with killpg of each
group: no orphan keeps a port or a core after the case.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.core.case import Placement, WorkerReport

POLL_S = 0.05
TAIL_CHARS = 2000


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a case: which role (worker, ps, chief, reference) and how to start it."""

    role: str
    index: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    must_finish: bool = True  # False for servers that the case ends by killing (ps tasks)

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"


@dataclass
class Outcome:
    spec: ProcessSpec
    returncode: int | None
    report: WorkerReport | None
    stderr_tail: str


@dataclass
class GroupResult:
    status: str  # ok | failed | timeout
    reason: str
    outcomes: list[Outcome]
    wall_s: float
    placements: list[Placement] = field(default_factory=list)  # where a scheduler ran them


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-TAIL_CHARS:]


#: a line that names what went wrong: an exception's class (``DeadlineExceededError:``) or a
#: status code as TensorFlow's C++ logs it (``DEADLINE_EXCEEDED:``)
NAMED_ERROR = re.compile(r"\b[A-Z]\w*(Error|Exception)\b|\b[A-Z][A-Z_]{3,}: ")


def error_line(tail: str) -> str:
    """The most telling line of a crashed process's stderr (the exception, not the noise):
    the last that names an error, else the last that mentions one. A process that crashes
    after logging its error (TensorFlow aborting a timed-out collective, then a SIGSEGV)
    prints a continuation after it ("The error could be from a previous operation"),
    which says nothing of what went wrong."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for telling in (NAMED_ERROR.search, lambda ln: re.search("error|exception", ln, re.I)):
        for line in reversed(lines):
            if telling(line):
                return line[:300]
    return lines[-1][:300] if lines else "no output"


def _raised(stem: Path) -> str:
    """The exception a worker recorded before it exited (harness.worker), if it did."""
    try:
        return stem.with_suffix(".error").read_text(errors="replace").strip()[:300]
    except OSError:
        return ""


def blame_order(spec: ProcessSpec, returncode: int | None) -> tuple[bool, bool]:
    """Which of the processes seen dead in one poll a failed case names (least first).

    A death by signal first, whatever the role: a signal comes from outside the program (an
    injected fault, the OOM killer, a segfault), and its peers' errors on losing it (gloo's
    "Connection closed by peer", TF's UnavailableError) follow within the same poll when two
    busy cores delay the launcher. Then workers before servers: a server's error is most
    often its reaction to a worker gone."""
    return (returncode is None or returncode >= 0, not spec.must_finish)


def run_group(specs: list[ProcessSpec], workdir: Path, timeout_s: float) -> GroupResult:
    """Run processes together; each writes `<workdir>/<name>.json` as its report."""
    workdir.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[ProcessSpec, subprocess.Popen[bytes], Path]] = []
    start = time.monotonic()
    try:
        for spec in specs:
            err = workdir / f"{spec.name}.stderr"
            with open(err, "wb") as err_fh:
                proc = subprocess.Popen(
                    [*spec.argv, "--report", str(workdir / f"{spec.name}.json")],
                    stdin=subprocess.DEVNULL, stdout=err_fh, stderr=subprocess.STDOUT,
                    env={**os.environ, **spec.env}, start_new_session=True,
                )
            procs.append((spec, proc, err))
        status, reason = "ok", ""
        while True:
            pending = [(s, p) for s, p, _ in procs if s.must_finish and p.poll() is None]
            if not pending and all(p.returncode == 0 for s, p, _ in procs if s.must_finish):
                break  # servers that stumble after every worker is done do not count
            crashed = [(s, p) for s, p, _ in procs if p.poll() not in (None, 0)]
            if crashed:
                spec, proc = min(crashed, key=lambda sp: blame_order(sp[0], sp[1].returncode))
                err = next(e for s, _, e in procs if s is spec)
                status = "failed"
                reason = (f"{spec.name} exited with code {proc.returncode}: "
                          f"{_raised(workdir / spec.name) or error_line(tail(err))}")
                break
            if time.monotonic() - start > timeout_s:
                status = "timeout"
                names = ", ".join(s.name for s, _ in pending)
                reason = f"timed out after {timeout_s:.0f} s waiting for {names}"
                break
            time.sleep(POLL_S)
    finally:
        for _, proc, _ in procs:
            _kill_tree(proc)
    outcomes = []
    for spec, proc, err in procs:
        report_path = workdir / f"{spec.name}.json"
        report = None
        if report_path.exists():
            with contextlib.suppress(ValueError, OSError):
                report = json.loads(report_path.read_text())
        outcomes.append(Outcome(spec, proc.returncode, report, tail(err)))
    if status == "ok":
        missing = [o.spec.name for o in outcomes if o.spec.must_finish and o.report is None]
        if missing:
            status, reason = "failed", f"no report from {', '.join(missing)}"
    return GroupResult(status, reason, outcomes, time.monotonic() - start)
