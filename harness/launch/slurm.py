"""The Slurm launcher: each repetition of a case is one `srun` job step, its tasks placed by Slurm.

Slurm users' conventions, not a home-made scheme: every task is `python -m harness.worker
--role slurm`, which learns who it is from `SLURM_PROCID` (harness/runners/slurm_task.py) and,
in TF cases, builds TF_CONFIG with TF's own `SlurmClusterResolver`. Inside an allocation
(`salloc`, `sbatch`) srun uses it; outside, srun asks for one. The case's timeout becomes the
step's `--time`; at our deadline the job is `scancel`led. Reports, rendezvous files and task
logs live in the case's working directory, which must be on a file system every node shares
(the results directory of a cluster usually is).

No framework is imported here, and no shell string is built: every command is an argv list.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core.case import Case
from harness.core.clusters import ClusterSpec
from harness.launch.processes import GroupResult, Outcome, ProcessSpec, error_line, tail
from harness.runners.slurm_task import PORT_BASE_ENV, TASKS_ENV

GRACE_S = 20  # after the first task ends, how long srun lets the others finish (--wait)
POLL_S = 0.1
# Variables of the local layout that a Slurm task sets for itself, on its own node
NODE_LOCAL_ENV = ("TF_CONFIG", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "STRATBENCH_HOST")
SBATCH_OPTIONS = {"partition": "--partition", "account": "--account", "qos": "--qos"}
SRUN_OPTIONS = {"partition": "--partition", "account": "--account",
                "tasks-per-node": "--ntasks-per-node", "qos": "--qos"}


@dataclass(frozen=True)
class SlurmTarget:
    """Where and how cases are submitted: the `--cluster slurm:...` options."""

    spec: ClusterSpec

    @property
    def nodes(self) -> int:
        return self.spec.hosts


def unavailable_reason() -> str | None:
    """Why no case can be submitted from here, or None."""
    for tool in ("srun", "sinfo", "scancel"):
        if shutil.which(tool) is None:
            return f"Slurm is not installed here: '{tool}' not found on PATH"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Slurm controller answered sinfo: {exc}"
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Slurm controller answered sinfo: {line}"
    return None


def time_limit_minutes(timeout_s: float) -> int:
    """Slurm's limit is whole minutes; one more than ours, so our deadline fires first and
    the row says which case timed out rather than Slurm's bare 'TIME LIMIT'."""
    return math.ceil(timeout_s / 60) + 1


def srun_argv(case: Case, target: SlurmTarget, tasks: int, job_name: str,
              task_argv: tuple[str, ...], logs: Path) -> list[str]:
    argv = ["srun", f"--job-name={job_name}", f"--nodes={min(target.nodes, tasks)}",
            f"--ntasks={tasks}", f"--time={time_limit_minutes(case.timeout_s)}",
            "--kill-on-bad-exit=1", f"--wait={GRACE_S}", f"--output={logs}/task%t.log"]
    argv += [f"{flag}={target.spec.options[key]}" for key, flag in SRUN_OPTIONS.items()
             if key in target.spec.options]
    return [*argv, *task_argv]


def _srun_reason(log: str) -> str:
    """Slurm's own words for why a step ended: cancelled, time limit, a killed task."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for needle in ("CANCELLED", "TIME LIMIT", "DUE TO", "Killed", "error", "queued"):
        for line in lines:
            if needle in line:
                return line[:300]
    return lines[-1][:300] if lines else "srun said nothing"


def cancel(job_name: str) -> None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["scancel", f"--name={job_name}"], capture_output=True, timeout=20,
                       check=False)


def run_step(case: Case, specs: list[ProcessSpec], task_argv: tuple[str, ...],
             target: SlurmTarget, workdir: Path) -> GroupResult:
    """Run the case's processes as the tasks of one srun step; each writes its report as
    `<workdir>/<role><index>.json`, like a local process."""
    workdir.mkdir(parents=True, exist_ok=True)
    job_name = f"stratbench-{secrets.token_hex(4)}"
    shared = {k: v for k, v in specs[0].env.items() if k not in NODE_LOCAL_ENV}
    env = {**os.environ, **shared, TASKS_ENV: ",".join(f"{s.role}:{s.index}" for s in specs),
           PORT_BASE_ENV: str(20000 + secrets.randbelow(20000))}
    argv = srun_argv(case, target, len(specs), job_name,
                     (*task_argv, "--report", str(workdir / "slurm.json")), workdir)
    srun_log = workdir / "srun.log"
    start = time.monotonic()
    status, reason = "ok", ""
    with open(srun_log, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    needed = [workdir / f"{s.name}.json" for s in specs if s.must_finish]
    try:
        while True:
            if all(p.exists() for p in needed):
                break
            if proc.poll() is not None:
                status = "failed"
                reason = f"srun exited with code {proc.returncode}"
                break
            if time.monotonic() - start > case.timeout_s:
                status = "timeout"
                said = _srun_reason(tail(srun_log))
                reason = (f"timed out after {case.timeout_s:.0f} s; job {job_name} cancelled "
                          f"(srun: {said})")
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            cancel(job_name)  # servers that serve until killed, or a step past its deadline
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=GRACE_S)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
    outcomes = []
    for t, spec in enumerate(specs):
        report_path = workdir / f"{spec.name}.json"
        report = None
        with contextlib.suppress(ValueError, OSError):
            report = json.loads(report_path.read_text())
        outcomes.append(Outcome(spec, 0 if report else None, report,
                                tail(workdir / f"task{t}.log")))
    if status == "failed":
        said = _srun_reason(tail(srun_log))
        task_errors = [f"{o.spec.name}: {error_line(o.stderr_tail)}" for o in outcomes
                       if o.report is None and o.stderr_tail.strip()]
        reason = f"{reason} ({said})" + (f"; {task_errors[0]}" if task_errors else "")
    placements = []
    for spec in specs:
        with contextlib.suppress(ValueError, OSError):
            placements.append(json.loads((workdir / f"{spec.name}.where.json").read_text()))
    return GroupResult(status, reason, outcomes, time.monotonic() - start, placements)


def tasks_of(case: Case) -> int:
    """Processes a case starts (what its srun step asks for)."""
    if case.strategy in ("parameter_server", "parameter_server_async"):
        shards = int(case.options.get("ps_shards", 1))
        return case.replicas + shards + (1 if case.framework == "tf" else 0)
    return case.replicas


def batch_script(cases: list[Case], target: SlurmTarget, stratbench_argv: list[str]) -> str:
    """The sbatch script that runs `stratbench run` inside one allocation, where each case's
    repetitions become srun steps: what `--dry-run` writes for review before submitting."""
    minutes = sum(c.repeats * time_limit_minutes(c.timeout_s) for c in cases)
    options = target.spec.options
    lines = ["#!/bin/bash",
             "#SBATCH --job-name=stratbench",
             f"#SBATCH --nodes={target.nodes}",
             f"#SBATCH --ntasks={max((tasks_of(c) for c in cases), default=1)}",
             f"#SBATCH --time={minutes}",
             "#SBATCH --output=stratbench-%j.out"]
    lines += [f"#SBATCH {flag}={options[key]}" for key, flag in SBATCH_OPTIONS.items()
              if key in options]
    lines += ["# the cases, each a job step of this allocation (worst-case time: every "
              "repetition at its full timeout):"]
    lines += [f"#   {c.case_id} x{c.repeats}, {tasks_of(c)} tasks" for c in cases]
    lines += ["set -euo pipefail", f"exec {shlex.join(stratbench_argv)}", ""]
    return "\n".join(lines)
