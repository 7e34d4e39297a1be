"""Parent side: which processes a case needs and how each finds its peers.

No framework is imported here; the layout is plain data (argv and environment variables)
handed to a launcher, so the same layout runs on loopback or on emulated hosts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.launch.ports import free_ports
from harness.launch.processes import ProcessSpec
from harness.plan import Case

LOOPBACK = "127.0.0.1"


def worker_argv(case_file: Path, role: str, index: int) -> tuple[str, ...]:
    return (sys.executable, "-m", "harness.worker", "--case", str(case_file),
            "--role", role, "--index", str(index))


def processes(case: Case, case_file: Path, host: str = LOOPBACK) -> list[ProcessSpec]:
    """The processes of one repetition of `case`, with fresh rendezvous ports."""
    quiet = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    if case.framework == "tf":
        from harness.runners.tf_layout import tf_processes

        return tf_processes(case, case_file, host)
    if case.replicas == 1:
        return [ProcessSpec("worker", 0, worker_argv(case_file, "worker", 0), quiet)]
    (port,) = free_ports(1, host)
    env = {**quiet, "MASTER_ADDR": host, "MASTER_PORT": str(port)}
    servers = []
    if case.strategy in ("parameter_server", "parameter_server_async"):
        # servers end when the workers shut RPC down; the group does not wait for them
        servers = [ProcessSpec("ps", k, worker_argv(case_file, "ps", k), env,
                               must_finish=False)
                   for k in range(int(case.options.get("ps_shards", 1)))]
    return servers + [ProcessSpec("worker", i, worker_argv(case_file, "worker", i), env)
                      for i in range(case.replicas)]


def reference(case: Case, case_file: Path) -> ProcessSpec:
    """One device on the global batch: what a synchronous strategy must reproduce."""
    return ProcessSpec("reference", 0, worker_argv(case_file, "reference", 0),
                       {"TF_CPP_MIN_LOG_LEVEL": "2"})
