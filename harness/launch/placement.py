"""Parent side: which processes a case needs and how each finds its peers.

No framework is imported here; the layout is plain data (argv and environment variables)
handed to a launcher, so the same layout runs on loopback or on emulated hosts.
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path

from harness.core.case import Case
from harness.launch.child import worker_argv
from harness.launch.netns import Cluster, Host
from harness.launch.processes import ProcessSpec

# One malloc arena per torch process. glibc gives a thread that allocates (gloo's workers,
# the rendezvous store) an arena of its own, and an arena keeps freed blocks resident; which
# thread lands where varies from run to run, and so did a rank's measured peak
# (harness/measure/memory.py): transformer:L under tensor parallelism rose 345-439 MB over
# five runs, rank 0 alone up to 57 MB above its twin; 343-350 MB over three with one arena.
# Torch's compute threads allocate on the calling thread, so one arena costs no contention.
TORCH_ENV = {"MALLOC_ARENA_MAX": "1"}


def processes(case: Case, case_file: Path, cluster: Cluster | None = None) -> list[ProcessSpec]:
    """The processes of one repetition of `case`, with fresh rendezvous ports; on emulated
    hosts, process j runs on host j mod N and peers meet at the first process's host."""
    if case.framework == "tf":
        from harness.launch.tf_placement import tf_processes

        return tf_processes(case, case_file, cluster)
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", **TORCH_ENV}
    servers: list[ProcessSpec] = []
    if case.strategy in ("parameter_server", "parameter_server_async"):
        # servers end when the workers shut RPC down; the group does not wait for them
        servers = [ProcessSpec("ps", k, worker_argv(case_file, "ps", k), env,
                               must_finish=False)
                   for k in range(int(case.options.get("ps_shards", 1)))]
    workers = [ProcessSpec("worker", i, worker_argv(case_file, "worker", i), env)
               for i in range(case.replicas)]
    specs = servers + workers
    # Rendezvous through a file, not a TCP store: a TCP store listens on every interface,
    # and a file cannot be taken by another program between our choosing and binding it.
    rendezvous = str(case_file.parent / f"rendezvous-{secrets.token_hex(6)}")
    if cluster is None:
        if len(specs) == 1:
            return specs
        return [_with_env(s, STRATBENCH_RENDEZVOUS=rendezvous, GLOO_SOCKET_IFNAME="lo",
                          TP_SOCKET_IFNAME="lo") for s in specs]
    hosts = [cluster.hosts[j % len(cluster.hosts)] for j in range(len(specs))]
    return [_on_host(s, h, STRATBENCH_RENDEZVOUS=rendezvous)
            for s, h in zip(specs, hosts, strict=True)]


def _with_env(spec: ProcessSpec, **env: str) -> ProcessSpec:
    return dataclasses.replace(spec, env={**spec.env, **env})


def _on_host(spec: ProcessSpec, host: Host, **env: str) -> ProcessSpec:
    """Run inside the host's namespace; gloo and TensorPipe use its interface."""
    placed = _with_env(spec, GLOO_SOCKET_IFNAME=host.interface,
                       TP_SOCKET_IFNAME=host.interface, STRATBENCH_HOST=host.address, **env)
    return dataclasses.replace(placed, argv=host.wrap(spec.argv))


def reference(case: Case, case_file: Path, role: str = "reference") -> ProcessSpec:
    """One device on the global batch: what a synchronous strategy must reproduce (role
    "rounding": the same on another thread count, core.case.REFERENCE_ROLES)."""
    return ProcessSpec(role, 0, worker_argv(case_file, role, 0), {"TF_CPP_MIN_LOG_LEVEL": "2"})
