"""The child process of a case: `python -m harness.worker --case FILE --role R --index I`.

Measure in the child, decide in the parent (pyperf): the worker builds its workload, times
its own steps and writes a JSON report; the parent only launches, waits and collects.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import resource
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from harness.core.case import Case, Placement, WorkerReport
from harness.core.strategies import TF_PS_SERVER_ROLES
from harness.launch.priority import realtime_priority

# framework -> module holding `run(case, role, index, workdir) -> dict`
RUNNER_MODULES = {"torch": "harness.runners.torch_runner", "tf": "harness.runners.tf_runner"}
# Keras 3, imported by `import tensorflow`, imports scikit-learn where it is installed, for
# its scikit-learn wrappers, which no runner uses: 1.3 s of CPU of a TF worker's 8.7 s start
# (`python -X importtime -c "import tensorflow"`). A TF worker imports its runner with these
# hidden (Keras then goes without its wrappers) and may import them afterwards (the digits).
HIDDEN_WHILE_IMPORTING = {"tf": ("sklearn",), "torch": ()}
# A TF parameter-server cluster's server tasks (TF_PS_SERVER_ROLES) run the graphs the chief
# sends and build no model, so they import TF without Keras too, which TF imports eagerly
# where it can (1.1 s of CPU a server, of 7.6).


def hidden_while_importing(case: Case, role: str) -> tuple[str, ...]:
    """What the worker imports its runner without (`hidden`)."""
    hide = HIDDEN_WHILE_IMPORTING[case.framework]
    if (case.framework, case.strategy) == ("tf", "parameter_server") \
            and role in TF_PS_SERVER_ROLES:
        return (*hide, "keras")
    return hide


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _write_json(path: Path, data: WorkerReport | Placement) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def failure_path(report_path: Path) -> Path:
    """Where a worker that raised leaves its one-line error for the parent."""
    return report_path.with_suffix(".error")


@contextlib.contextmanager
def hidden(modules: tuple[str, ...]) -> Iterator[None]:
    """Importing any of `modules` raises ImportError inside, as if it were not installed; a
    module already imported stays as it is, and all import normally afterwards."""
    hide = [name for name in modules if name not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hide:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.worker")
    parser.add_argument("--case", required=True, type=Path)
    parser.add_argument("--role", required=True)
    parser.add_argument("--index", required=True, type=int)
    parser.add_argument("--report", required=True, type=Path)
    args = parser.parse_args(argv)
    case = Case.from_json(args.case.read_text())
    role, index, report_path = args.role, args.index, args.report
    if role == "slurm":  # a task of an srun step: Slurm's environment says who it is
        from harness.runners import slurm_task

        role, index, where = slurm_task.assume(case)
        report_path = args.report.with_name(f"{role}{index}.json")
        # servers never report: say where this task runs before it starts
        _write_json(report_path.with_suffix(".where.json"), where)
    realtime = bool(case.options.get("realtime")) and realtime_priority()
    with hidden(hidden_while_importing(case, role)):
        runner = importlib.import_module(RUNNER_MODULES[case.framework])
    try:
        report: WorkerReport = runner.run(case, role, index, report_path.parent)
    except Exception as exc:
        # The error goes to disk first: a framework thread may still crash the process
        # (TF was seen to end a survivor of a frozen peer with SIGSEGV while it printed).
        failure_path(report_path).write_text(traceback.format_exception_only(exc)[-1].strip())
        traceback.print_exc()
        return 1
    report["realtime"] = realtime
    report["peak_rss_bytes"] = peak_rss_bytes()
    report["pid"] = os.getpid()
    _write_json(report_path, report)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The report is on disk: skip interpreter teardown, where framework threads (gloo,
    # TensorPipe, TF's runtime) may abort the process after the work is done.
    os._exit(code)
