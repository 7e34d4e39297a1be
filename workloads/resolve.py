"""One entry for the CLI's `--workload TEXT`: built-in, profile, user reference or entry point.

    mlp:S                           built-in family and size -> WorkloadSpec
    profile:params=25e6,...         numbers only -> WorkloadSpec (family profile)
    pkg.module:make / dir/f.py:make user callable -> UserWorkload
    resnet50                        known model (workloads.known), numbers only -> WorkloadSpec
    transformer:layers=..,hidden=.. a transformer by its dimensions (workloads.dims) -> the same
    myworkload                      entry point in group stratbench.workloads -> UserWorkload

A known model's name wins over an entry point of the same name.
"""

from __future__ import annotations

from workloads.catalog import parse_workload
from workloads.hf import dims_of
from workloads.known import get_known, known_key, known_names
from workloads.profile import PREFIX, parse_profile
from workloads.spec import FAMILIES, SIZES, WorkloadError, WorkloadSpec
from workloads.user import (
    UserWorkload,
    entry_point_names,
    is_file_reference,
    load_entry_point,
    load_user_workload,
)

Workload = WorkloadSpec | UserWorkload


def _looks_builtin(target: str, attr: str) -> bool:
    """'mlp:S', 'foo:S' (a mistyped family): not a module path with a size-like attribute."""
    if target.lower() in FAMILIES:
        return True
    return attr.upper() in SIZES and "." not in target and not is_file_reference(target)


def resolve_workload(text: str) -> Workload:
    """The workload `text` names; WorkloadError (one line) if it names none."""
    text = text.strip()
    if text.startswith(PREFIX):
        return parse_profile(text)[0]  # what it states beside: profile.stated_by
    if dims_of(text) is not None:
        return get_known(text).spec()
    target, sep, attr = text.rpartition(":")
    if sep:
        if _looks_builtin(target, attr):
            return parse_workload(text)
        return load_user_workload(text)
    if known_key(text) in known_names():
        return get_known(text).spec()
    if text in entry_point_names():
        return load_entry_point(text)
    installed = ", ".join(entry_point_names()) or "none installed"
    raise WorkloadError(f"unknown workload {text!r} (use FAMILY:SIZE like mlp:S, a known "
                        f"model: {', '.join(known_names())}, "
                        f"profile:params=...,flops_per_sample=..., module:callable, "
                        f"file.py:callable, or an entry point: {installed})")


def numbers_only(workload: Workload) -> bool:
    """A workload no framework here can train (a known model, a transformer by its
    dimensions, a profile): recommended on described systems, never run."""
    return not isinstance(workload, UserWorkload) and not workload.frameworks
