"""Process groups: reports collected, crashes and hangs end the group, nothing survives."""

from __future__ import annotations

import json
import sys
import textwrap

import psutil
import pytest

from harness.core.case import Case
from harness.launch.ports import free_ports
from harness.launch.processes import ProcessSpec, blame_order, run_group

WRITE_REPORT = textwrap.dedent("""
    import json, sys, time
    report = sys.argv[sys.argv.index("--report") + 1]
    mode = sys.argv[1]
    if mode == "crash":
        raise RuntimeError("boom in worker")
    if mode == "hang":
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        time.sleep(300)
    json.dump({"ok": mode}, open(report, "w"))
""")


def spec(mode: str, index: int = 0, must_finish: bool = True) -> ProcessSpec:
    return ProcessSpec("worker", index, (sys.executable, "-c", WRITE_REPORT, mode),
                       must_finish=must_finish)


def _no_orphans(pids_before: set[int]) -> None:
    """No process of the case survives; a SIGKILLed one may take a moment to be gone (on
    2 busy cores it was still listed as running right after the kill, now and then)."""
    leftovers = [p for p in psutil.process_iter(["pid", "cmdline"])
                 if p.pid not in pids_before and "time.sleep(300)" in " ".join(
                     p.info["cmdline"] or [])]
    _, alive = psutil.wait_procs(leftovers, timeout=2)
    assert not alive, alive


def test_reports_are_collected(tmp_path):
    result = run_group([spec("a", 0), spec("b", 1)], tmp_path, timeout_s=60)
    assert result.status == "ok", result.reason
    assert [o.report for o in result.outcomes] == [{"ok": "a"}, {"ok": "b"}]


