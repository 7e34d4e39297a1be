"""A team's own question for the nightly job, as one file: which models, measured where, and
recommended for which clusters within which budget.

    stratbench.toml                   (or [tool.stratbench] in the team's pyproject.toml)

    name = "our models"
    id = "our-models"                 # optional: one project across edits and moves
    results = "stratbench-results"    # relative to the file
    samples = 1e7                     # samples to train, for time and cost
    steps = 20
    repeats = 3
    workloads = ["mlp:M", "models/ours.py:build", "gpt3_175b"]
    clusters = ["local"]              # where to measure: local, netns:..., slurm:...
    frameworks = ["torch"]            # optional: measure with these only
    strategies = ["single_device", "ddp"]  # optional: these strategies only

    [[targets]]                       # one verdict card per workload and target, in order
    target = "two_level:hosts=4,gpus=8,intra=300GB/s,inter=100Gbit"
    device = "dgx_a100"               # a preset or system file whose devices it has
    budget = 500.0                    # USD; or deadline = 24.0 (hours)
    stack = { tp_overlap = true }     # optional: the mechanisms of the stack you run
                                      # (recommend's --tp-overlap, --grad-reduce, ...), or
                                      # a stack by name (recommend's --stack): "nemo-24.09",
                                      # or { like = "nemo-24.09", tp_overlap = false }

Like asv's ``asv.conf.json``: the file names the question, the results directory keeps the
answers across nights. Read and checked here (keys, types, clusters, workload files); the
targets' grammar is checked where targets are parsed (``harness.recommend.targets``), both
before anything runs. Every error is one line naming the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tomllib

from harness.core.errors import InputError
from harness.core.layout import MECHANISMS, SEARCH_DEFAULTS, Layout, stack_mechanisms
from workloads.precision import PRECISIONS

FILE = "stratbench.toml"
PYPROJECT = "pyproject.toml"


@dataclass(frozen=True)
class TargetGoal:
    """One cluster to recommend for, and what the answer must meet there."""

    target: str
    budget_usd: float | None = None
    deadline_hours: float | None = None
    device: str | None = None
    samples: float | None = None
    precision: str | None = None  # what a described device computes in (simulate's)
    global_batch: int | None = None  # samples per optimizer step (recommend --global-batch)
    # the stack's mechanisms every model-parallel layout runs with (recommend's --tp-overlap
    # and its kind: harness.core.layout.MECHANISMS), as (name, value) pairs
    stack: tuple[tuple[str, str | bool], ...] = ()

    def describe(self) -> str:
        parts = [self.target]
        if self.budget_usd is not None:
            parts.append(f"budget ${self.budget_usd:,.2f}")
        if self.deadline_hours is not None:
            parts.append(f"deadline {self.deadline_hours:g} h")
        if self.precision is not None:
            parts.append(self.precision)
        if self.global_batch is not None:
            parts.append(f"global batch {self.global_batch}")
        parts += [f"{name} {value}" for name, value in self.stack]
        return ", ".join(parts)


@dataclass(frozen=True)
class Project:
    name: str
    workloads: tuple[str, ...]
    targets: tuple[TargetGoal, ...]
    clusters: tuple[str, ...] = ("local",)
    frameworks: tuple[str, ...] = ()  # to measure with; () = every framework here
    strategies: tuple[str, ...] = ()  # () = every strategy of those frameworks
    samples: float = 1e7
    steps: int = 20
    repeats: int = 3
    results: str | None = None  # resolved against the file's folder
    path: str = ""
    id: str | None = None  # names the project across edits and moves (default: its path)

    def question(self) -> dict[str, Any]:
        """What the project asks, as data: everything but where it is kept and its name."""
        body = asdict(self) | {"path": "", "results": None}
        body.pop("id")
        # a key added later counts only where it is set: older projects keep their identity
        body["targets"] = [{k: v for k, v in t.items()
                            if not (k in ("precision", "global_batch") and v is None)
                            and not (k == "stack" and not v)}
                           for t in body["targets"]]
        return body

    def fingerprint(self) -> str:
        """What makes two nights' verdicts the same question: an edit gives a new one."""
        return hashlib.sha256(json.dumps(self.question(), sort_keys=True, default=str
                                         ).encode()).hexdigest()[:12]

    def identity(self) -> str:
        """Which project this is, edit after edit: its ``id`` where the file gives one, else
        the file's resolved path; the night before is looked up by it."""
        return self.id or (str(Path(self.path).resolve()) if self.path else self.fingerprint())

    def cards(self) -> list[tuple[str, TargetGoal]]:
        """(workload, target) in the file's order: targets within workloads."""
        return [(w, t) for w in self.workloads for t in self.targets]


