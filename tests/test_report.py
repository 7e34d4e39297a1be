"""The HTML report: the verdict it leads with (the recommender's own), curves with hover
values, history across runs with regressions flagged, escaping, self-containment."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import cast

import pandas as pd
import pytest
from stratbench_cli import stratbench

from harness.recommend.decide import sureness
from harness.recommend.nightly import Card
from harness.recommend.records import Answer, Candidate, Recommendation, SweepPoint, Verdict
from reports import history
from reports import verdict as vd
from reports.build import build_report, recommendation_context
from reports.plots import Series, chart
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
    order = [html.index(f'id="{s}"') for s in ("verdict", "recommendations", "environment",
                                                "measured",
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
    proc = stratbench("report", "--results",
                           str(two_runs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = stratbench("report", "--results",
                          str(tmp_path / "nothing"))
    assert bad.returncode == 2 and bad.stderr.startswith("stratbench: error: no results")


def plant_bench_runs(monkeypatch: pytest.MonkeyPatch, single_s: float, ddp_s: float) -> None:
    """`bench`'s heavy stages replaced: its runs store single_device at ``single_s`` and ddp
    at ``ddp_s`` per step; its collective sweep says it was skipped."""
    import types

    from harness.commands import bench

    def planted(cases, store, run_id, skip, quiet, cluster=None):
        rows = [case(run_id, "single_device", single_s, replicas=1),
                case(run_id, "ddp", ddp_s)]
        for r in rows:
            store.write_case(r)
        return rows

    monkeypatch.setattr(bench, "run_cases", planted)
    monkeypatch.setattr(bench, "run_comm", lambda *a, **k: types.SimpleNamespace(
        status="unavailable", reason="skipped in this test"))


@pytest.mark.long
def test_bench_ends_with_recommend_and_report(tmp_path, monkeypatch):
    """The nightly job's last stages, with its heavy stages replaced by stored rows."""

    from click.testing import CliRunner

    from harness.commands import bench

    plant_bench_runs(monkeypatch, single_s=0.004, ddp_s=0.01)
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
    cmd = ["report", "--results", str(two_runs), "--out", str(tmp_path / "r.html")]
    plain = stratbench(*cmd)
    assert plain.returncode == 0, plain.stderr
    strict = stratbench(*cmd, "--fail-on-regression")
    assert strict.returncode == 1
    assert "regression: torch/ddp/mlp:S/local/2 20.00 ms vs 10.00 ms" in strict.stderr
    assert (tmp_path / "r.html").is_file()  # the report is still written


PRICE = 2.5  # USD per device-hour in the synthetic frames
SAMPLES = 1e7
STRATEGIES = (("torch", "ddp", 0.02), ("torch", "fsdp", 0.03), ("tf", "parameter_server", 0.08))
COUNTS = (1, 2, 4, 8, 16)


def _point(workload: str, target: str, fw: str, strategy: str, comm: float, n: int,
           error: float) -> Candidate:
    """Time to train shrinks with devices until the exchange (comm x n of the step) wins."""
    step = 0.1 / n * (1 + comm * n * n / 4)
    time = SAMPLES / 256 * step
    return Candidate(framework=fw, strategy=strategy, replicas=n, train_time_s=time,
                     cost_usd=time * n / 3600 * PRICE, scaling_efficiency=0.1 / n / step,
                     throughput_samples_s=256 / step, step_time_s=step, source="simulated",
                     validation_error=error, reason=f"exchange is {comm * n:.0%} of the step",
                     memory_per_device_bytes=1e9, device_memory_bytes=8e10,
                     price_per_device_hour=PRICE, train_source="extrapolated")


