"""BigScience's measured layout sweep against the simulator's ranking
(harness/validate/layout_sweep.py; docs/SIMULATOR.md, "A measured layout sweep")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.validate import layout_sweep


def _columns(quote: str) -> list[str]:
    return [cell.strip() for cell in quote.strip().strip("|").split("|")]


def test_every_row_is_the_line_bigscience_published():
    """Each checked-in row is its quoted table line: nodes, size, DP, TP, PP, MBS, (heads),
    GBS, memory, seconds per iteration, TFLOPs, date."""
    data = layout_sweep.sweep()
    assert data["source"]["commit"] == "053adafee86d8b0beb10ddd95e5bbbbe3d702f3c"
    for table in data["tables"]:
        for row in layout_sweep.rows_of(table):
            cells = _columns(row.quote)
            nodes, _, dp, tp, pp, mbs, *rest = cells
            heads = [int(rest.pop(0))] if row.heads else []
            gbs, mem, seconds = rest[0], rest[1], rest[2]
            assert int(nodes) * 8 == layout_sweep.GPUS
            assert (int(dp), int(tp), int(pp), int(mbs), *heads, int(gbs)) == (
                row.data, row.tensor, row.pipeline, row.microbatch,
                *([row.heads] if row.heads else []), row.global_batch)
            assert row.data * row.tensor * row.pipeline == layout_sweep.GPUS
            if row.oom:
                assert mem == "OOM" and seconds == "" and row.seconds is None
            else:
                assert float(seconds) == row.seconds
                assert mem == (f"{row.mem_gb:.0f}GB" if row.mem_gb else "GB")


@pytest.fixture(scope="module")
def compared():
    return layout_sweep.compare()


def test_the_simulators_pick_is_within_run_to_run_noise_of_the_measured_best(compared):
    """What a recommendation rests on: among the 17 layouts BigScience ran on one day, the
    one the simulator ranks first measured 1.1% slower than the measured best (the table's
    two runs of one layout differ by 2.8%); on BLOOM's own shape it is the measured best."""
    summary = layout_sweep.summary(compared).set_index("table")
    sweep = summary.loc["gbs_variations_2022_02_25"]
    assert sweep["layouts"] == 17
    assert sweep["pick"] == "dp=16,tp=4,pp=6,mbs=2"
    assert sweep["best"] == "dp=8,tp=4,pp=12,mbs=2"
    assert 0 <= sweep["regret"] <= 0.02
    repeat = compared[compared["repeat"]].iloc[0]
    assert sweep["regret"] < repeat["measured_ratio"] - 1
    bloom = summary.loc["rebalancing_layers_2022_02_28"]
    assert bloom["regret"] == 0.0
    assert round(sweep["median_abs_ratio_error"], 3) == 0.039
    assert round(bloom["median_abs_ratio_error"], 3) == 0.006


def test_every_layout_but_the_named_misses_is_within_ten_percent_of_its_ratio(compared):
    """Per sample, as a ratio to BigScience's eventual layout, every measured layout is
    within 10% except the ones the file names and says why (tensor 8 with 4 or 2 stages);
    BLOOM's own layout and heads within 5% in seconds, out of the box (-3.2% since the GEMM
    kernel constants moved the A100's fit to 73.1%; -0.7% at 69.5%)."""
    ran = compared[compared["measured_s"].notna()]
    missed = {(r.table, r.layout) for r in ran.itertuples() if abs(r.ratio_error) > 0.10}
    named = {(m["table"], m["layout"]) for m in layout_sweep.sweep()["misses"]}
    assert missed == named
    assert all(layout.startswith(("dp=12,tp=8,pp=4", "dp=24,tp=8,pp=2"))
               for _, layout in missed)
    bloom = compared[(compared["table"] == "rebalancing_layers_2022_02_28")
                     & compared["reference"]].iloc[0]
    assert abs(bloom["error"]) < 0.05


def test_memory_runs_under_what_nvidia_smi_showed_and_two_of_three_ooms_do_not_fit(compared):
    """The fullest device's model state and activations stay under nvidia-smi's figure on
    every layout that reports one (the allocator's cache, the runtime and the stack's
    buffers come on top); of the three layouts that ran out of memory, the simulator says
    two do not fit, and the third needs 78 GB of 80."""
    reported = compared[compared["mem_gb"].notna()]
    assert len(reported) == 21
    assert (reported["simulated_mem_gb"] < reported["mem_gb"]).all()
    gap = reported["mem_gb"] - reported["simulated_mem_gb"]
    assert round(gap.median(), 1) == round(layout_sweep.memory_gap_gb(), 1) == 13.5
    ooms = compared[compared["oom"]]
    assert len(ooms) == 3 and (~ooms["fits"]).sum() == 2
    assert ooms["fits"].any() and ooms.loc[ooms["fits"], "simulated_mem_gb"].iloc[0] > 75


def test_the_command_prints_the_comparison():
    out = subprocess.run([sys.executable, "-m", "harness.validate.layout_sweep"],
                         capture_output=True, text=True, check=True).stdout
    assert "the simulator's pick dp=16,tp=4,pp=6,mbs=2 measured +1.1%" in out
    assert "dp=24,tp=8,pp=2,mbs=1" in out and "OOM" in out
