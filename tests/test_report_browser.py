"""The report in a real headless Chromium: the verdict fills the first screen, tables and
every plot render (once their sections are opened), no console errors.

Uses playwright (driving the system's Chromium, never a downloaded one) where installed, else
Chromium's own command line (--dump-dom, --screenshot, console messages from its log).
Screenshots are kept in pytest's tmp dir.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report import verdict_frame

from reports import verdict as vd
from reports.build import write_report
from results.schema import ResultRow
from results.store import ResultsStore

pytestmark = pytest.mark.heavy

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)


MANIFEST = {"memory_bytes": 16e9, "cpu": {"model": "test cpu", "logical_cores": 2}}
SCREEN = {"width": 1300, "height": 900}  # the first screen the verdict must fill
OPEN_ALL = "document.querySelectorAll('details').forEach(d => d.open = true)"
HEIGHT = "document.documentElement.scrollHeight"


def case(run_id: str, strategy: str, median: float, *, workload: str = "mlp",
         replicas: int = 2) -> ResultRow:
    return ResultRow(
        run_id=run_id, case_id=f"torch/{strategy}/{workload}:S/local/{replicas}",
        framework="torch", strategy=strategy, workload=workload, size="S", cluster="local",
        replicas=replicas, status="ok", global_batch=64 * replicas,
        step_time_median_s=median, step_time_ci95_low_s=median * 0.99,
        step_time_ci95_high_s=median * 1.01, throughput_samples_s=64 * replicas / median,
        env_fingerprint="abc123")


def _store(tmp_path: Path) -> ResultsStore:
    store = ResultsStore(tmp_path / "results")
    for run_id, ddp in (("20260101T000000Z-aaaaaa", 0.010), ("20260102T000000Z-bbbbbb", 0.02)):
        store.start_run(MANIFEST, run_id=run_id)
        store.write_case(case(run_id, "single_device", 0.004, replicas=1))
        store.write_case(case(run_id, "ddp", ddp))
        store.write_case(case(run_id, "single_device", 0.003, replicas=1, workload="recsys"))
        store.write_case(case(run_id, "parameter_server", 0.006, workload="recsys"))
    return store


@pytest.fixture
def report(tmp_path):
    return write_report(_store(tmp_path).root, tmp_path / "report.html")


def _leads(answer) -> dict[str, str]:
    """Each workload's lead verdict: its pick as framework/strategy."""
    return {v.workload: f"{v.pick.framework}/{v.pick.strategy}"
            for v in vd.leads(list(answer.verdicts))}


@pytest.fixture(params=["stored", "given"])
def verdict_report(request, tmp_path, monkeypatch):
    """(report, expected lead picks): the recommender's own output on stored runs, and a
    given answer with verdicts and a sweep for three workloads on three targets (curves)."""
    import harness.recommend.recommender

    store = _store(tmp_path)
    if request.param == "given":
        frame = verdict_frame(workloads=("mlp:S", "recsys:S", "cnn:S"),
                              targets=("preset:dgx_h100_ib (16 devices)",
                                       "preset:eth25_v100 (32 devices)", "local"))
        monkeypatch.setattr(harness.recommend.recommender, "recommend_from_store",
                            lambda root: frame)
    else:
        frame = harness.recommend.recommender.recommend_from_store(store.root)
    return write_report(store.root, tmp_path / "report.html"), _leads(frame)


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
            page.evaluate(OPEN_ALL)  # the evidence is collapsed below the verdict
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


