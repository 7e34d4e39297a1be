"""The nightly job answers a team's own question: a project file, verdicts stored night after
night, a changed verdict flagged with its cause, results merged from several machines."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from stratbench_cli import stratbench
from test_report import case, plant_bench_runs

from harness.core.errors import InputError
from harness.core.project import find_project, load_project

REPO = Path(__file__).resolve().parents[1]


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


def test_a_targets_stack_reaches_the_recommender_and_keeps_older_projects_identity(tmp_path):
    """A target's ``stack`` is recommend's --tp-overlap and its kind, read as they are; a
    file without one asks the same question it asked before the key existed."""
    plain = tmp_path / "plain.toml"
    plain.write_text(PROJECT)
    stated = tmp_path / "stated.toml"
    stated.write_text(PROJECT.replace(
        'target = "local"',
        'target = "local"\nstack = { tp_overlap = true, grad_reduce = "after-backward" }'))
    (goal,) = load_project(stated).targets
    assert dict(goal.stack) == {"tp_overlap": True, "grad_reduce": "after_backward"}
    assert "tp_overlap True" in goal.describe()
    assert "stack" not in load_project(plain).question()["targets"][0]
    assert load_project(plain).fingerprint() != load_project(stated).fingerprint()


def test_a_nightly_card_searches_with_its_targets_stack(tmp_path):
    """The nightly job asks the recommender what the file asks: a target whose stack
    overlaps its tensor-parallel collectives and parameter gathers gets a layout that runs
    with them, and the card's headline names them."""
    from harness.recommend.nightly import project_verdicts

    text = PROJECT.replace('"mlp:S"', '"llama3_70b"').replace(
        'target = "local"', 'target = "preset:dgx_h100_ib,hosts=16"\nprecision = "bf16"')
    plain, stated = tmp_path / "plain.toml", tmp_path / "stated.toml"
    plain.write_text(text)
    stated.write_text(text + "stack = { tp_overlap = true, param_gather_overlap = true }\n")
    (before,) = project_verdicts(tmp_path / "r1", load_project(plain))
    (after,) = project_verdicts(tmp_path / "r2", load_project(stated))
    assert before["status"] == after["status"] == "ok"
    assert "overlap" not in before["headline"]
    assert "tp overlap" in after["headline"] and "param gather overlap" in after["headline"]


def test_a_targets_stack_may_name_a_published_stack_and_override_it(tmp_path):
    """``stack = "name"`` is recommend's --stack; ``{ like = "name", ... }`` overrides it
    mechanism by mechanism, as options beside --stack do."""
    from harness.validate.devices import named_stack, resolve_stack

    path = tmp_path / "named.toml"
    path.write_text(PROJECT.replace('target = "local"',
                                    'target = "local"\nstack = "nemo-24.09"'))
    (goal,) = load_project(path).targets
    assert dict(goal.stack) == {"like": "nemo-24.09"}
    assert resolve_stack(dict(goal.stack)) == named_stack("nemo-24.09")[0]
    path.write_text(PROJECT.replace(
        'target = "local"',
        'target = "local"\nstack = { like = "nemo-24.09", tp_overlap = false }'))
    (goal,) = load_project(path).targets
    mechanisms = resolve_stack(dict(goal.stack))
    assert mechanisms["tp_overlap"] is False and mechanisms["param_gather_overlap"] is True
    assert "like nemo-24.09" in goal.describe()


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
    (PROJECT.replace('target = "local"', 'target = "local"\nglobal_batch = 64'),
     "targets[0].global_batch applies to described clusters"),
    (PROJECT.replace('target = "local"', 'target = "local"\nstack = { tp_overlap = "yes" }'),
     "targets[0].stack.tp_overlap must be true or false"),
    (PROJECT.replace('target = "local"', 'target = "local"\nstack = { overlap_all = true }'),
     "targets[0].stack: overlap_all is not a stack mechanism"),
    (PROJECT.replace('target = "local"', 'target = "local"\nstack = { p2p = "sometimes" }'),
     "targets[0].stack: p2p 'sometimes' (choose from async, blocking)"),
    (PROJECT.replace('target = "local"', 'target = "local"\nstack = "nemo"'),
     "targets[0].stack: unknown stack 'nemo' (choose from nemo-24.09,"),
    (PROJECT.replace('target = "local"', 'target = "local"\nstack = { like = 3 }'),
     "targets[0].stack.like must be a stack's name, not 3"),
])
def test_a_malformed_project_file_is_one_line_naming_the_key_and_exit_2(tmp_path, capsys,
                                                                        text, key):
    from harness.cli import main

    path = tmp_path / "stratbench.toml"
    path.write_text(text)
    code = main(["bench", "--config", str(path), "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], err
    assert not (tmp_path / "r").exists()  # nothing ran


def test_a_missing_project_file_is_named(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_project(tmp_path / "none.toml")


# Verdicts night after night -----------------------------------------------------------------

def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ddp_s: float, single_s: float,
           extra: tuple[str, ...] = (), budget: float | None = None) -> tuple[int, str]:
    """One bench night of the tiny project with its runs planted: single_device at
    ``single_s`` and ddp at ``ddp_s`` per step; ``budget`` written into the file."""
    from harness.commands import bench

    plant_bench_runs(monkeypatch, single_s=single_s, ddp_s=ddp_s)
    config = tmp_path / "stratbench.toml"
    config.write_text(PROJECT + (f"budget = {budget!r}\nsamples = 1e11\n"
                                 if budget is not None else ""))
    result = CliRunner().invoke(bench.command, ["--config", str(config), "--results",
                                                str(tmp_path / "results"), *extra])
    return result.exit_code, result.output


def test_a_change_below_the_error_passes_and_a_flipped_pick_is_flagged_and_fails(
        tmp_path, monkeypatch):
    """Three nights of the tiny project: ddp wins; then ddp 2% slower (below the 5% noise
    floor of a measured figure): not flagged; then ddp 10x slower, so one device wins: the
    card says what changed and why, and --fail-on-verdict-change exits 1."""
    assert _bench(tmp_path, monkeypatch, ddp_s=0.002, single_s=0.004)[0] == 0
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.00204, single_s=0.004,
                       extra=("--fail-on-verdict-change",))
    assert code == 0, out
    assert "CHANGED" not in out
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.020, single_s=0.004,
                       extra=("--fail-on-verdict-change",))
    assert code == 1, out
    assert "CHANGED: the pick was torch/ddp on 2, now torch/single_device on 1" in out
    assert "new measurements" in out
    html = (tmp_path / "results" / "report.html").read_text()
    assert 'class="verdict ok changed"' in html and "the pick was torch/ddp" in html


