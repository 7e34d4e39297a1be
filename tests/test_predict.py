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
