"""A project's verdicts night after night: computed, stored with what they were computed from,
and compared with the previous night's, so that a changed answer is flagged with its cause.

A verdict **changed** when, against the latest earlier bench run of the same project (its
fingerprint) on the same machine (environment fingerprint): the pick is another strategy or
another device count, or its predicted time to train moved by more than the error of the
figure (the simulator's validation error where simulated, else ``MIN_CHANGE``, the
run-to-run noise the regression rule also ignores). The card then says what changed and what
is new since (measurements, calibration, code).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from harness.core.errors import InputError
from harness.core.project import Project, resolved_workload

TABLE = "verdicts"
MIN_CHANGE = 0.05  # as reports.history.MIN_REL: smaller moves are run-to-run noise


def project_verdicts(root: Path, project: Project) -> list[dict[str, Any]]:
    """One verdict per (workload, target) of the project, in the file's order; a workload or
    target with no answer gets a card that says why (never a missing card)."""
    from harness.recommend.recommender import Unanswered, recommend, stored_inputs
    from results.store import load

    tables = stored_inputs(root)
    measured = load(root)
    out = []
    for position, (workload, goal) in enumerate(project.cards()):
        base = {"position": position, "workload": workload, "target": goal.target,
                "constraint": goal.describe().partition(", ")[2]}
        try:
            frame = recommend(
                measured, workloads=[resolved_workload(workload, project)],
                targets=[goal.target], samples=goal.samples or project.samples,
                budget=goal.budget_usd, device=goal.device, precision=goal.precision,
                deadline_s=None if goal.deadline_hours is None else goal.deadline_hours * 3600,
                **tables)
            verdicts = frame.attrs.get("verdicts") or []
            verdict = dict(verdicts[0]) if verdicts else {
                "status": "none", "headline": "no answer", "why": "no candidates"}
        except Unanswered as exc:  # nothing meets the goal, or nothing can train it
            verdict = dict(exc.card)
        except InputError as exc:  # the workload itself cannot be read
            verdict = {"status": "none", "headline": "no answer", "why": str(exc)}
        out.append(_flat(verdict) | base)
    return out


def _flat(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict as one stored row: the pick's numbers, the runner-up in words."""
    pick: dict[str, Any] = verdict["pick"] if isinstance(verdict.get("pick"), dict) else {}
    other = verdict.get("runner_up")
    margin = _num(verdict.get("margin"))
    runner_up = ""
    if isinstance(other, dict):
        runner_up = (f"{other.get('framework')}/{other.get('strategy')} on "
                     f"{other.get('replicas')}"
                     + (f", {margin:+.0%} time" if _finite(margin) else ""))
    return {"runner_up_text": runner_up, "status": verdict.get("status", "none"),
            "decided_by": json.dumps(verdict.get("decided_by"), default=str),
            "headline": verdict.get("headline", ""),
            "why": verdict.get("why", ""), "sure": verdict.get("sure", ""),
            "framework": str(pick.get("framework", "")), "strategy": str(pick.get("strategy", "")),
            "replicas": int(pick.get("replicas") or 0) if _finite(pick.get("replicas")) else 0,
            "train_time_s": _num(pick.get("train_time_s")), "cost_usd": _num(pick.get("cost_usd")),
            "validation_error": _num(pick.get("validation_error")),
            "source": str(pick.get("source", ""))}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: Any) -> float:
    return float(v) if _finite(v) else math.nan


def store_verdicts(store: Any, run_id: str, project: Project, verdicts: list[dict[str, Any]],
                   inputs: dict[str, Any]) -> None:
    """This night's verdicts, with the project, commit, environment and inputs they read."""
    frame = pd.DataFrame(verdicts).assign(
        project=project.fingerprint(), project_name=project.name,
        commit=str(inputs.get("commit", "")), env_fingerprint=str(inputs.get("env", "")),
        inputs=json.dumps(inputs, sort_keys=True, default=str))
    store.write_table(run_id, TABLE, project.fingerprint(), frame)


def previous_verdicts(root: Path, project: Project, run_id: str, env: str
                      ) -> pd.DataFrame:
    """The latest stored verdicts of this project on this machine before ``run_id``."""
    from results.store import load_table_safe

    table = load_table_safe(root, TABLE)
    if table.empty or "project" not in table:
        return pd.DataFrame()
    mine = table[(table["project"] == project.fingerprint())
                 & (table["env_fingerprint"] == env) & (table["run_id"] < run_id)]
    if mine.empty:
        return mine
    return mine[mine["run_id"] == mine["run_id"].max()]


def changes(current: list[dict[str, Any]], previous: pd.DataFrame,
            now_inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """``current`` with ``changed`` and ``change`` (what moved, and why) set on each card."""
    before: dict[tuple[str, str], dict[str, Any]] = {
        (str(r["workload"]), str(r["target"])): {str(k): x for k, x in r.items()}
        for r in previous.to_dict("records")} if not previous.empty else {}
    out = []
    for v in current:
        old = before.get((v["workload"], v["target"]))
        v = dict(v, changed=False, change="", since_run="")
        if old is not None:
            v["since_run"] = str(old["run_id"])
            moved = _moved(old, v)
            if moved:
                why = _causes(json.loads(old.get("inputs") or "{}"), now_inputs)
                v.update(changed=True, change=f"{moved} since {old['run_id']}"
                                             + (f" ({why})" if why else ""))
        out.append(v)
    return out


def _moved(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What moved beyond the error, in words; '' where nothing did."""
    was = f"{old['framework']}/{old['strategy']} on {old['replicas']}"
    now = f"{new['framework']}/{new['strategy']} on {new['replicas']}"
    if old["status"] != new["status"]:
        return f"was {old['status']} ({was}), now {new['status']} ({now})"
    if (old["framework"], old["strategy"]) != (new["framework"], new["strategy"]):
        return f"the pick was {was}, now {now}"
    if int(old["replicas"]) != int(new["replicas"]):
        return f"the device count was {old['replicas']}, now {new['replicas']}"
    t0, t1 = _num(old["train_time_s"]), _num(new["train_time_s"])
    if _finite(t0) and _finite(t1) and t0 > 0:
        err = max(MIN_CHANGE, abs(_num(new["validation_error"])) if _finite(
            new["validation_error"]) else 0.0)
        rel = t1 / t0 - 1
        if abs(rel) > err:
            return (f"its predicted time to train moved {rel:+.0%} (beyond the {err:.0%} "
                    f"error)")
    return ""


def _causes(old: dict[str, Any], new: dict[str, Any]) -> str:
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


def inputs_of(root: Path, commit: str, env: str) -> dict[str, Any]:
    """What tonight's verdicts read: the measured runs, the latest calibration and
    validation runs, the code's commit, the machine."""
    from results.store import load, load_table_safe

    measured = load(root)
    comm = load_table_safe(root, "calibration")
    validation = load_table_safe(root, "validation")
    return {"measured_runs": sorted(set(measured["run_id"])) if not measured.empty else [],
            "calibration": [str(comm["run_id"].max()) if not comm.empty else "",
                            str(validation["stored_in_run"].max())
                            if "stored_in_run" in validation else ""],
            "commit": commit, "env": env}