def test_a_crash_fails_the_group_with_the_error_and_kills_peers(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    result = run_group([spec("hang", 0), spec("crash", 1)], tmp_path, timeout_s=60)
    assert result.status == "failed"
    assert "worker1 exited with code 1" in result.reason
    assert "RuntimeError: boom in worker" in result.reason
    assert result.wall_s < 30
    _no_orphans(before)


def test_a_hang_times_out_and_the_whole_tree_is_killed(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    result = run_group([spec("hang", 0)], tmp_path, timeout_s=2)
    assert result.status == "timeout"
    assert "timed out after 2 s" in result.reason and "worker0" in result.reason
    _no_orphans(before)


def test_servers_that_need_not_finish_are_killed_when_workers_end(tmp_path):
    before = {p.pid for p in psutil.process_iter()}
    result = run_group([spec("hang", 0, must_finish=False), spec("done", 1)], tmp_path, 60)
    assert result.status == "ok"
    assert result.outcomes[1].report == {"ok": "done"}
    _no_orphans(before)


def test_missing_report_is_a_failure(tmp_path):
    silent = ProcessSpec("worker", 0, (sys.executable, "-c", "pass"))
    result = run_group([silent], tmp_path, 30)
    assert result.status == "failed" and "no report from worker0" in result.reason


def test_a_case_names_the_death_by_signal_before_its_peers_errors_on_losing_it():
    """CI saw a killed ps task and the chief's UnavailableError in the same poll; the row
    must name the kill, whatever the roles, and otherwise a worker before a server."""
    chief, ps = spec("a", 0), spec("b", 1, must_finish=False)
    seen = [(chief, 1), (ps, -9)]
    assert min(seen, key=lambda sr: blame_order(*sr)) == (ps, -9)
    assert min([(ps, 1), (chief, 1)], key=lambda sr: blame_order(*sr)) == (chief, 1)
    assert min([(ps, -9), (chief, -11)], key=lambda sr: blame_order(*sr)) == (chief, -11)


def test_free_ports_are_distinct_and_bindable():
    import socket

    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    json.dumps(ports)


CRASH_AFTER_RECORDING = textwrap.dedent("""
    import os, signal, sys
    report = sys.argv[sys.argv.index("--report") + 1]
    open(report[:-len(".json")] + ".error", "w").write("StepError: step 3: the real cause")
    print("The error could be from a previous operation.", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
""")


def test_a_recorded_error_outlives_a_crash_in_teardown(tmp_path):
    """A framework thread may crash a worker after it has raised (TF's survivor of a frozen
    peer ended with SIGSEGV): the error the worker recorded first is the reason."""
    crash = ProcessSpec("worker", 0, (sys.executable, "-c", CRASH_AFTER_RECORDING))
    result = run_group([crash], tmp_path, timeout_s=60)
    assert result.status == "failed"
    assert result.reason == "worker0 exited with code -11: StepError: step 3: the real cause"


def test_a_worker_that_raises_records_the_error_and_exits_1(tmp_path):
    from harness.core.case import Case
    from harness.worker import failure_path, main

    case = Case(framework="torch", strategy="no_such_strategy", workload="mlp:S",
                cluster="local", replicas=1, steps=1, warmup=0, repeats=1, timeout_s=30,
                per_replica_batch=1)
    (tmp_path / "case.json").write_text(case.to_json())
    report = tmp_path / "worker0.json"
    argv = ["--case", str(tmp_path / "case.json"), "--role", "worker", "--index", "0",
            "--report", str(report)]
    assert main(argv) == 1
    assert not report.exists()
    assert failure_path(report).read_text() == (
        "ValueError: no torch runner for strategy 'no_such_strategy'")


def test_the_telling_line_names_the_error_not_the_crashs_continuation():
    """TensorFlow logs a timed-out collective, prints a continuation, then may crash
    (SIGSEGV): the row names the timeout, not "The error could be from a previous
    operation" (seen in CI); a Python exception is kept as before, and plain noise falls
    back to the last line."""
    from harness.launch.processes import error_line

    tf_crash = "\n".join([
        "E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error",
        "E0000 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
        "DEADLINE_EXCEEDED: Collective has timed out during execution.",
        "The error could be from a previous operation. Restart your program to reset.",
        "[mutex.cc : 452] RAW: Lock blocking 0x55e696449320"])
    assert "DEADLINE_EXCEEDED: Collective has timed out" in error_line(tf_crash)
    python = "Traceback (most recent call last):\nValueError: bad shape\nexiting"
    assert error_line(python) == "ValueError: bad shape"
    assert error_line("no named error here\nsomething failed with an error") == \
        "something failed with an error"
    assert error_line("just noise\nlast") == "last" and error_line("") == "no output"


def test_a_module_hidden_while_a_runner_imports_is_importable_after():
    """A TF worker imports TF with scikit-learn hidden (harness.worker.HIDDEN_WHILE_IMPORTING);
    a module already imported is left alone, and the hidden one imports afterwards."""
    import importlib

    from harness.worker import HIDDEN_WHILE_IMPORTING, hidden

    assert "sklearn" in HIDDEN_WHILE_IMPORTING["tf"]
    name = "wave"  # the standard library's, which nothing here imports
    sys.modules.pop(name, None)
    with hidden((name, "json")):
        with pytest.raises(ImportError):
            importlib.import_module(name)
        assert importlib.import_module("json") is json
    assert importlib.import_module(name).__name__ == name


def test_only_a_tf_parameter_servers_tasks_import_tf_without_keras():
    """Its `worker` and `ps` tasks serve the chief's graphs; the chief, every other TF process
    and every torch one build models and keep Keras."""
    from harness.worker import hidden_while_importing

    def case(framework: str, strategy: str) -> Case:
        return Case(framework, strategy, "mlp:S", "local", 2, 3, 1, 1, 60.0, 16)

    ps = case("tf", "parameter_server")
    assert "keras" in hidden_while_importing(ps, "worker")
    assert "keras" in hidden_while_importing(ps, "ps")
    assert "keras" not in hidden_while_importing(ps, "chief")
    assert "keras" not in hidden_while_importing(case("tf", "multi_worker_mirrored"), "worker")
    assert hidden_while_importing(case("torch", "parameter_server"), "worker") == ()
