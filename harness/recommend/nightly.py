"""A project's verdicts night after night: computed, stored with what they were computed from,
and compared with the previous night's, so that a changed answer is flagged with its cause.

A verdict **changed** when, against the latest earlier bench run of the same project (its
``id``, else its file's path: an edited file is the same project) on the same machine
(environment fingerprint): the pick is another strategy or another device count, or its
predicted time to train moved by more than the error of the figure (the simulator's
validation error where simulated, else ``MIN_CHANGE``, the run-to-run noise the regression
rule also ignores). The card then says what changed and why: the project file's edit (its
keys, old -> new) and what is new since (measurements, calibration, code), each with the
part of the change it made; only the latter is ``unexplained``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

import pandas as pd

from harness.core.errors import InputError
from harness.core.project import Project, TargetGoal, resolved_workload
from harness.core.units import finite_number
from harness.measure.stats import MIN_CHANGE
from harness.recommend.decide import run_name
from harness.recommend.records import Recommendation, Verdict

if TYPE_CHECKING:
    from harness.recommend.recommender import StoredInputs
    from results.store import ResultsStore

TABLE = "verdicts"


class Card(TypedDict):
    """A project's verdict of one workload on one target, as the nightly store keeps it (one
    row of the ``verdicts`` table): the pick's numbers, the runner-up in words, and, once
    compared with the night before (``changes``), what changed and why."""

    runner_up_text: str
    status: str
    decided_by: str  # the verdict's decided_by, as JSON
    headline: str
    why: str
    sure: str
    framework: str
    strategy: str
    replicas: int
    train_time_s: float
    cost_usd: float
    validation_error: float
    source: str
    workload: str
    target: str
    constraint: str
    position: NotRequired[int]
    changed: NotRequired[bool]
    change: NotRequired[str]
    since_run: NotRequired[str]
    edit: NotRequired[str]
    edit_change: NotRequired[str]
    input_change: NotRequired[str]
    unexplained: NotRequired[bool]


class StoredCard(Card):
    """A card as the store reads it back, with the night it was stored in and what it read."""

    run_id: str
    inputs: str  # Inputs, as JSON
    question: NotRequired[str]  # the project as that night asked it, as JSON


class Inputs(TypedDict, total=False):
    """What a night's verdicts read: the measured runs, the latest calibration and
    validation runs, the code's commit, the machine (stored with them as JSON)."""

    measured_runs: list[str]
    calibration: list[str]
    commit: str
    env: str


def project_verdicts(root: Path, project: Project) -> list[Card]:
    """One verdict per (workload, target) of the project, in the file's order; a workload or
    target with no answer gets a card that says why (never a missing card)."""
    from harness.recommend.recommender import stored_inputs
    from results.store import load

    tables = stored_inputs(root)
    measured = load(root)
    out = []
    for position, (workload, goal) in enumerate(project.cards()):
        made = card(measured, tables, project, workload, goal)
        made["position"] = position
        out.append(made)
    return out


def card_answer(measured: pd.DataFrame, tables: StoredInputs, project: Project,
                workload: str, goal: TargetGoal) -> Recommendation:
    """The recommender's answer for one workload on one of the project's targets, under that
    target's goal; ``recommender.Unanswered`` where there is no answer."""
    from harness.recommend.recommender import recommend
    from harness.validate.devices import resolve_stack

    return recommend(
        measured, workloads=[resolved_workload(workload, project)], targets=[goal.target],
        samples=goal.samples or project.samples, budget=goal.budget_usd, device=goal.device,
        precision=goal.precision, global_batch=goal.global_batch,
        mechanisms=resolve_stack(dict(goal.stack)),
        deadline_s=None if goal.deadline_hours is None else goal.deadline_hours * 3600,
        stored=tables)


def card(measured: pd.DataFrame, tables: StoredInputs, project: Project, workload: str,
         goal: TargetGoal) -> Card:
    """The verdict of one workload on one of the project's targets, as a stored row."""
    from harness.recommend.recommender import Unanswered

    try:
        verdicts = card_answer(measured, tables, project, workload, goal).verdicts
        verdict = verdicts[0] if verdicts else Verdict(
            workload=workload, target=goal.target, status="none", headline="no answer",
            why="no candidates")
    except Unanswered as exc:  # nothing meets the goal, or nothing can train it
        verdict = exc.card
    except InputError as exc:  # the workload itself cannot be read
        verdict = Verdict(workload=workload, target=goal.target, status="none",
                          headline="no answer", why=str(exc))
    return _flat(verdict, workload, goal.target, goal.describe().partition(", ")[2])