def test_first_screen_is_the_verdict(verdict_report, tmp_path):
    """At 1300x900 each workload's verdict, with its pick, is within the first screen; the
    rest is short: the curves and one line per collapsed section."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    report, leads = verdict_report
    assert leads, "no verdict to look for"
    shot = tmp_path / "first_screen.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=SCREEN)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        failed: list[str] = []
        page.on("requestfailed", lambda r: failed.append(r.url))
        page.goto(report.as_uri())
        for workload, pick in leads.items():
            card = page.locator(f'.verdict[data-workload="{workload}"]')
            assert card.count() == 1, workload
            box = card.bounding_box()
            assert box is not None and box["y"] >= 0, workload
            assert box["y"] + box["height"] <= SCREEN["height"], (workload, box)
            assert pick in card.inner_text(), (workload, pick)
        page.screenshot(path=str(shot))  # the first screen only
        points = page.locator("svg.chart circle.pt").count()
        assert page.locator("svg.chart circle.pt > title").count() == points
        curves = page.locator("#curves svg.chart").count()
        height = page.evaluate(HEIGHT)
        page.evaluate(OPEN_ALL)
        opened = page.evaluate(HEIGHT)
        browser.close()
    assert errors == [] and failed == []
    assert shot.stat().st_size > 10_000
    # The bound: the first screen, then two curves per row at 1300 px (each chart 640x340
    # scaled to about 620 px wide, under 360 px tall with its gap), then a line of at most
    # 40 px for each of the 8 collapsed sections.
    bound = SCREEN["height"] + math.ceil(curves / 2) * 360 + 8 * 40
    assert height < bound, (height, bound)
    assert opened > height + 1000  # the evidence is there, collapsed


@pytest.mark.long
def test_a_project_bench_leads_with_exactly_its_cards_in_order(tmp_path):
    """A project naming a user's model from a file, a known model, a described two-level
    target with a budget, measured on this machine: `bench --config` (what `tox -e bench --
    --config FILE` runs) writes a report whose first 1300x900 screen holds exactly the
    project's cards, in the file's order."""
    import sys

    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    fixture = Path(__file__).parent / "fixtures" / "user_workload.py"
    shutil.copy(fixture, tmp_path / "ours.py")
    target = "two_level:hosts=4,gpus=8,intra=300GB/s,inter=100Gbit"
    (tmp_path / "stratbench.toml").write_text(
        'name = "ours"\nworkloads = ["ours.py:torch_workload", "gpt2_xl"]\n'
        'clusters = ["local"]\nframeworks = ["torch"]\nstrategies = ["ddp"]\n'
        'steps = 3\nrepeats = 1\nresults = "results"\n'
        f'[[targets]]\ntarget = "{target}"\nbudget = 500.0\ndevice = "dgx_a100"\n')
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "--config",
                           str(tmp_path / "stratbench.toml")], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = Path(proc.stdout.strip().splitlines()[-1])
    assert report == tmp_path / "results" / "report.html"
    expected = [("ours.py:torch_workload", target), ("gpt2_xl", target)]
    shot = tmp_path / "project_first_screen.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=SCREEN)
        page.goto(report.as_uri())
        cards = page.locator("#verdict .verdict")
        seen = [(cards.nth(i).get_attribute("data-workload"),
                 cards.nth(i).get_attribute("data-target")) for i in range(cards.count())]
        assert seen == expected
        for i in range(cards.count()):
            box = cards.nth(i).bounding_box()
            assert box is not None and box["y"] >= 0
            assert box["y"] + box["height"] <= SCREEN["height"], (seen[i], box)
            assert "budget $500.00" in cards.nth(i).inner_text()
        page.screenshot(path=str(shot))
        browser.close()
    assert shot.stat().st_size > 10_000


def test_a_projects_report_covers_its_targets_only(tmp_path):
    """`bench --config`'s report for a project with two targets (`local` and
    `preset:dgx_a100,hosts=2`) and one workload, over a results directory that also holds
    another workload's runs: every plot and every table, opened in Chromium, is the project's
    workload on those two targets (no default-suite preset, no other workload)."""
    from harness.core.project import load_project

    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    store = _store(tmp_path)  # mlp:S and recsys:S on local
    targets = ("local", "preset:dgx_a100,hosts=2")
    config = tmp_path / "stratbench.toml"
    config.write_text('name = "two"\nworkloads = ["mlp:S"]\nclusters = ["local"]\n'
                      + "".join(f'[[targets]]\ntarget = "{t}"\n' for t in targets))
    report = write_report(store.root, tmp_path / "report.html", load_project(config))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=SCREEN)
        page.goto(report.as_uri())
        page.evaluate(OPEN_ALL)
        titles = page.eval_on_selector_all(
            "svg.chart > title", "els => els.map(e => e.textContent)")
        tables = page.eval_on_selector_all(
            "#recommendations h3", "els => els.map(e => e.textContent)")
        cards = page.eval_on_selector_all(
            "#verdict .verdict", "els => els.map(e => e.dataset.target)")
        body = page.inner_text("body")
        browser.close()
    assert sorted(tables) == sorted(f"mlp:S on {t}" for t in targets)
    assert cards == list(targets)
    curves = [t for t in titles if " on " in t]
    assert sorted(curves) == sorted(f"mlp:S on {t}" for t in targets)
    assert titles and all(t.startswith("mlp:S") for t in titles), titles
    for other in ("recsys", "eth25_v100", "dgx_h100_ib"):
        assert other not in body, other
