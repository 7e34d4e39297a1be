"""Parent side of TensorFlow cases: which processes each strategy needs, and their TF_CONFIG.

No TensorFlow here: the layout is argv and environment variables.
- one_device, mirrored, central_storage: one process (replicas are logical CPU devices);
- multi_worker_mirrored: one process per replica, a `worker` cluster in TF_CONFIG;
- parameter_server: K `ps` and W `worker` tasks that only serve (tf.distribute.Server; the
  launcher kills them when the chief ends) and one `chief` that runs the coordinator and
  writes the report.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.launch.ports import free_ports
from harness.launch.processes import ProcessSpec
from harness.plan import Case
from harness.runners.layout import worker_argv

SINGLE_PROCESS = ("one_device", "mirrored", "central_storage")
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "KERAS_BACKEND": "tensorflow"}


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _spec(case_file: Path, cluster: dict[str, list[str]], role: str, index: int,
          must_finish: bool = True) -> ProcessSpec:
    env = {**QUIET, "TF_CONFIG": tf_config(cluster, role, index)}
    return ProcessSpec(role, index, worker_argv(case_file, role, index), env,
                       must_finish=must_finish)


def tf_processes(case: Case, case_file: Path, host: str) -> list[ProcessSpec]:
    """The processes of one repetition of a TF case, with fresh ports on `host`."""
    if case.strategy in SINGLE_PROCESS:
        return [ProcessSpec("worker", 0, worker_argv(case_file, "worker", 0), dict(QUIET))]
    if case.strategy == "multi_worker_mirrored":
        cluster = {"worker": [f"{host}:{p}" for p in free_ports(case.replicas, host)]}
        return [_spec(case_file, cluster, "worker", i) for i in range(case.replicas)]
    if case.strategy == "parameter_server":
        shards = int(case.options.get("ps_shards", 1))
        ports = [f"{host}:{p}" for p in free_ports(1 + case.replicas + shards, host)]
        cluster = {"chief": ports[:1], "worker": ports[1:1 + case.replicas],
                   "ps": ports[1 + case.replicas:]}
        servers = [_spec(case_file, cluster, "ps", k, must_finish=False) for k in range(shards)]
        servers += [_spec(case_file, cluster, "worker", i, must_finish=False)
                    for i in range(case.replicas)]
        return [*servers, _spec(case_file, cluster, "chief", 0)]
    raise ValueError(f"TF strategy {case.strategy!r} is never launched here")
