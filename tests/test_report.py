"""The HTML report: history across runs with regressions flagged, escaping, self-containment."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pandas as pd
import pytest

from reports import history
from reports.build import build_report
from results.schema import ResultRow
from results.store import ResultsStore

EVIL = "<script>alert(1)</script>"
MANIFEST = {"memory_bytes": 16e9, "cpu": {"model": "test cpu", "logical_cores": 2},
            "versions": {"stratbench": "0.1.0"}}


def case(run_id: str, strategy: str, median: float, *, ci: float = 0.01,
         workload: str = "mlp", size: str = "S", replicas: int = 2, status: str = "ok",
         reason: str = "") -> ResultRow:
    return ResultRow(
        run_id=run_id, case_id=f"torch/{strategy}/{workload}:{size}/local/{replicas}",
        framework="torch", strategy=strategy, workload=workload, size=size, cluster="local",
        replicas=replicas, status=status, reason=reason, global_batch=64 * replicas,
        step_time_median_s=median, step_time_ci95_low_s=median * (1 - ci),
        step_time_ci95_high_s=median * (1 + ci),
        throughput_samples_s=64 * replicas / median if status == "ok" else math.nan,
        scaling_efficiency=math.nan, env_fingerprint="abc123")


@pytest.fixture
def two_runs(tmp_path):
    """Run 1, then run 2 where ddp got 2x slower (small CIs) and fsdp 0.5% slower."""
    store = ResultsStore(tmp_path)
    for run_id, ddp, fsdp in (("20260101T000000Z-aaaaaa", 0.010, 0.020),
                              ("20260102T000000Z-bbbbbb", 0.020, 0.0201)):
        store.start_run(MANIFEST, run_id=run_id)
        store.write_case(case(run_id, "single_device", 0.004, replicas=1))
        store.write_case(case(run_id, "ddp", ddp))
        store.write_case(case(run_id, "fsdp", fsdp))
        store.write_case(case(run_id, "parameter_server", math.nan, status="failed",
                              reason="RPC timed out after 60 s"))
    return tmp_path


def test_compare_rule():
    earlier = [(0.010, 0.0002)]
    assert history.compare(0.020, 0.0004, earlier)["verdict"] == "regression"
    assert history.compare(0.01005, 0.0002, earlier)["verdict"] == "ok"
    assert history.compare(0.005, 0.0001, earlier)["verdict"] == "improvement"
    assert history.compare(0.010, 0.0, [])["verdict"] == "first"
    # noisy history: runs at 10 and 14 ms; 15 ms is within 3 x their 4 ms range
    assert history.compare(0.015, 0.0, [(0.010, 0.0), (0.014, 0.0)])["verdict"] == "ok"
    # wide CI: 20% slower but the interval is 30% wide
    assert history.compare(0.012, 0.003, earlier)["verdict"] == "ok"


def test_history_flags_the_planted_slowdown_only(two_runs):
    from results.store import load

    h = history.history(load(two_runs))
    latest = h.groupby("case_id").tail(1).set_index("case_id")["verdict"]
    assert latest["torch/ddp/mlp:S/local/2"] == "regression"
    assert latest["torch/fsdp/mlp:S/local/2"] == "ok"
    assert latest["torch/single_device/mlp:S/local/1"] == "ok"
    assert list(history.regressions(h)["case_id"]) == ["torch/ddp/mlp:S/local/2"]


def test_report_shows_history_regression_and_failures(two_runs):
    html = build_report(two_runs)
    hist = html[html.index('id="history"'):html.index('id="failures"')]
    assert "20260101T000000Z-aaaaaa" in hist and "20260102T000000Z-bbbbbb" in hist
    assert "1 regression(s) in the latest runs" in hist
    flagged = re.findall(r'<tr class="regression"><td><code>([^<]+)</code>', hist)
    assert flagged == ["torch/ddp/mlp:S/local/2"]
    assert 'class="flag"' in hist  # the red ring on the plot
    assert "regression rule" in hist.lower()
    failures = html[html.index('id="failures"'):]
    assert "RPC timed out after 60 s" in failures and "failed" in failures


def test_report_sections_and_self_contained(two_runs):
    html = build_report(two_runs)
    order = [html.index(f'id="{s}"') for s in ("recommendations", "environment", "measured",
                                                "collectives", "validation", "crossover",
                                                "history", "failures")]
    assert order == sorted(order)
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "<link" not in html.lower() and "@import" not in html
    assert html.count("<svg") >= 4  # scaling, crossover (2 per workload), history
    assert "test cpu" in html  # the environment manifest
    assert "torch/ddp" in html and "measured" in html


def test_strings_from_results_are_escaped(tmp_path):
    store = ResultsStore(tmp_path)
    run_id = "20260101T000000Z-cccccc"
    store.start_run(MANIFEST | {"host": EVIL}, run_id=run_id)
    store.write_case(case(run_id, "single_device", 0.004, replicas=1, workload=EVIL, size=""))
    store.write_case(case(run_id, "ddp", 0.01, workload=EVIL, size=""))
    store.write_case(case(run_id, "fsdp", math.nan, status="failed", reason=EVIL))
    store.write_table(run_id, "validation", "v", pd.DataFrame(
        {"kind": ["step"], "what": [EVIL], "cluster": [EVIL], "bytes": [1e6], "replicas": [2],
         "measured_s": [0.1], "predicted_s": [0.12], "error": [0.2]}))
    html = build_report(tmp_path)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4


def test_report_cli_writes_one_file(two_runs, tmp_path):
    out = tmp_path / "out" / "r.html"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--results",
                           str(two_runs), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--results",
                          str(tmp_path / "nothing")], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("stratbench: error: no results")


def test_bench_ends_with_recommend_and_report(tmp_path, monkeypatch):
    """The nightly job's last stages, with its heavy stages replaced by stored rows."""
    import types

    from click.testing import CliRunner

    from harness.commands import bench

    def fake_run_cases(cases, store, run_id, skip, quiet, cluster=None):
        rows = [case(run_id, "single_device", 0.004, replicas=1), case(run_id, "ddp", 0.01)]
        for r in rows:
            store.write_case(r)
        return rows

    monkeypatch.setattr(bench, "run_cases", fake_run_cases)
    monkeypatch.setattr(bench, "run_comm", lambda *a, **k: types.SimpleNamespace(
        status="unavailable", reason="skipped in this test"))
    monkeypatch.setattr(bench, "simulate_stage", lambda store, run_id, names: 0)
    monkeypatch.setattr(bench, "SIM_TARGETS", ("preset:eth25_v100,hosts=1",))
    result = CliRunner().invoke(bench.command, ["--results", str(tmp_path), "--steps", "1",
                                                "--repeats", "1"])
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last == str(tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "torch/ddp" in html and 'id="recommendations"' in html


def test_fail_on_regression_exits_1_and_names_the_case(two_runs, tmp_path):
    cmd = [sys.executable, "-m", "harness.cli", "report", "--results", str(two_runs),
           "--out", str(tmp_path / "r.html")]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    strict = subprocess.run([*cmd, "--fail-on-regression"], capture_output=True, text=True,
                            timeout=120)
    assert strict.returncode == 1
    assert "regression: torch/ddp/mlp:S/local/2 20.00 ms vs 10.00 ms" in strict.stderr
    assert (tmp_path / "r.html").is_file()  # the report is still written