def _stored_cost(tmp_path: Path) -> float:
    from results.store import load_table_safe

    table = load_table_safe(tmp_path / "results", "verdicts")
    return float(table[table["run_id"] == table["run_id"].max()]["cost_usd"].iloc[0])


def test_a_project_edit_is_named_as_the_cause_and_fails_only_with_an_unexplained_change(
        tmp_path, monkeypatch):
    """Night 1: ddp wins (1.6x faster on 2 devices, 1.25x the cost of one device). Night 2:
    the budget edited below ddp's cost: one device wins, the card names the edit as the cause, and
    --fail-on-verdict-change passes (the same question on tonight's runs still picks ddp).
    Night 3: the budget raised again and one device's runs 2x slower: the edit moved the
    pick back to ddp, and the new runs alone would have left nothing within the old budget:
    both causes on the card, exit 1."""
    assert _bench(tmp_path, monkeypatch, ddp_s=0.005, single_s=0.004, budget=1000.0)[0] == 0
    ddp_cost = _stored_cost(tmp_path)
    tight = round(ddp_cost / 1.1, 2)
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.005, single_s=0.004, budget=tight,
                       extra=("--fail-on-verdict-change",))
    assert code == 0, out
    assert (f"CHANGED: the project edit (budget $1,000.00 -> ${tight:,.2f}): the pick was "
            f"torch/ddp on 2, now torch/single_device on 1") in out
    assert "changed by the project edit alone" in out
    html = (tmp_path / "results" / "report.html").read_text()
    assert "Changed by the project edit" in html and "Changed since the last run" not in html
    code, out = _bench(tmp_path, monkeypatch, ddp_s=0.005, single_s=0.008, budget=1000.0,
                       extra=("--fail-on-verdict-change",))
    assert code == 1, out
    assert (f"the project edit (budget ${tight:,.2f} -> $1,000.00): was nothing within the "
            f"limits (nearest torch/ddp on 2), now torch/ddp on 2") in out
    assert ("; and was torch/single_device on 1, now nothing within the limits (nearest "
            "torch/ddp on 2) since") in out
    assert "(new measurements: 1 run)" in out
    assert "by more than its edit explains" in out
    html = (tmp_path / "results" / "report.html").read_text()
    assert "Changed by the project edit" in html and "Changed since the last run" in html


def test_a_time_moved_beyond_its_error_is_a_change_and_within_it_is_not():
    import json

    import pandas as pd

    from harness.recommend.nightly import changes

    def card(seconds: float, error: float = float("nan"), strategy: str = "ddp") -> dict:
        return {"workload": "w", "target": "t", "status": "ok", "framework": "torch",
                "strategy": strategy, "replicas": 8, "train_time_s": seconds,
                "validation_error": error}

    inputs = {"measured_runs": ["r1"], "calibration": ["c1", "v1"], "commit": "aaa"}
    before = pd.DataFrame([card(100.0) | {"run_id": "r1", "inputs": json.dumps(inputs)}])
    now = inputs | {"commit": "bbb"}
    assert not changes([card(104.0)], before, now)[0]["changed"]  # under the 5% floor
    moved = changes([card(110.0)], before, now)[0]
    assert moved["changed"] and "moved +10%" in moved["change"] and "code change" in moved["change"]
    assert not changes([card(110.0, error=0.15)], before, now)[0]["changed"]  # within error
    assert changes([card(100.0, strategy="fsdp")], before, now)[0]["changed"]
    assert not changes([card(300.0)], pd.DataFrame(), now)[0]["changed"]  # a first night


