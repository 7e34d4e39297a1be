"""User workloads: a Keras model or torch module the user brings, with its data and loss.

A user points stratbench at a callable returning a `UserWorkload`, either by reference
(`pkg.module:callable` or `path/to/file.py:callable`) or by a Python entry point in the group
`stratbench.workloads` (its name is then enough). Everything is validated here so a mistake
ends as one clear `WorkloadError` line, never a traceback deep inside a runner.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.spec import FRAMEWORKS, WorkloadError, WorkloadSpec, choices_message

ENTRY_POINT_GROUP = "stratbench.workloads"


@dataclass(frozen=True)
class UserWorkload:
    """How to build, feed and score a user's model (the framework's own objects inside).

    build_model(seed) -> keras.Model | torch.nn.Module
    make_batch(step, batch_size, seed) -> batch (anything loss_fn accepts; numpy advised,
        deterministic in its arguments so that workers can each take their shard)
    loss_fn(model, batch) -> scalar loss tensor of the model's framework
    """

    name: str
    framework: str
    build_model: Callable[[int], Any]
    make_batch: Callable[[int, int, int], Any]
    loss_fn: Callable[[Any, Any], Any]
    batch_size: int = 32
    flops_per_sample: float | None = None  # training FLOPs per sample, if the user knows
    sparsity: float = 1.0  # fraction of gradient entries a step touches, if known
    # Parameters, if the user declares them: with flops_per_sample, enough to simulate and
    # recommend before any run (after one run, the run's own count is used).
    params: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise WorkloadError(f"user workload name must be a non-empty string, not "
                                f"{self.name!r}")
        if self.framework not in FRAMEWORKS:
            raise WorkloadError(choices_message(f"framework for user workload {self.name!r}",
                                                self.framework, FRAMEWORKS))
        for field in ("build_model", "make_batch", "loss_fn"):
            if not callable(getattr(self, field)):
                raise WorkloadError(f"user workload {self.name!r}: {field} must be callable, "
                                    f"not {type(getattr(self, field)).__name__}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) \
                or self.batch_size < 1:
            raise WorkloadError(f"user workload {self.name!r}: batch_size must be an int >= 1, "
                                f"not {self.batch_size!r}")
        if self.flops_per_sample is not None and not self.flops_per_sample > 0:
            raise WorkloadError(f"user workload {self.name!r}: flops_per_sample must be > 0, "
                                f"not {self.flops_per_sample!r}")
        if self.params is not None and (isinstance(self.params, bool)
                                        or not isinstance(self.params, int) or self.params < 1):
            raise WorkloadError(f"user workload {self.name!r}: params must be an int >= 1, "
                                f"not {self.params!r}")
        if not 0 < self.sparsity <= 1:
            raise WorkloadError(f"user workload {self.name!r}: sparsity must be in (0, 1], "
                                f"not {self.sparsity!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise WorkloadError(f"workload file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"stratbench_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise WorkloadError(f"importing {str(path)!r} failed: {type(exc).__name__}: "
                            f"{_first_line(exc)}") from exc
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise WorkloadError(f"cannot import module {name!r}: {type(exc).__name__}: "
                            f"{_first_line(exc)}") from exc


def is_file_reference(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _call(factory: Any, ref: str) -> UserWorkload:
    if isinstance(factory, UserWorkload):
        return factory
    if not callable(factory):
        raise WorkloadError(f"workload {ref!r} is a {type(factory).__name__}, not a callable "
                            "returning a UserWorkload")
    try:
        result = factory()
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(f"workload {ref!r} raised {type(exc).__name__}: "
                            f"{_first_line(exc)}") from exc
    if not isinstance(result, UserWorkload):
        raise WorkloadError(f"workload {ref!r} returned {type(result).__name__}, expected a "
                            "workloads.UserWorkload(name, framework, build_model, make_batch, "
                            "loss_fn, ...)")
    return result


def load_user_workload(ref: str) -> UserWorkload:
    """'pkg.module:callable' or 'path/to/file.py:callable' -> the UserWorkload it returns."""
    target, sep, attr = ref.strip().rpartition(":")
    if not sep or not target or not attr:
        raise WorkloadError(f"bad workload reference {ref!r} (use module:callable or "
                            "path/to/file.py:callable)")
    module = _import_file(Path(target)) if is_file_reference(target) else _import_module(target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"{target!r} has no attribute {attr!r} (workload {ref!r})")
        obj = getattr(obj, part)
    return _call(obj, ref)


@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    """The `stratbench.workloads` entry points, read once a process: finding them reads every
    installed distribution's metadata (14 ms here), and a name that is no built-in, known or
    file workload is looked up here each time a simulation resolves it."""
    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def entry_point_names() -> list[str]:
    """Names of installed workloads registered under the `stratbench.workloads` group."""
    return sorted({ep.name for ep in _entry_points()})


def load_entry_point(name: str) -> UserWorkload:
    """The UserWorkload of an installed entry point (WorkloadError lists the known ones)."""
    for ep in _entry_points():
        if ep.name == name:
            try:
                factory = ep.load()
            except Exception as exc:
                raise WorkloadError(f"entry point {name!r} ({ep.value}) failed to load: "
                                    f"{type(exc).__name__}: {_first_line(exc)}") from exc
            return _call(factory, f"{name} ({ep.value})")
    raise WorkloadError(choices_message("workload entry point", name,
                                        entry_point_names() or ["none installed"]))


def describe_user_workload(workload: UserWorkload, seed: int = 0) -> WorkloadSpec:
    """A WorkloadSpec for a user workload: params counted from the built model.

    Imports the workload's framework (through workloads.frameworks), builds the model and,
    where the framework needs it (an unbuilt Keras model), runs one forward pass.
    """
    from workloads.frameworks import framework_module

    backend = framework_module(workload.framework)
    try:
        model = workload.build_model(seed)
        params = backend.count_params(model, workload)
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(f"user workload {workload.name!r}: building or running the model "
                            f"failed: {type(exc).__name__}: {_first_line(exc)}") from exc
    return WorkloadSpec(
        family="user", size="", task="user", batch_size=workload.batch_size, params=params,
        flops_per_sample=workload.flops_per_sample, sparsity=workload.sparsity,
        frameworks=(workload.framework,), given_name=workload.name,
    )
