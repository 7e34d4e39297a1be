"""The CLI end to end, through a subprocess, as users and the nightly job call it."""

from __future__ import annotations

import json

import pytest
from stratbench_cli import stratbench

from harness.cli import main


def test_env_json_is_valid_json_and_nothing_else():
    proc = stratbench("env", "--json")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)  # the whole of stdout must parse
    assert manifest["cpu"]["logical_cores"] >= 1
    assert manifest["cpu"]["physical_cores"] >= 1
    assert manifest["memory_bytes"] > 0
    assert manifest["python"]["version"].count(".") == 2
    assert {"tensorflow", "torch", "simpy", "pandas"} <= set(manifest["versions"])
    for name in ("tensorflow", "torch"):
        probe = manifest["frameworks"][name]
        assert probe["available"] or probe["reason"]
    assert manifest["frameworks"]["torch"]["available"], "the test env installs torch"
    assert manifest["keras_implementation"] in ("keras3", "tf_keras")
    assert "nvidia_smi" in manifest["gpus"] and "torch" in manifest["gpus"]
    assert manifest["tpu"]["present"] in (True, False)
    assert "commit" in manifest["git"]


def test_env_human_output_names_the_machine(capsys):
    assert main(["env", "--no-frameworks"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "memory" in out and "python" in out


@pytest.mark.parametrize("args, fragment", [
    (["nope"], "No such command"),
    (["run", "--strategy", "warp_drive"], "unknown strategy 'warp_drive'"),
    (["run", "--framework", "jax"], "unknown framework 'jax'"),
    (["run", "--cluster", "cloud"], "unknown cluster kind 'cloud'"),
    (["run", "--cluster", "netns:hosts=99,rate=1gbit"], "hosts='99'"),
    (["run", "--steps", "0"], "--steps"),
    (["comm", "--sizes", "9MiB:1KiB"], "MIN > MAX"),
    (["env", "--bogus"], "No such option"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, fragment):
    proc = stratbench(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("stratbench: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


def test_verbs_not_built_yet_say_so_and_fail():
    proc = stratbench("comm", "--cluster", "slurm")
    assert proc.returncode == 1
    assert "not built yet" in proc.stderr and "nothing was run" in proc.stderr


def test_help_lists_the_contract_verbs():
    proc = stratbench("--help")
    assert proc.returncode == 0
    for verb in ("env", "run", "comm", "bench", "cleanup"):
        assert verb in proc.stdout


def test_unwritable_results_directory_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = stratbench("bench", "--results", str(blocker))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("stratbench: error: results directory")
    assert "Traceback" not in proc.stderr
