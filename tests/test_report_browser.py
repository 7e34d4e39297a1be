"""The report in a real headless Chromium: tables and every plot render, no console errors.

Uses playwright (driving the system's Chromium, never a downloaded one) where installed, else
Chromium's own command line (--dump-dom, --screenshot, console messages from its log).
The screenshot is kept in pytest's tmp dir.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.build import write_report
from results.schema import ResultRow
from results.store import ResultsStore

pytestmark = pytest.mark.heavy

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)


MANIFEST = {"memory_bytes": 16e9, "cpu": {"model": "test cpu", "logical_cores": 2}}


def case(run_id: str, strategy: str, median: float, *, workload: str = "mlp",
         replicas: int = 2) -> ResultRow:
    return ResultRow(
        run_id=run_id, case_id=f"torch/{strategy}/{workload}:S/local/{replicas}",
        framework="torch", strategy=strategy, workload=workload, size="S", cluster="local",
        replicas=replicas, status="ok", global_batch=64 * replicas,
        step_time_median_s=median, step_time_ci95_low_s=median * 0.99,
        step_time_ci95_high_s=median * 1.01, throughput_samples_s=64 * replicas / median,
        env_fingerprint="abc123")


@pytest.fixture
def report(tmp_path):
    store = ResultsStore(tmp_path / "results")
    for run_id, ddp in (("20260101T000000Z-aaaaaa", 0.010), ("20260102T000000Z-bbbbbb", 0.02)):
        store.start_run(MANIFEST, run_id=run_id)
        store.write_case(case(run_id, "single_device", 0.004, replicas=1))
        store.write_case(case(run_id, "ddp", ddp))
        store.write_case(case(run_id, "single_device", 0.003, replicas=1, workload="recsys"))
        store.write_case(case(run_id, "parameter_server", 0.006, workload="recsys"))
    return write_report(store.root, tmp_path / "report.html")


def _check_dom(svgs: list[int], rec_rows: int, text: str) -> None:
    assert rec_rows >= 4, "recommendation table rows missing"
    assert len(svgs) >= 6 and all(n >= 5 for n in svgs), f"empty plots: {svgs}"
    assert "Recommendations" in text and "History across runs" in text


def test_report_renders_in_chromium(report, tmp_path):
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    shot = tmp_path / "report.png"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _with_cli(report, shot)
    else:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            failed: list[str] = []
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(report.as_uri())
            svgs = page.eval_on_selector_all(
                "svg.chart", "els => els.map(e => e.querySelectorAll('*').length)")
            sizes = page.eval_on_selector_all(
                "svg.chart", "els => els.map(e => e.getBoundingClientRect().width)")
            rec_rows = page.locator("table.rec tr").count()
            _check_dom(svgs, rec_rows, page.inner_text("body"))
            assert all(w > 100 for w in sizes)
            assert page.locator("tr.regression").count() == 1
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        assert errors == [] and failed == []
    assert shot.stat().st_size > 10_000


def _with_cli(report: Path, shot: Path) -> None:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
            "--v=0"]
    dom = subprocess.run([*base, "--dump-dom", report.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = [len(re.findall(r"<(?:line|circle|polyline|rect|text)\b", body))
            for body in re.findall(r'<svg class="chart".*?</svg>', dom.stdout, re.S)]
    tables = re.findall(r'<table class="rec">.*?</table>', dom.stdout, re.S)
    _check_dom(svgs, sum(t.count("<tr") for t in tables), dom.stdout)
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1400,4000",
                    report.as_uri()], capture_output=True, timeout=120, check=True)
