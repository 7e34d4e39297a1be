"""What the emulated-host predictions take from a framework's one-replica run."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from harness.measure.cpu import CpuMeter
from harness.profiles import replica_compute_s


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


def test_a_parameter_servers_own_time_per_round_adds_to_its_step_and_only_its_step():
    from harness.sim import simulate
    from harness.sim.profile import WorkloadProfile

    profile = WorkloadProfile(params=1_000_000, batch_per_replica=32, step_compute_s=0.01)
    plain, ring = simulate("switch:n=8,bw=1Gbit", 4, ["parameter_server", "ddp"], profile)
    slow, ring2 = simulate("switch:n=8,bw=1Gbit", 4, ["parameter_server", "ddp"], profile,
                           ps_round_s=0.005)
    assert slow["step_time_median_s"] == pytest.approx(plain["step_time_median_s"] + 0.005)
    assert ring2["step_time_median_s"] == ring["step_time_median_s"]


def _runs(local_ps_s: float) -> pd.DataFrame:
    common = {"run_id": "r1", "framework": "torch", "workload": "recsys", "size": "S",
              "cluster": "local", "status": "ok", "source": "measured"}
    return pd.DataFrame([
        {**common, "strategy": "single_device", "replicas": 1, "global_batch": 64,
         "step_time_median_s": 0.002, "extra": {"threads_per_process": 1}},
        {**common, "strategy": "parameter_server", "replicas": 2, "global_batch": 128,
         "step_time_median_s": local_ps_s,
         "extra": {"ps_shard_bytes": [1.3e6, 1.28e6], "threads_per_process": 1}}])


def test_the_round_overhead_is_what_local_runs_took_beyond_the_model():
    from harness.predict import round_overhead
    from harness.profiles import workload_facts

    facts = workload_facts("recsys:S")
    fits = pd.DataFrame()
    slow, fast = (round_overhead(_runs(s), fits, "torch", facts, cores=2) for s in (0.020, 0.010))
    assert slow == pytest.approx(fast + 0.010)  # all of the extra time, once per round
    assert round_overhead(_runs(0.0001), fits, "torch", facts, cores=2) == 0.0  # never < 0
    assert round_overhead(_runs(0.020), fits, "tf", facts, cores=2) == 0.0  # no tf runs
