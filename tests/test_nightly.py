"""The nightly job answers a team's own question: a project file, verdicts stored night after
night, a changed verdict flagged with its cause, results merged from several machines."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_report import case

from harness.core.errors import InputError
from harness.core.project import find_project, load_project

REPO = Path(__file__).resolve().parents[1]


def stratbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


PROJECT = """
name = "tiny"
workloads = ["mlp:S"]
clusters = ["local"]
samples = 1e6
steps = 2
repeats = 1

[[targets]]
target = "local"
"""


# The project file --------------------------------------------------------------------------

def test_a_project_file_is_found_where_a_team_keeps_it(tmp_path):
    (tmp_path / "stratbench.toml").write_text(PROJECT)
    project = find_project(None, tmp_path)
    assert project is not None and project.name == "tiny" and project.workloads == ("mlp:S",)
    assert [t.target for t in project.targets] == ["local"]
    (tmp_path / "stratbench.toml").unlink()
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "theirs"\n[tool.stratbench]\n' + PROJECT.replace(
            "[[targets]]", "[[tool.stratbench.targets]]"))
    assert find_project(None, tmp_path).name == "tiny"
    assert find_project(None, REPO) is None  # stratbench's own pyproject is never a project


def test_the_default_suite_is_the_checked_in_example():
    from harness.commands.bench import SIM_TARGETS
    from harness.commands.run import SUITES

    example = load_project(REPO / "docs" / "examples" / "stratbench.toml")
    assert example.workloads == SUITES["quick"]
    assert [t.target for t in example.targets] == ["local", *SIM_TARGETS]


@pytest.mark.parametrize("text, key", [
    ('colour = "red"\n' + PROJECT, "unknown key 'colour'"),
    (PROJECT + 'colour = "red"\n', "unknown key 'targets[0].colour'"),
    (PROJECT.replace('target = "local"', 'target = "bogus:1"'), "targets[0].target"),
    (PROJECT.replace('"mlp:S"', '"models/missing.py:build"'), "workloads[0]"),
    (PROJECT.replace('["local"]', '["netns:hosts=two"]'), "clusters[0]"),
    (PROJECT.replace('target = "local"', 'target = "local"\nbudget = -5'),
     "targets[0].budget"),
    (PROJECT.replace("steps = 2", "steps = \"two\""), "steps must be"),
    (PROJECT.replace('"mlp:S"', '"nosuch:S"'), "workloads[0]"),
])
def test_a_malformed_project_file_is_one_line_naming_the_key_and_exit_2(tmp_path, text, key):
    path = tmp_path / "stratbench.toml"
    path.write_text(text)
    proc = stratbench("bench", "--config", str(path), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()  # nothing ran


def test_a_missing_project_file_is_named(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_project(tmp_path / "none.toml")


# Verdicts night after night -----------------------------------------------------------------

def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ddp_s: float, single_s: float,
           extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """One bench night of the tiny project with its runs planted: single_device at
    ``single_s`` and ddp at ``ddp_s`` per step."""
    from harness.commands import bench

    def planted(cases, store, run_id, skip, quiet, cluster=None):
        rows = [case(run_id, "single_device", single_s, replicas=1),
                case(run_id, "ddp", ddp_s)]
        for r in rows:
            store.write_case(r)
        return rows

    monkeypatch.setattr(bench, "run_cases", planted)
    monkeypatch.setattr(bench, "run_comm", lambda *a, **k: types.SimpleNamespace(
        status="unavailable", reason="skipped in this test"))
    config = tmp_path / "stratbench.toml"
    config.write_text(PROJECT)
    result = CliRunner().invoke(bench.command, ["--config", str(config), "--results",
                                                str(tmp_path / "results"), *extra])
    return result.exit_code, result.output


def test_a_planted_change_that_flips_the_pick_is_flagged_and_fails_the_night(tmp_path,
                                                                              monkeypatch):
    code, _ = _bench(tmp_path, monkeypatch, ddp_s=0.020, single_s=0.004)
    assert code == 0
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.002, single_s=0.004,
                       extra=("--fail-on-verdict-change",))
    assert code == 1, out
    assert "CHANGED: the pick was torch/single_device on 1, now torch/ddp on 2" in out
    assert "new measurements" in out
    html = (tmp_path / "results" / "report.html").read_text()
    assert 'class="verdict ok changed"' in html and "the pick was torch/single_device" in html


def test_a_planted_change_below_the_error_is_not_flagged(tmp_path, monkeypatch):
    assert _bench(tmp_path, monkeypatch, ddp_s=0.002, single_s=0.004)[0] == 0
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.00204, single_s=0.004,
                       extra=("--fail-on-verdict-change",))
    assert code == 0, out
    assert "CHANGED" not in out
    slower, out = _bench(tmp_path, monkeypatch, ddp_s=0.0025, single_s=0.004,
                         extra=("--fail-on-verdict-change",))
    assert slower == 1 and "predicted time to train moved +" in out