# History from several machines ----------------------------------------------------------------

def _machine(root: Path, fingerprint: str, medians: list[float]) -> None:
    from results.store import ResultsStore

    store = ResultsStore(root)
    for night, median in enumerate(medians):
        run_id = f"2026010{night + 1}T000000Z-{fingerprint[:6]}"
        store.start_run({"host": fingerprint, "cpu": {"model": fingerprint}}, run_id=run_id)
        row = case(run_id, "ddp", median)
        row.env_fingerprint = fingerprint
        store.write_case(row)


def test_merge_keeps_every_run_and_its_machine_apart(tmp_path):
    from reports.history import history, regressions
    from results.store import ResultsStore, load

    _machine(tmp_path / "a", "fast0000aaaa", [0.010, 0.010])
    _machine(tmp_path / "b", "slow0000bbbb", [0.030, 0.030])  # 3x slower machine
    proc = stratbench("merge", str(tmp_path / "a"), str(tmp_path / "b"), "--into",
                      str(tmp_path / "c"))
    assert proc.returncode == 0, proc.stderr
    merged = ResultsStore(tmp_path / "c")
    assert len(merged.run_ids()) == 4
    assert {merged.manifest(r)["host"] for r in merged.run_ids()} == {"fast0000aaaa",
                                                                      "slow0000bbbb"}
    h = history(load(tmp_path / "c"))
    assert set(h["env_fingerprint"]) == {"fast0000aaaa", "slow0000bbbb"}
    assert regressions(h).empty  # the slow machine is never read as a regression
    report = stratbench("report", "--results", str(tmp_path / "c"))
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "c" / "report.html").read_text()
    assert "fast0000" in html and "slow0000" in html and "no regressions" in html
    again = stratbench("merge", str(tmp_path / "a"), "--into", str(tmp_path / "c"))
    assert again.returncode == 0 and "already there" in again.stderr
    assert len(ResultsStore(tmp_path / "c").run_ids()) == 4


def test_merge_refuses_a_run_that_differs_before_copying_anything(tmp_path):
    _machine(tmp_path / "a", "fast0000aaaa", [0.010])
    _machine(tmp_path / "c", "fast0000aaaa", [0.020])  # same run id, other figures
    _machine(tmp_path / "b", "slow0000bbbb", [0.030])
    proc = stratbench("merge", str(tmp_path / "b"), str(tmp_path / "a"), "--into",
                      str(tmp_path / "c"))
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "different files" in proc.stderr
    assert len(list((tmp_path / "c" / "runs").iterdir())) == 1  # b was not copied either
    missing = stratbench("merge", str(tmp_path / "nothing"), "--into", str(tmp_path / "c"))
    assert missing.returncode == 2 and "no results under" in missing.stderr


# Schedules that work as shipped -------------------------------------------------------------

def test_the_workflow_runs_the_readme_bench_and_keeps_and_publishes_its_results():
    import yaml

    flow = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    triggers = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on` as true
    cron = triggers["schedule"][0]["cron"].split()
    assert len(cron) == 5 and "workflow_dispatch" in triggers
    steps = flow["jobs"]["bench"]["steps"]
    results = flow["env"]["RESULTS"]
    bench = next(s["run"] for s in steps if "run" in s and "tox -e bench" in s["run"])
    readme = (REPO / "README.md").read_text()
    assert "tox -e bench" in readme  # the README's nightly command
    assert '--results "$RESULTS"' in bench and "--config" in bench
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save"))
    assert restore["with"]["path"] == save["with"]["path"] == results
    assert restore["with"]["restore-keys"] and save["if"] == "always()"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert f"{results}/report.html" in upload["with"]["path"]


def test_the_crontab_line_is_five_fields_and_the_readme_bench():
    text = (REPO / "docs" / "NIGHTLY.md").read_text()
    line = text.split("```cron\n", 1)[1].split("\n", 1)[0]
    fields, command = line.split()[:5], " ".join(line.split()[5:])
    ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
    for field, (low, high) in zip(fields, ranges, strict=True):
        assert field == "*" or low <= int(field) <= high
    assert "tox -e bench -- --config stratbench.toml --results" in command


def test_a_numbers_only_model_on_a_measured_target_says_so_and_what_to_do(tmp_path):
    """resnet50 is described by its numbers: on `local` the card says nothing runs it there
    and what to do instead, and its why does not repeat the headline."""
    from harness.recommend.nightly import project_verdicts

    config = tmp_path / "stratbench.toml"
    config.write_text(PROJECT.replace('"mlp:S"', '"resnet50"'))
    (card,) = project_verdicts(tmp_path / "results", load_project(config))
    assert card["status"] == "none"
    assert card["headline"] == ("resnet50 is described by its numbers only, so no framework "
                                "runs it on local")
    assert "simulate it on a described system" in card["why"]
    assert "runnable workload" in card["why"] and card["headline"] not in card["why"]