def _flat(verdict: Verdict, workload: str, target: str, constraint: str) -> Card:
    """A verdict as one stored row: the pick's numbers, the runner-up in words."""
    pick, other = verdict.pick, verdict.runner_up
    margin = _num(verdict.margin)
    runner_up = ""
    if other is not None:
        runner_up = (f"{run_name(other)} on {other.replicas}"
                     + (f", {margin:+.0%} time" if finite_number(margin) else ""))
    decided = None if verdict.decided_by is None else verdict.decided_by.as_dict()
    return Card(runner_up_text=runner_up, status=verdict.status,
                decided_by=json.dumps(decided, default=str), headline=verdict.headline,
                why=verdict.why, sure=verdict.sure,
                framework="" if pick is None else str(pick.framework),
                strategy="" if pick is None else str(pick.strategy),
                replicas=(int(pick.replicas or 0)
                          if pick is not None and finite_number(pick.replicas) else 0),
                train_time_s=math.nan if pick is None else _num(pick.train_time_s),
                cost_usd=math.nan if pick is None else _num(pick.cost_usd),
                validation_error=math.nan if pick is None else _num(pick.validation_error),
                source="" if pick is None else str(pick.source), workload=workload,
                target=target, constraint=constraint)


def _num(v: float) -> float:
    return float(v) if finite_number(v) else math.nan


def store_verdicts(store: ResultsStore, run_id: str, project: Project,
                   verdicts: Sequence[Card], inputs: Inputs) -> None:
    """This night's verdicts, with the project (which one, and what it asked), commit,
    environment and inputs they read."""
    frame = pd.DataFrame(verdicts).assign(
        project=project.fingerprint(), project_name=project.name,
        project_id=project.identity(),
        question=json.dumps(project.question(), sort_keys=True, default=str),
        commit=str(inputs.get("commit", "")), env_fingerprint=str(inputs.get("env", "")),
        inputs=json.dumps(inputs, sort_keys=True, default=str))
    store.write_table(run_id, TABLE, project.fingerprint(), frame)


def previous_verdicts(root: Path, project: Project, run_id: str, env: str
                      ) -> pd.DataFrame:
    """The latest stored verdicts of this project (its identity: an edited file is the same
    project) on this machine before ``run_id``; rows from before identities were stored match
    by the question's fingerprint."""
    from results.store import load_table_safe

    table = load_table_safe(root, TABLE)
    if table.empty or "project" not in table:
        return pd.DataFrame()
    same = table["project"] == project.fingerprint()
    if "project_id" in table:
        same = (table["project_id"] == project.identity()) | (same & table["project_id"].isna())
    mine = table[same & (table["env_fingerprint"] == env) & (table["run_id"] < run_id)]
    if mine.empty:
        return mine
    return mine[mine["run_id"] == mine["run_id"].max()]


Recompute = Callable[[Project, str, TargetGoal], Card]


def changes(current: Sequence[Card], previous: pd.DataFrame, now_inputs: Inputs,
            project: Project | None = None, recompute: Recompute | None = None
            ) -> list[Card]:
    """``current`` with ``changed`` and ``change`` (what moved, and why) set on each card.

    Where the project file was edited since, the edit is a cause: the card is recomputed
    with the previous night's question on tonight's inputs (``recompute``); what that
    answer moved from last night is the inputs' doing (measurements, calibration, code:
    ``unexplained``), what tonight's moved from it is the edit's (``edit_change``)."""
    before: dict[tuple[str, str], StoredCard] = {
        (str(r["workload"]), str(r["target"])): cast(StoredCard, r)
        for r in previous.to_dict("records")} if not previous.empty else {}
    out = []
    for now in current:
        old = before.get((now["workload"], now["target"]))
        v = Card(**now)
        v["changed"], v["change"], v["since_run"], v["edit"] = False, "", "", ""
        v["edit_change"], v["input_change"], v["unexplained"] = "", "", False
        if old is not None:
            v["since_run"] = str(old["run_id"])
            was_asked = _old_question(old, project)
            edit = (project_edits(was_asked, project, v["workload"], v["target"])
                    if was_asked is not None and project is not None else [])
            baseline = v
            if edit and recompute is not None and project is not None \
                    and was_asked is not None:
                goal = _goal(was_asked, v["target"])
                if goal is not None:
                    baseline = recompute(was_asked, v["workload"], goal)
            v["edit"] = "; ".join(edit)
            by_edit = _moved(baseline, v) if baseline is not v else ""
            by_inputs = _moved(old, baseline)
            if edit and baseline is v:  # an edit not recomputed: it is the one cause named
                by_edit, by_inputs = by_inputs, ""
            parts = []
            if by_edit:
                v["edit_change"] = by_edit
                parts.append(f"the project edit ({v['edit']}): {by_edit}")
            if by_inputs:
                why = _causes(cast(Inputs, json.loads(old.get("inputs") or "{}")),
                              now_inputs)
                said = f"{by_inputs} since {old['run_id']}" + (f" ({why})" if why else "")
                v["input_change"], v["unexplained"] = said, True
                parts.append(said)
            if parts:
                v["changed"], v["change"] = True, "; and ".join(parts)
        out.append(v)
    return out


