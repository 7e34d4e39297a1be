"""A workload as the simulator and the recommender read it: the one record
(``workloads.spec.WorkloadSpec``) with its operators stated.

Built by ``harness.calibrate.workload.workload_facts`` from whatever names the workload (a
built-in, a known model, a ``transformer:`` shape, a ``profile:`` string, a user's model
after one run), or from the profile grammar by hand (``--profile K=V,...``, the grammar of
workloads/profile.py):

    params=25M,batch=32,flops_per_sample=4.5e9        (compute from FLOPs and device speed)
    params=25M,batch=32,step_compute=120ms            (compute time given)
    params=1G,batch=64,step_compute=80ms,sparsity=0.01  (embedding-heavy: 1% of rows touched)
"""

from __future__ import annotations

from dataclasses import replace

from workloads.profile import KEYS as PROFILE_GRAMMAR_KEYS
from workloads.spec import WorkloadSpec

__all__ = ["PROFILE_KEYS", "for_simulation"]

# The one grammar of a workload as numbers is workloads.profile's (`--workload profile:` too).
PROFILE_KEYS = PROFILE_GRAMMAR_KEYS


def for_simulation(spec: WorkloadSpec) -> WorkloadSpec:
    """``spec`` as the simulator reads it: its operators stated once (a built-in's from its
    architecture)."""
    return replace(spec, params=max(1, int(spec.params)), ops=spec.operators,
                   sparsity=spec.expected_sparsity())