_KEYS: dict[str, tuple[type, ...]] = {
    "name": (str,), "workloads": (list,), "targets": (list,), "clusters": (list,),
    "frameworks": (list,), "strategies": (list,),
    "samples": (int, float), "steps": (int,), "repeats": (int,), "results": (str,),
    "id": (str,)}
_TARGET_KEYS: dict[str, tuple[type, ...]] = {
    "target": (str,), "budget": (int, float), "deadline": (int, float), "device": (str,),
    "samples": (int, float), "precision": (str,), "global_batch": (int,),
    "stack": (dict, str)}
#: what a target's ``precision`` may name: workloads.precision's
TARGET_PRECISIONS = tuple(PRECISIONS)


def find_project(config: str | None, cwd: Path | None = None) -> Project | None:
    """``--config FILE``, else ``stratbench.toml`` in the working directory, else a
    ``[tool.stratbench]`` table of the working directory's pyproject.toml (never
    stratbench's own); None when there is none (the built-in default suite then)."""
    if config is not None:
        return load_project(Path(config))
    here = cwd or Path.cwd()
    if (here / FILE).is_file():
        return load_project(here / FILE)
    pyproject = here / PYPROJECT
    if pyproject.is_file() and not _is_stratbench_itself(pyproject):
        data = _read_toml(pyproject)
        table = data.get("tool", {}).get("stratbench")
        if isinstance(table, dict):
            return parse_project(table, pyproject, "[tool.stratbench]")
    return None


