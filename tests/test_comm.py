"""Collective benchmarks: nccl-tests units, the alpha/beta fit, and the CLI end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.calibrate import fits as calibrate
from harness.calibrate.collective_sweep import sweep_sizes
from harness.core.strategies import library


def test_sweep_steps_by_four_and_ends_at_max():
    assert sweep_sizes(1024, 256 * 2**20)[:3] == [1024, 4096, 16384]
    assert sweep_sizes(1024, 256 * 2**20)[-1] == 256 * 2**20
    assert sweep_sizes(1000, 5000) == [1000, 4000, 5000]
    assert sweep_sizes(4096, 4096) == [4096]


def test_bus_bandwidth_uses_nccl_tests_factors():
    pts = pd.DataFrame({"op": ["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
                        "bytes": [8e6] * 4, "world": [4] * 4, "time_s": [0.01] * 4})
    out = calibrate.with_bandwidths(pts).set_index("op")
    assert out.loc["all_reduce", "algbw_bytes_s"] == pytest.approx(8e8)
    assert out.loc["all_reduce", "busbw_bytes_s"] == pytest.approx(8e8 * 2 * 3 / 4)
    assert out.loc["all_gather", "busbw_bytes_s"] == pytest.approx(8e8 * 3 / 4)
    assert out.loc["reduce_scatter", "busbw_bytes_s"] == pytest.approx(8e8 * 3 / 4)
    assert out.loc["broadcast", "busbw_bytes_s"] == pytest.approx(8e8)


@settings(deadline=None)  # the first example imports scipy (lazily: harness/calibrate/fits.py)
@given(alpha=st.floats(1e-6, 1e-2), bandwidth=st.floats(1e7, 1e11), world=st.integers(2, 64),
       op=st.sampled_from(sorted(calibrate.TERMS)))
def test_fit_recovers_alpha_and_beta_from_model_data(alpha, bandwidth, world, op):
    sizes = np.array(sweep_sizes(1024, 256 * 2**20), dtype=float)
    lat, bw = calibrate.TERMS[op](world)
    times = lat * alpha + bw * sizes / bandwidth
    pts = pd.DataFrame({"op": op, "bytes": sizes, "world": world, "time_s": times})
    (f,) = calibrate.fit(pts)
    assert f.alpha_s == pytest.approx(alpha, rel=0.02, abs=1e-9)
    assert f.bandwidth_bytes_s == pytest.approx(bandwidth, rel=0.02)
    assert f.residual_rel < 0.01


def test_fit_reports_a_bad_model_as_a_large_residual():
    sizes = np.array(sweep_sizes(1024, 2**26), dtype=float)
    times = 1e-4 + (sizes / 1e9) ** 1.5  # not linear in size
    (f,) = calibrate.fit(pd.DataFrame({"op": "all_reduce", "bytes": sizes, "world": 2,
                                       "time_s": times}))
    assert f.residual_rel > 0.1


@pytest.mark.heavy
@pytest.mark.alone  # times collectives; torch's ranks at real-time priority
def test_comm_cli_prints_points_and_fits(tmp_path):
    root = tmp_path
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--sizes", "1KiB:256KiB",
                           "--results", str(root), "--json"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    ops = {p["op"] for p in out["points"]}
    assert ops == set(library("torch").sweep_ops) == set(calibrate.TERMS) - {"rpc"}
    for p in out["points"]:
        assert p["algbw_bytes_s"] == pytest.approx(p["bytes"] / p["time_s"])
        assert p["spread_rel"] >= 0  # the rounds' range: how noisy the machine was
        assert 0 < p["fast_s"] <= p["time_s"] * (1 + p["spread_rel"])
    assert {f["op"] for f in out["fits"]} == ops
    assert all(f["residual_rel"] >= 0 and f["alpha_s"] >= 0 for f in out["fits"])
    from results.store import load_table

    assert len(load_table(root, "calibration")) == len(ops)
    assert len(load_table(root, "comm")) == len(out["points"])


@pytest.mark.heavy
@pytest.mark.alone  # times collectives; torch's ranks at real-time priority
def test_tf_comm_sweeps_mwms_collectives_beside_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--framework", "all",
                           "--sizes", "1KiB:64KiB", "--results", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    tf = [p for p in out["points"] if p["framework"] == "tf"]
    assert {(p["op"], p["bytes"]) for p in tf} == {
        (op, size) for op in ("all_reduce", "all_gather") for size in (1024, 4096, 16384, 65536)}
    assert all(p["time_s"] > 0 and p["world"] == 2 and p["spread_rel"] >= 0 for p in tf)
    assert {f["framework"] for f in out["fits"]} == {"tf", "torch"}
    assert "TF collectives (MultiWorkerMirroredStrategy, RING)" in proc.stderr
    # torch's ranks at real-time priority wherever this machine allows it; TF's never
    torch_realtime = {p["realtime"] for p in out["points"] if p["framework"] == "torch"}
    assert torch_realtime == {_may_run_realtime()}
    assert {p["realtime"] for p in tf} == {False}


def _may_run_realtime() -> bool:
    probe = "import os; os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.mark.heavy
@pytest.mark.alone  # times collectives; torch's ranks at real-time priority
def test_no_realtime_keeps_torch_ranks_at_normal_priority(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--no-realtime",
                           "--sizes", "1KiB:4KiB", "--rounds", "1", "--results", str(tmp_path),
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {p["realtime"] for p in out["points"]} == {False}
    assert {f["realtime"] for f in out["fits"]} == {False}


@pytest.mark.heavy
@pytest.mark.alone  # times collectives; torch's ranks at real-time priority
def test_one_framework_failing_keeps_the_others_sweep_and_exits_1(tmp_path, monkeypatch):
    """A TF sweep failed once at 6 local ranks (a worker's gRPC peer refused the connection);
    the torch sweep of the same command must still run and be stored."""
    from click.testing import CliRunner

    from harness.calibrate.collective_sweep import CommResult
    from harness.commands import comm as comm_command
    from results.store import load_table

    real = comm_command.run_comm

    def tf_fails(framework, *args, **kwargs):
        if framework == "tf":
            return CommResult("failed", "worker2 exited with code 1", pd.DataFrame(),
                              pd.DataFrame())
        return real(framework, *args, **kwargs)

    monkeypatch.setattr(comm_command, "run_comm", tf_fails)
    result = CliRunner().invoke(comm_command.command, [
        "--framework", "all", "--sizes", "1KiB:4KiB", "--rounds", "2",
        "--results", str(tmp_path)])
    assert result.exit_code == 1
    assert "tf comm benchmark failed: worker2 exited with code 1" in result.output
    stored = load_table(tmp_path, "comm")
    # every torch op of its default sweep at 2 sizes
    assert set(stored["framework"]) == {"torch"}
    assert len(stored) == 2 * len(library("torch").sweep_ops)


def test_rounds_must_be_at_least_one(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--rounds", "0",
                           "--results", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "--rounds" in proc.stderr and "0 is not in the range 1<=x<=99" in proc.stderr


def test_realtime_priority_is_taken_where_allowed_and_inherited_by_threads():
    probe = ("import os, threading; from harness.launch.priority import realtime_priority; "
             "ok = realtime_priority(); seen = []; "
             "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0))); "
             "t.start(); t.join(); "
             "print(ok, os.sched_getscheduler(0) == os.SCHED_RR, seen[0] == os.SCHED_RR)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    allowed = _may_run_realtime()
    assert out.stdout.split() == [str(allowed)] * 3


def test_ops_names_what_a_sweep_times_and_refuses_what_none_does(tmp_path):
    """--ops: an unknown name is one line and exit 2, nothing run; torch RPC is torch's
    only (TF's sweep skips it) and only when named; the default sets are the libraries'."""
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--ops", "rpc,bogus",
                           "--results", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "unknown operation bogus" in proc.stderr and "rpc" in proc.stderr
    assert not list(tmp_path.iterdir())
    assert library("tf").ops(["rpc"]) == ()
    assert library("torch").ops(["rpc", "all_reduce"]) == ("rpc", "all_reduce")
    assert "rpc" not in library("torch").ops(None)
    assert set(library("tf").ops(None)) == {"all_reduce", "all_gather"}


@pytest.mark.heavy
@pytest.mark.alone  # times collectives; torch's ranks at real-time priority
def test_torch_rpc_sweeps_a_buffer_to_the_next_rank_by_tensorpipe(tmp_path):
    """`comm --ops rpc`: two local ranks, each 1 MiB to the other by torch RPC; its points
    and fit stored like any op's (bus bandwidth = algbw: one buffer a rank)."""
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "comm", "--ops", "rpc",
                           "--sizes", "256KiB:1MiB", "--rounds", "1", "--results",
                           str(tmp_path), "--json"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(p["op"], p["bytes"]) for p in out["points"]] == [("rpc", 262144),
                                                               ("rpc", 1048576)]
    assert all(p["busbw_bytes_s"] == pytest.approx(p["algbw_bytes_s"]) for p in out["points"])
    assert [f["op"] for f in out["fits"]] == ["rpc"]
