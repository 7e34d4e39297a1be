"""What the emulated-host predictions take from a framework's one-replica run."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from harness.calibrate.workload import replica_compute_s
from harness.measure.cpu import CpuMeter


@pytest.mark.parametrize(("extra", "expected"), [
    ({"threads_per_process": 1}, 0.10),
    ({"threads_per_process": 2}, 0.20),  # no CPU time recorded: the perfect-scaling bound
    ({"threads_per_process": 2, "cpu_s_per_step": 0.17}, 0.17),  # measured wins
    ({"threads_per_process": 2, "cpu_s_per_step": 0.05}, 0.10),  # waited: never under wall
    ({}, 0.10),
])
def test_a_replica_shares_its_cpu_time_not_its_wall_time(extra, expected):
    row = pd.Series({"step_time_median_s": 0.10, "extra": extra})
    assert replica_compute_s(row) == pytest.approx(expected)


def test_the_cpu_meter_counts_this_process_per_step():
    meter = CpuMeter()
    assert meter.report(4) == {}
    meter.start()
    end = time.process_time() + 0.05
    while time.process_time() < end:  # busy, not asleep
        pass
    time.sleep(0.05)  # asleep: not CPU time
    meter.stop()
    per_step = meter.report(5)["cpu_s_per_step"]
    assert 0.05 / 5 <= per_step < 0.09 / 5


def test_a_runtimes_own_time_adds_to_synchronous_steps_and_not_to_asynchronous_ones():
    from harness.sim import simulate
    from harness.sim.systems.calibration import stating
    from workloads.spec import WorkloadSpec

    profile = WorkloadSpec(params=1_000_000, batch_size=32)
    costs = stating(None, compute_s=0.01)
    names = ["parameter_server", "ddp", "parameter_server_async"]
    plain = simulate("switch:n=8,bw=1Gbit", 4, names, profile, costs)
    slow = simulate("switch:n=8,bw=1Gbit", 4, names, profile, costs, runtime_s=0.005)
    for before, after in zip(plain[:2], slow[:2], strict=True):
        assert after.step_time_median_s == pytest.approx(before.step_time_median_s + 0.005)
    assert slow[2].step_time_median_s == plain[2].step_time_median_s


def _runs(local_ps_s: float) -> pd.DataFrame:
    common = {"run_id": "r1", "framework": "torch", "workload": "recsys", "size": "S",
              "cluster": "local", "status": "ok", "source": "measured"}
    return pd.DataFrame([
        {**common, "strategy": "single_device", "replicas": 1, "global_batch": 64,
         "step_time_median_s": 0.002, "extra": {"threads_per_process": 1}},
        {**common, "strategy": "parameter_server", "replicas": 2, "global_batch": 128,
         "step_time_median_s": local_ps_s,
         "extra": {"ps_shard_bytes": [1.3e6, 1.28e6], "threads_per_process": 1}}])


def test_the_runtime_overhead_is_what_local_runs_took_beyond_the_model():
    from harness.calibrate.workload import workload_facts
    from harness.predict.step import runtime_overhead

    facts = workload_facts("recsys:S")
    fits = pd.DataFrame()
    def overhead(seconds: float, framework: str = "torch", strategy: str = "parameter_server"
                 ) -> float:
        return runtime_overhead(_runs(seconds), fits, framework, strategy, facts, cores=2)

    assert overhead(0.020) == pytest.approx(overhead(0.010) + 0.010)  # all of it, once a step
    assert overhead(0.0001) == 0.0  # never below the model
    assert overhead(0.020, framework="tf") == 0.0  # no TF runs
    assert overhead(0.020, strategy="ddp") == 0.0  # no local ddp runs


def test_the_librarys_own_costs_come_from_the_sweeps_at_the_same_rank_count():
    from harness.calibrate.sweep_selection import software_costs

    def fit(world: int, alpha: float, run: str = "r1", framework: str = "tf") -> dict:
        return {"framework": framework, "op": "all_reduce", "link_class": "loopback",
                "world": world, "alpha_s": alpha, "beta_s_per_byte": 1e-9, "run_id": run,
                "realtime": False}

    fits = pd.DataFrame([fit(2, 1e-3), fit(4, 1.5e-3), fit(6, 1.8e-3), fit(4, 1.6e-3, "r2"),
                         fit(4, 2.9e-3, "r3"), fit(4, 9.0, framework="torch")])
    # one sweep is noisy: the median of those at 4 ranks, not the latest
    assert software_costs(fits, "tf", 4) == (1.6e-3, 1e-9)
    assert software_costs(fits[fits["run_id"] != "r2"], "tf", 4)[0] == pytest.approx(2.2e-3)
    assert software_costs(fits, "tf", 6)[0] == 1.8e-3
    assert software_costs(fits, "tf", 3)[0] == 1e-3  # as near to 2 as to 4: the smaller
    assert software_costs(fits, "tf", 16)[0] == 1.8e-3  # the nearest swept
    assert software_costs(fits, "tf")[0] == 1e-3  # two ranks unless told
    assert software_costs(fits, "jax", 4) == (0.0, 0.0)
