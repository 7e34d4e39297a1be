"""`stratbench run` end to end: rows, JSON, bad input, and resuming a killed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from stratbench_cli import stratbench

from results import load

FAST = ["--steps", "3", "--warmup", "1", "--repeats", "1", "--timeout", "120"]


@pytest.mark.long
def test_run_json_gives_rows_and_nothing_else_on_stdout(tmp_path):
    proc = stratbench("run", "--framework", "torch", "--strategy", "single_device",
                      "--strategy", "ddp", "--workload", "mlp:S", *FAST,
                      "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["strategy"] for r in out["rows"]] == ["single_device", "ddp"]
    assert all(r["status"] == "ok" for r in out["rows"])
    assert out["rows"][1]["max_weight_diff"] < 1e-4
    stored = load(tmp_path)
    assert sorted(stored.strategy) == ["ddp", "single_device"]
    manifest = json.loads(next(tmp_path.glob("runs/*/manifest.json")).read_text())
    assert manifest["kind"] == "run" and len(manifest["cases"]) == 2
    assert manifest["cpu"]["logical_cores"] >= 1


def test_unknown_workload_is_exit_code_2(tmp_path):
    proc = stratbench("run", "--workload", "gan:S", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("stratbench: error: unknown workload family 'gan'")


@pytest.mark.heavy
@pytest.mark.long
def test_resume_after_a_kill_finishes_without_repeating_finished_cases(tmp_path):
    args = ["run", "--framework", "torch", "--strategy", "single_device", "--strategy", "ddp",
            "--strategy", "fsdp", "--workload", "mlp:S", *FAST, "--results", str(tmp_path)]
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(tmp_path.glob("runs/*/cases/*.parquet")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # stratbench and its workers, mid-run
    proc.wait(30)
    first = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/cases/*.parquet")}
    assert 1 <= len(first) < 3
    resumed = stratbench("run", "--resume", "--results", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(first)} of 3 cases already done" in resumed.stderr
    frame = load(tmp_path)
    assert sorted(frame.strategy) == ["ddp", "fsdp", "single_device"]
    assert frame.run_id.nunique() == 1
    after = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("runs/*/cases/*.parquet")}
    assert all(after[name] == mtime for name, mtime in first.items())  # not rewritten
    effs = frame.set_index("strategy").scaling_efficiency
    assert effs.notna().all(), "resumed cases still find the stored baseline"


def test_resume_without_an_earlier_run_is_a_clear_error(tmp_path):
    proc = stratbench("run", "--resume", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert "no earlier run" in proc.stderr


@pytest.mark.long
def test_a_user_workload_from_a_file_runs_through_the_pipeline(tmp_path):
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "user_workload.py")
    proc = stratbench("run", "--framework", "all", "--strategy", "single_device",
                      "--strategy", "ddp", "--strategy", "one_device",
                      "--workload", f"{fixture}:torch_workload", *FAST,
                      "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["strategy"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["ddp"]["status"] == "ok", rows["ddp"]["reason"]
    assert rows["ddp"]["workload"] == "tiny-torch"
    assert rows["ddp"]["max_weight_diff"] < 1e-5
    assert rows["single_device"]["status"] == "ok"
    assert rows["one_device"]["status"] == "unavailable"
    assert "is a torch model" in rows["one_device"]["reason"]


def test_a_profile_workload_cannot_be_run(tmp_path):
    proc = stratbench("run", "--workload", "profile:params=1e6,flops_per_sample=1e6",
                      "--results", str(tmp_path))
    assert proc.returncode == 2 and "can be simulated" in proc.stderr
