"""recommend's prediction of an emulated cluster, before any run on it, against the runs made
afterwards (checked-in data, validation/2026-11-24-recommend; docs/SIMULATOR.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.recommend.ranking_check import format_check, ranking_check

DATA = Path(__file__).parent.parent / "validation" / "2026-11-24-recommend"
CLUSTER = "netns:hosts=4,rate=250mbit"


def test_predicted_order_matches_the_measured_one_for_a_dense_and_a_sparse_model(capsys):
    table = ranking_check(str(DATA), CLUSTER, ["mlp:M", "recsys:S"])
    print(format_check(table))  # how far each step time was off, in the test's output
    assert set(table["workload"]) == {"mlp:M", "recsys:S"}
    assert len(table) == 6  # torch ddp, torch parameter_server, tf multi_worker_mirrored
    for workload, group in table.groupby("workload"):
        assert list(group.sort_values("measured_rank")["predicted_rank"]) == [1, 2, 3], workload
    # the sparse model flips the dense model's order: the parameter server first
    sparse = table[table["workload"] == "recsys:S"].set_index("strategy")
    assert sparse.loc["parameter_server", "predicted_rank"] == 1
    dense = table[table["workload"] == "mlp:M"].set_index("strategy")
    assert dense.loc["parameter_server", "predicted_rank"] == 3
    assert table["error"].abs().max() < 1.0  # every figure is off by less than 2x


def test_prediction_hides_the_clusters_own_runs(tmp_path):
    """Nothing the cluster's own runs recorded (rows, link probes) reaches the prediction:
    `recommend` on a copy without those runs predicts the same step times."""
    import json
    import shutil

    from harness.recommend.recommender import recommend_from_store

    copy = tmp_path / "data"
    shutil.copytree(DATA, copy)
    for run in (copy / "runs").iterdir():
        manifest = json.loads((run / "manifest.json").read_text())
        if any(n.get("cluster") == CLUSTER for n in manifest.get("networks", [])):
            shutil.rmtree(run)
    sweep = recommend_from_store(copy, workloads=["recsys:S"], targets=[CLUSTER]).sweep_frame()
    assert set(sweep["source"]) == {"measured", "predicted"}  # nothing measured there
    check = ranking_check(str(DATA), CLUSTER, ["recsys:S"])
    for r in check.to_dict("records"):
        got = sweep[(sweep["strategy"] == r["strategy"]) & (sweep["replicas"] == r["replicas"])
                    & (sweep["framework"] == r["framework"])].iloc[0]
        assert 256 / got["throughput_samples_s"] == pytest.approx(r["predicted_s"])


def test_ranking_check_runs_as_a_command():
    proc = subprocess.run([sys.executable, "-m", "harness.recommend.ranking_check", str(DATA),
                           CLUSTER, "mlp:M"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "mlp:M: predicted order matches the measured one" in proc.stdout


def test_every_strategy_run_there_is_checked_baselines_included_with_the_winner_named():
    from harness.recommend.ranking_check import winners

    table = ranking_check(str(DATA), CLUSTER, ["recsys:S"], strategies=None)
    ran = {(r["framework"], r["strategy"]) for r in table.to_dict("records")}
    assert {("torch", "single_device"), ("tf", "one_device")} <= ran
    assert set(table["replicas"]) == {1, 4}
    assert sorted(table["measured_rank"]) == list(range(1, len(table) + 1))
    predicted, measured = winners(table)["recsys:S"]
    line = format_check(table).splitlines()[-1]
    assert line.startswith("recsys:S: predicted order") and f"winner {predicted}" in line
    assert (predicted == measured) == line.endswith("as measured")
