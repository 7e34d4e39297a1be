"""Shared test fixtures: keep frameworks quiet and results in a temporary directory."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock
from hypothesis import settings
from procs import SESSION_MARKER, session_case_processes

T = TypeVar("T")

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Property tests check answers, not speed (speed is for benchmarks): on two shared cores a
# wall-clock deadline fails an example that first imports scipy, as test_stats's did once in
# CI (742 ms against hypothesis's 200 ms), never a wrong answer.
settings.register_profile("stratbench", deadline=None)
settings.load_profile("stratbench")
os.environ[SESSION_MARKER] = f"{os.getpid()}-{os.urandom(4).hex()}"


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setenv("STRATBENCH_RESULTS", str(root))
    return root


def once_per_run(tmp_path_factory, worker_id: str, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` once a test run, however many xdist workers ask: the first pickles its
    answer under the run's shared temporary folder, the others wait on a lock and read it
    (a session fixture alone is computed once per worker)."""
    if worker_id == "master":
        return compute()
    path = tmp_path_factory.getbasetemp().parent / f"{name}.pickle"
    with FileLock(f"{path}.lock"):
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session", autouse=True)
def probe_cache(tmp_path_factory, worker_id):
    """One framework probe per test run, shared by every command the tests start
    (``$STRATBENCH_PROBE_CACHE``): each would import TensorFlow or torch again for it."""
    from harness.run.environment import PROBE_CACHE_ENV

    base = tmp_path_factory.getbasetemp()
    folder = (base if worker_id == "master" else base.parent) / "probes"
    os.environ.setdefault(PROBE_CACHE_ENV, str(folder))
    yield folder


@pytest.fixture(scope="session")
def device_comparison(tmp_path_factory, worker_id):
    """The device corpus against the device model (`devices.compare()`, the slowest of the
    published comparisons), computed once a test run: tests read it, none changes it."""
    from harness.validate import devices

    return once_per_run(tmp_path_factory, worker_id, "device_comparison", devices.compare)


@pytest.fixture(scope="session")
def system_fits(tmp_path_factory, worker_id):
    """Each system file's efficiency refitted on the run it cites
    (`devices.system_file_fits()`, 27 s), once a test run."""
    from harness.validate import devices

    return once_per_run(tmp_path_factory, worker_id, "system_fits", devices.system_file_fits)


@pytest.fixture(scope="session")
def layout_picks(tmp_path_factory, worker_id):
    """The layout search on every published model-parallel run, computed once a test run."""
    from harness.recommend import layout_check

    return once_per_run(tmp_path_factory, worker_id, "layout_picks", lambda: [
        layout_check.check(row) for row in layout_check.model_parallel_rows()])


@pytest.fixture(scope="session")
def emulated_validations(tmp_path_factory, worker_id):
    """Every checked-in emulated campaign scored by `validate` (docs/VALIDATION.md's
    sections), once a test run, by folder name; each run is predicted with the cores it
    recorded, so the machine's own count does not move them."""
    from harness.docs.validation import emulated_tables

    root = Path(__file__).resolve().parent.parent / "validation"
    return once_per_run(tmp_path_factory, worker_id, "emulated_validations",
                        lambda: emulated_tables(root))


def _cuda_available() -> bool:
    import shutil

    return shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config, items):
    """Long tests first (xdist hands tests out in this order: a long one left for last keeps
    one core busy while the other idles); GPU tests run only where a GPU is; everything else
    always runs (CI runs heavy ones)."""
    items.sort(key=lambda item: "long" not in item.keywords)  # stable: the rest as written
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
    """Once, at the end of the run: no test may leave processes or namespaces behind. A
    session that only collected ran none, and the namespaces then on the machine are another
    session's (test_layers collects beside running tests)."""
    if session.config.option.collectonly:
        return
    leftovers = _leftovers()
    if leftovers:
        print("\nleft behind by the tests:\n  " + "\n  ".join(leftovers))
        session.exitstatus = 1