def verdict_frame(workloads=("mlp:S", "recsys:S"), targets=("preset:dgx_h100_ib (16 devices)",
                                                             "local"), text: str = ""
                  ) -> Recommendation:
    """An answer as harness.recommend.recommender.recommend() returns it: per (workload,
    target) a verdict, each strategy at its best device count, and the sweep.
    ``text`` is appended to every string a verdict shows (escaping tests)."""
    answers = []
    for w in workloads:
        for t in targets:
            points = [_point(w, t, fw, s, comm, n, 0.08 if s == "ddp" else math.nan)
                      for fw, s, comm in STRATEGIES for n in COUNTS]
            best: dict[tuple[str, str], Candidate] = {}
            for p in points:
                key = (p.framework, p.strategy)
                if key not in best or p.train_time_s < best[key].train_time_s:
                    best[key] = p
            ranked = sorted(best.values(), key=lambda p: p.train_time_s)
            chosen = {id(p) for p in ranked}  # each strategy's chosen count; the pick first
            ranked = [replace(p, rank=i) for i, p in enumerate(ranked, 1)]
            pick, runner_up = ranked[0], ranked[1]
            margin = runner_up.train_time_s / pick.train_time_s - 1
            verdict = Verdict(
                workload=w, target=t, status="ok",
                headline=f"use {pick.framework}/{pick.strategy} on {pick.replicas} devices: "
                         f"10 million samples in {pick.train_time_s / 3600:.2g} h for "
                         f"${pick.cost_usd:.2f}{text}",
                why=f"fastest; more devices only add exchange time{text}",
                sure=f"simulated, ±8%; the runner-up is {margin:.0%} slower{text}",
                margin=margin, pick=pick, runner_up=runner_up)
            answers.append(Answer(verdict, tuple(ranked), tuple(
                SweepPoint(p, id(p) in chosen, id(p) in chosen) for p in points)))
    return Recommendation(tuple(answers))


def test_the_report_shows_the_recommenders_verdicts_as_given():
    answer = verdict_frame()
    context = recommendation_context(answer)
    got = context["verdicts"]
    assert len(got) == 4 and [v.workload for v in got] == ["mlp:S"] * 2 + ["recsys:S"] * 2
    assert got[0] is answer.verdicts[0]
    v = got[0]
    assert v.pick is not None and v.runner_up is not None
    assert v.pick.strategy == "ddp" and v.runner_up.strategy == "fsdp" and v.margin > 0
    # each workload leads with its first target that has a pick
    leads = vd.leads([replace(got[0], status="none"), *got[1:]])
    assert [(v.workload, v.target) for v in leads] == [
        ("mlp:S", "local"), ("recsys:S", "preset:dgx_h100_ib (16 devices)")]


def test_a_stored_cards_missing_keys_are_filled():
    v = vd.CardView.of(cast(Card, {"workload": "mlp:S", "target": "t", "why": math.nan}))
    assert v.status == "none" and v.runner_up is None and math.isnan(v.margin)
    assert v.why == "" and v.pick is None and not v.changed


def test_how_sure_weighs_the_margin_against_both_errors():
    """The recommender's own rule (decide.sureness): a 5% margin under the two errors
    together (8% + 12%) is a close call; measured figures against run-to-run noise."""
    def pick(strategy: str, time: float, error: float, source: str = "simulated"
             ) -> Candidate:
        return Candidate(framework="torch", strategy=strategy, replicas=8, source=source,
                         train_time_s=time, validation_error=error)

    sure, margin = sureness(pick("ddp", 7200.0, 0.08), pick("fsdp", 7560.0, 0.12))
    assert margin == pytest.approx(0.05)
    assert "±8%" in sure and "within the error (20%): close" in sure
    sure, _ = sureness(pick("ddp", 100.0, math.nan, "measured"),
                       pick("fsdp", 150.0, math.nan, "measured"))
    assert sure == "measured; the runner-up is 1.5x slower: beyond run-to-run noise (5%)"
    sure, _ = sureness(pick("ddp", 100.0, math.nan, "measured"),
                       pick("fsdp", 103.0, math.nan, "measured"))
    assert sure.endswith("within run-to-run noise (5%): close, either will do")


def test_every_point_has_an_escaped_title():
    svg = str(chart([Series(EVIL, [1, 2, 4], [3.0, 2.0, 1.0], tips=["", EVIL + " tip", ""],
                            flags=[False, True, False], marks=[True, False, False])],
                    title="t", xlabel="devices", ylabel="h", logx=True, log2x=True))
    points = re.findall(r'<circle [^>]*class="pt"><title>([^<]*)</title></circle>', svg)
    assert len(points) == 3 == svg.count('class="pt"')
    assert points[1] == "&lt;script&gt;alert(1)&lt;/script&gt; tip"
    assert points[0] == "&lt;script&gt;alert(1)&lt;/script&gt;: devices 1, h 3"
    assert "<script" not in svg
    rings = re.findall(r'class="(pick|flag)"><title>', svg)
    assert sorted(rings) == ["flag", "pick"]
    ticks = re.findall(r'text-anchor="middle">(\d+)</text>', svg)
    assert ticks == ["1", "2", "4"]


