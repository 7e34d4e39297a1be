"""A real Slurm cluster for the tests: slurmctld and N slurmd nodes, each in an emulated host.

Debian's slurm-wlm and munge, configured as ../shared/ENVIRONMENT.md found they must be: host 0
of an emulated cluster is the login node and runs slurmctld (stratbench itself runs there, as
on a cluster's login node), hosts 1..N run one slurmd each, so Slurm's and the workers'
traffic crosses the shaped links. Names resolve through /etc/netns/<namespace>/hosts, which
`ip netns exec` mounts over /etc/hosts. Everything started is stopped by `stop()`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.launch import netns

HOST_CGROUP = Path("/run/stratbench-hostcg")
CPUS_PER_NODE = 8  # more slots than cores: tasks of a case may share a node's CPUs
PARTITION = "bench"


def unavailable_reason() -> str | None:
    for tool in ("slurmctld", "slurmd", "srun", "munged"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found (Debian packages slurm-wlm and munge)"
    return netns.unavailable_reason()


@dataclass
class Testbed:
    cluster: netns.Cluster
    conf: Path
    workdir: Path
    nodes: list[str]
    started_munged: bool = False
    mounted: bool = False
    hosts_dirs: list[Path] = field(default_factory=list)

    @property
    def login(self) -> netns.Host:
        return self.cluster.hosts[0]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def on_login(self, *argv: str) -> tuple[str, ...]:
        """The argv that runs `argv` on the login node (where srun can reach slurmctld)."""
        return self.login.wrap(list(argv))


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                          **kwargs)  # type: ignore[call-overload]


def _munged_running() -> bool:
    return Path("/run/munge/munge.socket.2").exists() and subprocess.run(
        ["pgrep", "-x", "munged"], capture_output=True, check=False).returncode == 0


def _conf_text(workdir: Path, login: netns.Host, nodes: list[netns.Host]) -> str:
    lines = [
        "ClusterName=stratbench-test",
        f"SlurmctldHost={socket.gethostname()}({login.address})",
        "SlurmUser=root", "AuthType=auth/munge", "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "ReturnToService=2",
        "SlurmctldTimeout=30", "SlurmdTimeout=30", "KillWait=5", "MinJobAge=30",
        f"StateSaveLocation={workdir}/state", f"SlurmdSpoolDir={workdir}/spool-%n",
        f"SlurmctldPidFile={workdir}/slurmctld.pid", f"SlurmdPidFile={workdir}/slurmd-%n.pid",
        f"SlurmctldLogFile={workdir}/slurmctld.log", f"SlurmdLogFile={workdir}/slurmd-%n.log",
    ]
    lines += [f"NodeName=n{h.index} NodeAddr={h.address} CPUs={CPUS_PER_NODE} State=UNKNOWN"
              for h in nodes]
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
                 "OverSubscribe=FORCE:4")
    return "\n".join(lines) + "\n"


def start(nodes: int, rate_bits: float, workdir: Path) -> Testbed:
    """Build the hosts, start munged (unless running), slurmctld and the slurmds; wait until
    every node is idle."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = netns.create(nodes + 1, rate_bits)
    bed = Testbed(cluster, workdir / "slurm.conf", workdir, [f"n{i}" for i in range(1, nodes + 1)])
    try:
        login, node_hosts = cluster.hosts[0], cluster.hosts[1:]
        names = "".join(f"{h.address} n{h.index}\n" for h in node_hosts)
        for host in cluster.hosts:  # before any `ip netns exec` of that host
            hosts_dir = Path("/etc/netns") / host.namespace
            hosts_dir.mkdir(parents=True, exist_ok=True)
            (hosts_dir / "hosts").write_text(f"127.0.0.1 localhost\n{login.address} login\n"
                                             f"{names}")
            bed.hosts_dirs.append(hosts_dir)
        (workdir / "state").mkdir(exist_ok=True)
        bed.conf.write_text(_conf_text(workdir, login, node_hosts))
        if not _munged_running():
            Path("/run/munge").mkdir(exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            _run(["runuser", "-u", "munge", "--", "munged"])
            bed.started_munged = True
        HOST_CGROUP.mkdir(parents=True, exist_ok=True)
        _run(["mount", "--rbind", "/sys/fs/cgroup", str(HOST_CGROUP)])
        bed.mounted = True
        _run(list(login.wrap(["slurmctld", "-f", str(bed.conf)])), env=bed.env())
        for host in node_hosts:
            # `ip netns exec` remounts /sys without cgroups, which slurmd needs: bind the
            # host's cgroup tree back first (a fixed command, no user input)
            _run(list(host.wrap(["sh", "-c", f"mount --rbind {HOST_CGROUP} /sys/fs/cgroup && "
                                             f"exec slurmd -f {bed.conf} -N n{host.index}"])),
                 env=bed.env())
        _wait_idle(bed)
    except BaseException:
        stop(bed)
        raise
    return bed


def _wait_idle(bed: Testbed, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    states = ""
    while time.monotonic() < deadline:
        proc = subprocess.run(list(bed.on_login("sinfo", "-h", "-N", "-o", "%N %T")),
                              capture_output=True, text=True, env=bed.env(), check=False)
        states = proc.stdout.strip() or proc.stderr.strip()
        lines = [ln.split() for ln in states.splitlines()]
        if len(lines) == len(bed.nodes) and all(s[1] == "idle" for s in lines if len(s) == 2):
            return
        time.sleep(0.5)
    raise RuntimeError(f"Slurm nodes never became idle: {states!r}; see {bed.workdir}")


def _kill_pidfile(path: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def stop(bed: Testbed) -> None:
    """Stop every daemon this testbed started and remove what it made."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(list(bed.on_login("scancel", "--full", "-u", "root")), env=bed.env(),
                       capture_output=True, timeout=20, check=False)
    for pidfile in sorted(bed.workdir.glob("slurmd-*.pid")):
        _kill_pidfile(pidfile)
    _kill_pidfile(bed.workdir / "slurmctld.pid")
    subprocess.run(["pkill", "-KILL", "-f", f"slurmstepd.*{bed.workdir}"], check=False)
    if bed.started_munged:
        subprocess.run(["pkill", "-x", "munged"], check=False)
    netns.destroy(bed.cluster)
    if bed.mounted:
        subprocess.run(["umount", "-R", str(HOST_CGROUP)], capture_output=True, check=False)
    for hosts_dir in bed.hosts_dirs:
        shutil.rmtree(hosts_dir, ignore_errors=True)
