"""CPU seconds a process spends per timed step (all its threads), beside the wall time.

Emulated hosts and a machine's logical devices share this machine's cores. A replica that ran
alone on k threads tells the simulator its wall time; what its copies share when the hosts'
processes oversell the cores is its CPU time (TF's one_device baseline runs on every core,
its workers on one each). The step loop starts the meter before its first timed step and
stops it after the last.
"""

from __future__ import annotations

import time


class CpuMeter:
    def __init__(self) -> None:
        self.started: float | None = None
        self.used: float | None = None

    def start(self) -> None:
        self.started = time.process_time()

    def stop(self) -> None:
        if self.started is not None:
            self.used = time.process_time() - self.started

    def report(self, steps: int) -> dict[str, float]:
        """{'cpu_s_per_step': seconds} or {} when nothing was timed."""
        if self.used is None or steps < 1:
            return {}
        return {"cpu_s_per_step": self.used / steps}