def _old_question(old: StoredCard, project: Project | None) -> Project | None:
    """The project as the previous night asked it (None where that night did not store it)."""
    text = old.get("question")
    if project is None or not isinstance(text, str) or not text:
        return None
    body = json.loads(text)
    body["targets"] = tuple(TargetGoal(**t) for t in body.get("targets", []))
    for key in ("workloads", "clusters", "frameworks", "strategies"):
        body[key] = tuple(body.get(key, ()))
    return Project(**(body | {"path": project.path, "results": project.results,
                              "id": project.id}))


def _goal(project: Project, target: str) -> TargetGoal | None:
    return next((t for t in project.targets if t.target == target), None)


def project_edits(old: Project, new: Project, workload: str, target: str) -> list[str]:
    """The keys of the project file that changed and bear on this card, as 'key old -> new'
    ('budget $50.00 -> $1.00'); [] where none did."""
    out = []
    for key in ("samples", "frameworks", "strategies", "clusters", "steps", "repeats"):
        a, b = getattr(old, key), getattr(new, key)
        if a != b:
            out.append(f"{key} {_said(key, a)} -> {_said(key, b)}")
    was, now = _goal(old, target), _goal(new, target)
    if was is not None and now is not None:
        for key, name in (("budget_usd", "budget"), ("deadline_hours", "deadline"),
                          ("device", "device"), ("samples", "samples"),
                          ("precision", "precision"), ("global_batch", "global batch")):
            a, b = getattr(was, key), getattr(now, key)
            if a != b:
                out.append(f"{name} {_said(name, a)} -> {_said(name, b)}")
    return out


def _said(key: str, value: float | str | tuple[str, ...] | None) -> str:
    from harness.core.units import format_count, format_usd

    if value is None:
        return "none"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(str, value)) + "]"
    if key == "budget":
        return format_usd(float(value))
    if key == "deadline":
        return f"{float(value):g} h"
    if key == "samples":
        return format_count(float(value))
    return str(value)


def _moved(old: Card, new: Card) -> str:
    """What moved beyond the error, in words; '' where nothing did."""
    was = f"{old['framework']}/{old['strategy']} on {old['replicas']}"
    now = f"{new['framework']}/{new['strategy']} on {new['replicas']}"
    if old["status"] != new["status"]:
        return f"was {_state(old['status'], was)}, now {_state(new['status'], now)}"
    if (old["framework"], old["strategy"]) != (new["framework"], new["strategy"]):
        return f"the pick was {was}, now {now}"
    if int(old["replicas"]) != int(new["replicas"]):
        return f"the device count was {old['replicas']}, now {new['replicas']}"
    t0, t1 = _num(old["train_time_s"]), _num(new["train_time_s"])
    if finite_number(t0) and finite_number(t1) and t0 > 0:
        err = max(MIN_CHANGE, abs(_num(new["validation_error"])) if finite_number(
            new["validation_error"]) else 0.0)
        rel = t1 / t0 - 1
        if abs(rel) > err:
            return (f"its predicted time to train moved {rel:+.0%} (beyond the {err:.0%} "
                    f"error)")
    return ""


def _state(status: str, pick: str) -> str:
    """A card's answer in words: 'torch/ddp on 2', 'nothing within the limits (nearest
    torch/ddp on 2)', 'no answer'."""
    if status == "ok":
        return pick
    if status == "over_budget":
        return f"nothing within the limits (nearest {pick})"
    return "no answer"


def _causes(old: Inputs, new: Inputs) -> str:
    causes = []
    fresh = sorted(set(new.get("measured_runs", [])) - set(old.get("measured_runs", [])))
    if fresh:
        causes.append(f"new measurements: {len(fresh)} run{'s' if len(fresh) > 1 else ''}")
    if old.get("calibration") != new.get("calibration"):
        causes.append("a new calibration")
    if old.get("commit") != new.get("commit"):
        causes.append(f"code change {str(old.get('commit'))[:10]} -> "
                      f"{str(new.get('commit'))[:10]}")
    return "; ".join(causes)


def inputs_of(root: Path, commit: str, env: str) -> Inputs:
    """What tonight's verdicts read: the measured runs, the latest calibration and
    validation runs, the code's commit, the machine."""
    from results.store import load, load_table_safe

    measured = load(root)
    comm = load_table_safe(root, "calibration")
    validation = load_table_safe(root, "validation")
    return Inputs(measured_runs=sorted(set(measured["run_id"])) if not measured.empty else [],
                  calibration=[str(comm["run_id"].max()) if not comm.empty else "",
                               str(validation["stored_in_run"].max())
                               if "stored_in_run" in validation else ""],
                  commit=commit, env=env)


def recomputer(root: Path) -> Recompute:
    """``changes``' ``recompute``: a card on tonight's stored inputs, read once."""
    from harness.recommend.recommender import stored_inputs
    from results.store import load

    tables, measured = stored_inputs(root), load(root)

    def recompute(project: Project, workload: str, goal: TargetGoal) -> Card:
        return card(measured, tables, project, workload, goal)

    return recompute
