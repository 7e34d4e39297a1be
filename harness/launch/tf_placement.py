"""Parent side of TensorFlow cases: which processes each strategy needs, and their TF_CONFIG.

No TensorFlow here: the layout is argv and environment variables.
- one_device, mirrored, central_storage: one process (replicas are logical CPU devices);
- tpu: one process that attaches to the TPU the environment names (TPUClusterResolver);
- multi_worker_mirrored: one process per replica, a `worker` cluster in TF_CONFIG;
- parameter_server: K `ps` and W `worker` tasks that only serve (tf.distribute.Server; the
  launcher kills them when the chief ends) and one `chief` that runs the coordinator and
  writes the report.
On emulated hosts, task j (in the order ps, worker, chief) runs on host j mod N and its
TF_CONFIG address is that host's; on loopback every task listens on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness.core.case import Case
from harness.core.strategies import strategy
from harness.launch.child import LOOPBACK, worker_argv
from harness.launch.netns import Cluster
from harness.launch.ports import free_ports
from harness.launch.processes import ProcessSpec

QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "KERAS_BACKEND": "tensorflow"}


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _tasks(case: Case) -> list[tuple[str, int]]:
    """(job, index) of every task of a multi-process case, servers first, chief last."""
    if case.strategy in ("multi_worker_mirrored", "comm"):  # comm: collective sweeps
        return [("worker", i) for i in range(case.replicas)]
    if case.strategy == "parameter_server":
        shards = int(case.options.get("ps_shards", 1))
        return ([("ps", k) for k in range(shards)]
                + [("worker", i) for i in range(case.replicas)] + [("chief", 0)])
    raise ValueError(f"TF strategy {case.strategy!r} is never launched here")


def tf_processes(case: Case, case_file: Path, cluster: Cluster | None = None) -> list[ProcessSpec]:
    """The processes of one repetition of a TF case, with fresh ports."""
    record = strategy("tf", case.strategy)
    if record is not None and not record.multi_process:
        return [ProcessSpec("worker", 0, worker_argv(case_file, "worker", 0), dict(QUIET))]
    tasks = _tasks(case)
    hosts = cluster.hosts if cluster else []
    # distinct port numbers; on emulated hosts each namespace has its own, unused, port space
    ports = free_ports(len(tasks), LOOPBACK)
    addresses = [f"{hosts[j % len(hosts)].address if hosts else LOOPBACK}:{port}"
                 for j, port in enumerate(ports)]
    spec: dict[str, list[str]] = {}
    for (job, _), address in zip(tasks, addresses, strict=True):
        spec.setdefault(job, []).append(address)
    specs = []
    for j, (job, index) in enumerate(tasks):
        env = {**QUIET, "TF_CONFIG": tf_config(spec, job, index)}
        # parameter-server tasks only serve: the group ends when the chief ends
        process = ProcessSpec(job, index, worker_argv(case_file, job, index), env,
                              must_finish=job != "ps" and not (
                                  job == "worker" and case.strategy == "parameter_server"))
        if hosts:
            host = hosts[j % len(hosts)]
            process = dataclasses.replace(process, argv=host.wrap(process.argv),
                                          env={**env, "STRATBENCH_HOST": host.address})
        specs.append(process)
    return specs