def _is_stratbench_itself(pyproject: Path) -> bool:
    data = _read_toml(pyproject)
    return data.get("project", {}).get("name") == "stratbench"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise InputError(f"project file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"project file {path}: not valid TOML: {exc}") from None


def load_project(path: Path) -> Project:
    """The project file at ``path`` (TOML; a pyproject.toml: its [tool.stratbench] table)."""
    if not path.is_file():
        raise InputError(f"project file {path} does not exist")
    data = _read_toml(path)
    if path.name == PYPROJECT:
        table = data.get("tool", {}).get("stratbench")
        if not isinstance(table, dict):
            raise InputError(f"{path} has no [tool.stratbench] table")
        return parse_project(table, path, "[tool.stratbench]")
    return parse_project(data, path, "")


def parse_project(data: dict[str, Any], path: Path, table: str) -> Project:
    """A project from its parsed TOML; InputError (one line, naming the key) if malformed."""
    where = f"project file {path}{' ' + table if table else ''}"
    _check(data, _KEYS, where, "")
    for key in ("workloads", "targets"):
        if not data.get(key):
            raise InputError(f"{where}: {key} must name at least one "
                             f"{'workload' if key == 'workloads' else 'target'}")
    workloads = tuple(_strings(data["workloads"], where, "workloads"))
    clusters = tuple(_strings(data.get("clusters", ["local"]), where, "clusters"))
    for i, text in enumerate(clusters):
        from harness.core.clusters import parse_cluster

        try:
            parse_cluster(text)
        except InputError as exc:
            raise InputError(f"{where}: clusters[{i}]: {exc}") from None
    frameworks = tuple(_strings(data.get("frameworks", []), where, "frameworks"))
    for i, name in enumerate(frameworks):
        if name not in ("tf", "torch"):
            raise InputError(f"{where}: frameworks[{i}]: unknown framework {name!r} (choose "
                             f"from tf, torch)")
    strategies = tuple(_strings(data.get("strategies", []), where, "strategies"))
    for i, name in enumerate(strategies):
        from harness.core.strategies import STRATEGIES

        if not any(s.name == name and (not frameworks or s.framework in frameworks)
                   for s in STRATEGIES):
            raise InputError(f"{where}: strategies[{i}]: no framework "
                             f"{'of ' + ', '.join(frameworks) + ' ' if frameworks else ''}"
                             f"has a strategy {name!r}")
    base = path.parent
    for i, text in enumerate(workloads):
        _check_workload_file(text, base, f"{where}: workloads[{i}]")
    targets = []
    for i, item in enumerate(data["targets"]):
        if isinstance(item, str):
            item = {"target": item}
        if not isinstance(item, dict):
            raise InputError(f"{where}: targets[{i}] must be a table with target = \"...\"")
        _check(item, _TARGET_KEYS, where, f"targets[{i}].")
        if "target" not in item:
            raise InputError(f"{where}: targets[{i}]: missing key 'target'")
        for key in ("budget", "deadline", "samples", "global_batch"):
            if key in item and not item[key] > 0:
                raise InputError(f"{where}: targets[{i}].{key} must be > 0, not {item[key]}")
        if "precision" in item and item["precision"] not in TARGET_PRECISIONS:
            raise InputError(f"{where}: targets[{i}].precision {item['precision']!r} (choose "
                             f"from {', '.join(TARGET_PRECISIONS)})")
        targets.append(TargetGoal(item["target"], _opt(item.get("budget")),
                                  _opt(item.get("deadline")), item.get("device"),
                                  _opt(item.get("samples")), item.get("precision"),
                                  item.get("global_batch"),
                                  _stack(item.get("stack", {}), f"{where}: targets[{i}]")))
    for key in ("samples", "steps", "repeats"):
        if key in data and not data[key] > 0:
            raise InputError(f"{where}: {key} must be > 0, not {data[key]}")
    results = data.get("results")
    return Project(
        name=data.get("name", path.parent.name or "project"), workloads=workloads,
        targets=tuple(targets), clusters=clusters, frameworks=frameworks,
        strategies=strategies, samples=float(data.get("samples", 1e7)),
        steps=int(data.get("steps", 20)), repeats=int(data.get("repeats", 3)),
        results=str((base / results).resolve()) if results else None, path=str(path),
        id=data.get("id"))


def _stack(value: dict[str, Any] | str, where: str) -> tuple[tuple[str, str | bool], ...]:
    """A target's ``stack``, checked as recommend's options are: a table, each key a
    mechanism, each value one of its choices (true or false for an overlap), and ``like``
    naming a stack they override; or a stack's name alone. A name is kept as ``like``
    and resolved, and checked, where the published stacks are known
    (``harness.validate.devices.resolve_stack``)."""
    table = {"like": value} if isinstance(value, str) else dict(value)
    like = table.pop("like", None)
    if like is not None and not isinstance(like, str):
        raise InputError(f"{where}.stack.like must be a stack's name, not {like!r}")
    return ((("like", like),) if like is not None else ()) + _mechanisms(table, where)


def _mechanisms(table: dict[str, Any], where: str) -> tuple[tuple[str, str | bool], ...]:
    for name, value in table.items():
        kind = (bool if name in SEARCH_DEFAULTS or isinstance(getattr(Layout(), name, None), bool)
                else str)
        if name in (*MECHANISMS, *SEARCH_DEFAULTS) and not isinstance(value, kind):
            raise InputError(f"{where}.stack.{name} must be "
                             f"{'true or false' if kind is bool else 'a string'}, not "
                             f"{value!r}")
    try:
        return tuple(sorted(stack_mechanisms(**table).items()))
    except ValueError as exc:
        raise InputError(f"{where}.stack: {exc}") from None


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def _check(data: dict[str, Any], keys: dict[str, tuple[type, ...]], where: str,
           prefix: str) -> None:
    for key, value in data.items():
        if key not in keys:
            raise InputError(f"{where}: unknown key {prefix + key!r} (choose from "
                             f"{', '.join(keys)})")
        if isinstance(value, bool) or not isinstance(value, keys[key]):
            kinds = " or ".join("number" if k in (int, float) else k.__name__
                                for k in keys[key] if k is not int or float not in keys[key])
            raise InputError(f"{where}: {prefix}{key} must be {kinds}, not {value!r}")


def _strings(values: list[Any], where: str, key: str) -> list[str]:
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{where}: {key}[{i}] must be a non-empty string, not {value!r}")
    return [v.strip() for v in values]


def _check_workload_file(text: str, base: Path, where: str) -> None:
    """A workload given as file.py:callable must name a file that is there (relative to the
    project file); other forms are resolved when they run."""
    from workloads.user import is_file_reference

    target, sep, _ = text.rpartition(":")
    if sep and is_file_reference(target):
        path = Path(target)
        if not (path if path.is_absolute() else base / path).is_file():
            raise InputError(f"{where}: workload file {target!r} does not exist (relative "
                             f"to {base})")


def resolved_workload(text: str, project: Project) -> str:
    """A workload file named relative to the project file, as the CLI would read it."""
    from workloads.user import is_file_reference

    target, sep, attr = text.rpartition(":")
    if sep and is_file_reference(target) and not Path(target).is_absolute():
        return f"{Path(project.path).parent / target}:{attr}"
    return text
