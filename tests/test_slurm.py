"""The Slurm launcher against a real Slurm: slurmctld and two slurmd nodes on emulated hosts.

`stratbench run` runs on the cluster's login node (host 0), as a user on a cluster would;
srun places the tasks on the nodes, and their traffic crosses the shaped links.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import slurm_testbed

from harness.core import clusters as specs
from harness.core.case import Case
from harness.core.strategies import strategies
from harness.launch import slurm
from harness.launch.slurm import SlurmTarget
from harness.run.plan import plan, resolve_workloads
from results import load

# one Slurm at a time: the tests of this module share one bed, on one xdist worker
pytestmark = [pytest.mark.heavy, pytest.mark.netns, pytest.mark.xdist_group("slurm")]
needs_slurm = pytest.mark.skipif(slurm_testbed.unavailable_reason() is not None,
                                 reason=str(slurm_testbed.unavailable_reason()))
CLUSTER = "slurm:nodes=2,partition=bench"


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    testbed = slurm_testbed.start(2, 400e6, tmp_path_factory.mktemp("slurm"))
    yield testbed
    slurm_testbed.stop(testbed)


def on_login(bed, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(bed.on_login(sys.executable, "-m", "harness.cli", *args)),
                          capture_output=True, text=True, timeout=timeout, env=bed.env())


# --- no Slurm needed ---------------------------------------------------------------------

def _cases(names: list[str], framework: str = "torch") -> list[Case]:
    return plan(strategies(framework, names), resolve_workloads(["mlp:S"]), CLUSTER, steps=3,
                warmup=1, repeats=2, timeout_s=100, hosts=2)


def test_srun_asks_for_the_case_tasks_time_and_partition(tmp_path):
    (case,) = _cases(["parameter_server"], "tf")
    target = SlurmTarget(specs.parse_cluster(CLUSTER))
    argv = slurm.srun_argv(case, target, slurm.tasks_of(case), "stratbench-x",
                           ("python", "-m", "harness.worker"), tmp_path)
    assert argv[0] == "srun" and argv[-3:] == ["python", "-m", "harness.worker"]
    assert "--ntasks=5" in argv and "--nodes=2" in argv and "--partition=bench" in argv
    assert "--time=3" in argv  # 100 s -> 2 minutes, plus one so our deadline fires first
    assert "--kill-on-bad-exit=1" in argv


def test_without_slurm_the_rows_say_so(monkeypatch):
    from harness.run.execute import unavailable_reason

    monkeypatch.setenv("PATH", "/nonexistent")
    (case,) = _cases(["ddp"])
    assert "Slurm is not installed here: 'srun' not found" in unavailable_reason(case)


@pytest.mark.parametrize("bad", ["slurm:nodes=0", "slurm:gpus=2", "slurm:partition=a;b",
                                 "slurm:nodes=two"])
def test_bad_slurm_options_are_one_line_errors(bad, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--cluster", bad,
                           "--dry-run", "--results", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- against the real cluster -----------------------------------------------------------

@needs_slurm
def test_tf_and_torch_strategies_run_as_slurm_steps_with_job_ids(bed, tmp_path):
    # TF's cases once, torch's twice: one srun step per repetition, at the cost of a torch run
    for framework, names, repeats in (
            ("tf", ("multi_worker_mirrored", "parameter_server"), 1),
            ("torch", ("ddp", "parameter_server"), 2)):
        proc = on_login(bed, "run", "--cluster", CLUSTER, "--framework", framework,
                        *(arg for s in names for arg in ("--strategy", s)),
                        "--workload", "mlp:S", "--steps", "4", "--warmup", "1",
                        "--repeats", str(repeats), "--timeout", "240", "--results",
                        str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {(r.framework, r.strategy): r for r in load(tmp_path).itertuples()}
    wanted = {("tf", "multi_worker_mirrored"): 1, ("tf", "parameter_server"): 1,
              ("torch", "ddp"): 2}
    for key, repeats in wanted.items():
        row = rows[key]
        assert row.status == "ok", (key, row.reason)
        extra = row.extra
        assert len(extra["slurm_job_ids"]) == repeats, extra  # one srun step per repetition
        assert all(j.isdigit() for j in extra["slurm_job_ids"])
        assert extra["slurm_nodes"] == ["n1", "n2"], extra  # tasks really spread
    assert rows[("tf", "multi_worker_mirrored")].max_weight_diff < 1e-4
    assert rows[("torch", "ddp")].max_weight_diff < 1e-4
    assert rows[("torch", "parameter_server")].status == "ok"


@needs_slurm
def test_the_dry_run_script_passes_sbatch_test_only(bed, tmp_path):
    script = tmp_path / "run.sbatch"
    proc = on_login(bed, "run", "--cluster", CLUSTER, "--framework", "torch", "--workload",
                    "mlp:S", "--dry-run", "--script", str(script), "--results",
                    str(tmp_path / "results"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(script)
    text = script.read_text()
    assert text.startswith("#!/bin/bash\n#SBATCH") and "--cluster slurm:nodes=2" in text
    assert not (tmp_path / "results").exists()  # nothing ran
    check = subprocess.run(list(bed.on_login("sbatch", "--test-only", str(script))),
                           capture_output=True, text=True, timeout=60, env=bed.env())
    assert check.returncode == 0, check.stderr
    assert "to start at" in check.stderr, check.stderr


@needs_slurm
def test_a_case_cancelled_with_scancel_says_so_and_the_run_goes_on(bed, tmp_path):
    cancelled: list[str] = []

    def cancel_first_job() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cancelled:
            out = subprocess.run(list(bed.on_login("squeue", "-h", "-o", "%i %j %T")),
                                 capture_output=True, text=True, env=bed.env()).stdout
            for job_id, name, state in (ln.split() for ln in out.splitlines() if ln.strip()):
                if name.startswith("stratbench-") and state == "RUNNING":
                    time.sleep(8)  # let the tasks start their steps
                    subprocess.run(list(bed.on_login("scancel", job_id)), env=bed.env(),
                                   capture_output=True)
                    cancelled.append(job_id)
                    break
            time.sleep(0.5)

    canceller = threading.Thread(target=cancel_first_job)
    canceller.start()
    # the first case (mlp:M: 12.6 MB of gradients a step over 400 Mbit/s, a quarter of a
    # second) trains for about a minute unless cancelled; the second (mlp:S) for seconds
    proc = on_login(bed, "run", "--cluster", CLUSTER, "--framework", "torch", "--strategy",
                    "ddp", "--workload", "mlp:M", "--workload", "mlp:S", "--steps", "200",
                    "--repeats", "1", "--timeout", "300", "--results", str(tmp_path))
    canceller.join()
    assert cancelled, "no job of stratbench was ever seen running"
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r.workload + ":" + r.size: r for r in load(tmp_path).itertuples()}
    assert rows["mlp:M"].status == "failed"
    assert "CANCELLED" in rows["mlp:M"].reason, rows["mlp:M"].reason
    assert rows["mlp:S"].status == "ok", rows["mlp:S"].reason



@needs_slurm
def test_a_job_slurm_refuses_ends_failed_with_slurms_reason(bed, tmp_path):
    proc = on_login(bed, "run", "--cluster", "slurm:nodes=2,partition=nosuch", "--framework",
                    "torch", "--strategy", "ddp", "--workload", "mlp:S", "--steps", "2",
                    "--repeats", "1", "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = load(tmp_path).itertuples()
    assert row.status == "failed"
    assert "srun: error" in row.reason and "partition" in row.reason.lower(), row.reason


@needs_slurm
def test_the_nightly_script_resubmits_itself_and_the_second_report_shows_both_nights(
        bed, tmp_path):
    """docs/examples/nightly.sbatch as shipped: submitted once with a 5-second --begin and
    two nights, it runs the bench, submits itself again, and the second night's report holds
    both nights' runs."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "stratbench.toml").write_text(
        'name = "tiny"\nworkloads = ["mlp:S"]\nframeworks = ["torch"]\n'
        'strategies = ["ddp"]\nsteps = 2\nrepeats = 1\nresults = "results"\n'
        '[[targets]]\ntarget = "local"\n')
    env = bed.env() | {"STRATBENCH_BEGIN": "now+5", "STRATBENCH_NIGHTS": "2",
                       "STRATBENCH_BENCH": f"{sys.executable} -m harness.cli bench"}
    submit = subprocess.run(
        list(bed.on_login("sbatch", f"--chdir={tmp_path}", f"--partition={slurm_testbed.PARTITION}",
                          str(repo / "docs" / "examples" / "nightly.sbatch"))),
        capture_output=True, text=True, timeout=60, env=env)
    assert submit.returncode == 0, submit.stderr
    results = tmp_path / "results"
    deadline = time.monotonic() + 480
    bench_runs: list[str] = []
    idle = 0
    while time.monotonic() < deadline and idle < 3:  # stop early once no job is left
        queued = subprocess.run(list(bed.on_login("squeue", "-h", "-n", "stratbench-nightly")),
                                capture_output=True, text=True, env=bed.env()).stdout
        idle = 0 if queued.strip() else idle + 1
        report = results / "report.html"
        runs = sorted(p.name for p in (results / "runs").glob("*")) if results.is_dir() else []
        bench_runs = [r for r in runs if '"kind": "bench"' in
                      (results / "runs" / r / "manifest.json").read_text()]
        if len(bench_runs) == 2 and report.is_file() and bench_runs[1] in report.read_text():
            break
        time.sleep(3)
    logs = "\n".join(p.read_text() for p in tmp_path.glob("stratbench-nightly-*.log"))
    assert len(bench_runs) == 2, logs[-3000:]
    html = (results / "report.html").read_text()
    assert all(run in html for run in bench_runs), logs[-3000:]
    assert len(re.findall(r"Submitted batch job", logs)) == 1  # night 2 did not go on
