"""Real-time scheduling for processes that time communication on a machine they share.

Emulated hosts put several ranks on this machine's 2 cores; at normal priority a woken rank
waits out another's time slice, so small messages measure the scheduler, not the network
(harness.calibrate.collective_sweep.REALTIME_FRAMEWORKS has the figures).
SCHED_RR makes a woken rank run at once.
"""

from __future__ import annotations

import os


def realtime_priority() -> bool:
    """Move this process to SCHED_RR (priority 1); call it before any thread exists, so that
    every thread started later inherits the policy. False where that is not allowed (no root
    or CAP_SYS_NICE): the caller runs on at normal priority and says so."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    return True
