"""Shared test fixtures: keep frameworks quiet and results in a temporary directory."""

from __future__ import annotations

import os

import pytest
from procs import SESSION_MARKER, session_case_processes

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ[SESSION_MARKER] = f"{os.getpid()}-{os.urandom(4).hex()}"


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setenv("STRATBENCH_RESULTS", str(root))
    return root


@pytest.fixture(scope="session")
def device_comparison():
    """The device corpus against the device model (`devices.compare()`, the slowest of the
    published comparisons), computed once a test run: tests read it, none changes it."""
    from harness.validate import devices

    return devices.compare()


@pytest.fixture(scope="session")
def layout_picks():
    """The layout search on every published model-parallel run, computed once a test run."""
    from harness.recommend import layout_check

    return [layout_check.check(row) for row in layout_check.model_parallel_rows()]


@pytest.fixture(scope="session")
def emulated_validations():
    """Every checked-in emulated campaign scored by `validate` (docs/VALIDATION.md's
    sections), once a test run, by folder name; each run is predicted with the cores it
    recorded, so the machine's own count does not move them."""
    from pathlib import Path

    from harness.docs.validation import emulated_tables

    return emulated_tables(Path(__file__).resolve().parent.parent / "validation")


def _cuda_available() -> bool:
    import shutil

    return shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where a GPU is; everything else always runs (CI runs heavy ones)."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _leftovers() -> list[str]:
    """Case processes and emulated hosts that outlived the tests that made them."""
    found = session_case_processes()
    try:
        from harness.launch import netns

        if netns.unavailable_reason() is None:
            found += [f"namespace {ns}" for ns in netns.leftovers()]
    except Exception as exc:  # the check itself must not hide a test result
        found.append(f"could not list namespaces: {exc}")
    return found


def pytest_sessionfinish(session, exitstatus):
    """Once, at the end of the run: no test may leave processes or namespaces behind."""
    leftovers = _leftovers()
    if leftovers:
        print("\nleft behind by the tests:\n  " + "\n  ".join(leftovers))
        session.exitstatus = 1