def test_curve_marks_the_pick_and_says_each_point():
    answer = verdict_frame(workloads=("mlp:S",), targets=("local",))
    (svg,) = map(str, vd.curve_plots(answer))
    tips = re.findall(r'class="pt"><title>([^<]*)</title>', svg)
    assert len(tips) == len(STRATEGIES) * len(COUNTS)
    assert svg.count('class="pick"') == 1  # the verdict's pick, not every strategy's best
    pick = answer.verdicts[0].pick
    assert pick is not None
    ringed = re.search(r'class="pick"><title>([^<]*)</title>', svg).group(1)
    assert ringed.startswith(f"torch/ddp, {pick.replicas} devices: ")
    assert f"${pick.cost_usd:,.2f}" in ringed and "the pick" in ringed
    assert "validation error 8%" in ringed
    assert sum("chosen device count" in t for t in tips) == len(STRATEGIES) - 1
    assert ">mlp:S on local</text>" in svg
    assert re.search(r'>time to train, (h|min|s)</text>', svg)


def test_report_leads_with_the_verdict(two_runs, monkeypatch):
    import harness.recommend.recommender

    frame = verdict_frame(text=EVIL)
    monkeypatch.setattr(harness.recommend.recommender, "recommend_from_store", lambda root: frame)
    html = build_report(two_runs)
    first = html.index('class="verdict ok"')
    assert first < html.index('id="curves"') < html.index('id="recommendations"')
    assert html.count('<article class="verdict') == 2  # one lead per workload
    targets = html[html.index('<table class="targets">'):html.index('id="curves"')]
    assert targets.count("<tr class=\"ok") == 4  # every (workload, target)
    curves = html[html.index('id="curves"'):html.index('id="recommendations"')]
    assert curves.count("<svg") == 4
    # every section below the verdict is collapsed, its summary says what is inside
    sections = re.findall(r'<details id="(\w+)"><summary>(.*?)</summary>', html, re.S)
    assert [s for s, _ in sections] == ["recommendations", "environment", "measured",
                                        "collectives", "validation", "crossover", "history",
                                        "failures"]
    assert "1 regression(s)" in dict(sections)["history"]
    assert "<details open" not in html
    assert "<script" not in html.lower()
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3 * 2


def test_a_weight_mismatch_is_flagged_at_the_top_and_in_its_row(tmp_path):
    """A synchronous run stored ok whose weights ended past the tolerance is said where the
    reader starts, not only as a number in the measured table."""
    store = ResultsStore(tmp_path)
    run_id = "20260101T000000Z-dddddd"
    store.start_run(MANIFEST, run_id=run_id)
    store.write_case(case(run_id, "single_device", 0.004, replicas=1))
    good = case(run_id, "ddp", 0.01)
    good.max_weight_diff, good.extra = 1e-7, {"weights_match": True}
    store.write_case(good)
    html = build_report(tmp_path)
    assert "MISMATCH" not in html and "farther than" not in html
    bad = case(run_id, "parameter_server", 0.02)
    bad.max_weight_diff, bad.extra = 3.9e-4, {"weights_match": False}
    store.write_case(bad)
    html = build_report(tmp_path)
    assert "1 synchronous case(s) ended farther than 1e-04 from one device" in html
    assert "torch/parameter_server/mlp:S/local/2" in html and "MISMATCH" in html


def test_a_points_title_reads_its_values_never_in_e_notation():
    """A tick may be compact (2e7), a hovered point is read: 16,777,216 bytes, 0.0123 s."""
    svg = str(chart([Series("ring", [16777216.0], [0.0123])], title="t", xlabel="bytes",
                    ylabel="s", logx=True))
    (tip,) = re.findall(r'class="pt"><title>([^<]*)</title>', svg)
    assert tip == "ring: bytes 16,777,216, s 0.0123"
