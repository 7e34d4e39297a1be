"""Shared test fixtures: keep frameworks quiet and results in a temporary directory."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setenv("STRATBENCH_RESULTS", str(root))
    return root


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
