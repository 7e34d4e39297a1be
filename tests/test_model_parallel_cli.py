"""`run`'s model-parallel options at the CLI edge: each layout a workload cannot take, and each
option no chosen strategy would use, is one stderr line and exit 2 before anything runs.
(The runs themselves, against one device, are the heavy tests in test_pipeline_runner.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "run", "--framework", "torch",
                           *args, "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--strategy", "pipeline", "--workload", "transformer:M", "--stages", "5"],
     "5 stages cannot split the 4 blocks of transformer:M"),
    (["--strategy", "pipeline", "--workload", "transformer:M", "--stages", "3",
      "--stage-layers", "3,1"], "--stage-layers 3,1: 3 counts of at least 1 summing to"),
    (["--strategy", "ddp", "--workload", "mlp:S", "--stage-layers", "ends"],
     "--stage-layers applies to --strategy pipeline"),
    (["--strategy", "pipeline", "--workload", "transformer:M", "--stages", "2",
      "--microbatches", "3"], "3 micro-batches do not divide the pipeline's batch of 16"),
    (["--strategy", "pipeline", "--workload", "mlp:S"],
     "pipeline splits a model by its blocks: use the transformer family"),
    (["--strategy", "tensor_parallel", "--workload", "transformer:M", "--tensor-parallel",
      "3"], "tensor-parallel degree 3 must divide the 4 attention heads"),
    (["--strategy", "tensor_parallel", "--workload", "transformer:S", "--tensor-parallel",
      "8"], "tensor-parallel degree 8 must divide the 2 attention heads"),
    (["--strategy", "tensor_parallel", "--workload", "recsys:S"],
     "tensor_parallel splits each block by its heads: use the transformer family"),
    (["--strategy", "ddp", "--workload", "mlp:S", "--microbatches", "4"],
     "--microbatches applies to --strategy pipeline, which is not among the strategies "
     "chosen (ddp)"),
    (["--strategy", "pipeline", "--workload", "transformer:S", "--tensor-parallel", "2"],
     "--tensor-parallel applies to --strategy tensor_parallel"),
    (["--strategy", "tensor_parallel", "--workload", "transformer:S", "--schedule", "gpipe"],
     "--schedule applies to --strategy pipeline"),
])
def test_a_layout_the_run_cannot_take_is_one_line_and_exit_2(tmp_path, args, message):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before a run was started


def test_a_slurm_dry_run_script_carries_the_layout(tmp_path):
    script = tmp_path / "job.sbatch"
    proc = _run(tmp_path, "--strategy", "pipeline", "--workload", "transformer:M",
                "--cluster", "slurm:nodes=4", "--stages", "4", "--microbatches", "8",
                "--schedule", "gpipe", "--stage-layers", "1,1,1,1", "--dry-run",
                "--script", str(script))
    assert proc.returncode == 0, proc.stderr
    assert ("--stages 4 --microbatches 8 --schedule gpipe --stage-layers 1,1,1,1"
            in script.read_text())
