"""A framework module imported when a test first uses it, not when pytest collects its file.

Collecting imports every test module in every pytest process (each xdist worker, and the
heavy phase, which runs no framework in-process): a module-level `import tensorflow` costs
each of them 7.6 s and `import torch` 3.9 s. Where the framework is missing, the test that
uses it is skipped, as `pytest.importorskip` at module level would have skipped them all.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


class Lazy:
    """Stands for the module `name`: an attribute read imports it, once."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            if attr.startswith("_"):  # pytest's collection probes (_mock_name, __wrapped__)
                raise AttributeError(attr)
            self._module = pytest.importorskip(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"Lazy({self._name!r})"


def module(name: str) -> Any:
    """`name`, imported at first use (typed Any: it stands for the module's attributes)."""
    return Lazy(name)
