"""Child side of a Slurm step: who this task is, from Slurm's environment, before the runner.

`SLURM_PROCID` picks this task's (role, index) from the list the launcher exported; the
interface that carries this node's address becomes gloo's and TensorPipe's; TF cases get
TF_CONFIG from TF's own `SlurmClusterResolver` (hostnames from `scontrol`, ports from a base
the launcher chose). TensorFlow is imported only for TF cases that need a cluster.
"""

from __future__ import annotations

import json
import os
import socket

import psutil

from harness.core.case import Case, Placement

TASKS_ENV = "STRATBENCH_SLURM_TASKS"  # harness.launch.slurm exports these two
PORT_BASE_ENV = "STRATBENCH_SLURM_PORT_BASE"
TF_CLUSTER_STRATEGIES = ("multi_worker_mirrored", "parameter_server")


def _tasks() -> list[tuple[str, int]]:
    return [(role, int(index)) for role, _, index in
            (item.partition(":") for item in os.environ[TASKS_ENV].split(","))]


def interface_of(address: str) -> str:
    """The local interface holding `address` (loopback for 127.x)."""
    if address.startswith("127."):
        return "lo"
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addresses):
            return name
    raise RuntimeError(f"no interface of this node holds its Slurm address {address}")


def _tf_config(role: str, index: int) -> str:
    """TF_CONFIG from SlurmClusterResolver, checked against the launcher's task list.

    The resolver hands out its address slots through its GPU bookkeeping: with no GPUs it
    would give no task an address, so every task is given one "slot" (auto_set_gpu off).
    """
    import tensorflow as tf

    SlurmClusterResolver = tf.distribute.cluster_resolver.SlurmClusterResolver

    tasks = _tasks()
    jobs: dict[str, int] = {}
    for job, _ in tasks:
        jobs[job] = jobs.get(job, 0) + 1
    resolver = SlurmClusterResolver(jobs=jobs, port_base=int(os.environ[PORT_BASE_ENV]),
                                    gpus_per_node=len(tasks), gpus_per_task=1,
                                    auto_set_gpu=False)
    cluster = resolver.cluster_spec().as_dict()
    if (resolver.task_type, resolver.task_id) != (role, index):
        raise RuntimeError(f"SlurmClusterResolver made task {os.environ['SLURM_PROCID']} "
                           f"{resolver.task_type}{resolver.task_id}; the launcher expected "
                           f"{role}{index}")
    return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})


def assume(case: Case) -> tuple[str, int, Placement]:
    """This task's role and index, with its environment set; and what Slurm said of it."""
    procid = int(os.environ["SLURM_PROCID"])
    role, index = _tasks()[procid]
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    address = socket.gethostbyname(node)
    interface = interface_of(address)
    os.environ.update(GLOO_SOCKET_IFNAME=interface, TP_SOCKET_IFNAME=interface,
                      STRATBENCH_HOST=address)
    if case.framework == "tf" and case.strategy in TF_CLUSTER_STRATEGIES:
        os.environ["TF_CONFIG"] = _tf_config(role, index)
    info: Placement = {"job_id": os.environ.get("SLURM_JOB_ID"),
                       "step_id": os.environ.get("SLURM_STEP_ID"), "procid": procid,
                       "node": node, "address": address}
    return role, index, info
