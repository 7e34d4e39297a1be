"""Pick a framework's model module lazily, and say plainly when that framework is missing.

`import tensorflow` / `import torch` happen only inside workloads.tf_models and
workloads.torch_models; this is the one place that imports either on demand, so a PyTorch-only
install never touches TensorFlow (and the other way round).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from workloads.spec import FRAMEWORKS, WorkloadError, choices_message

_MODULES = {"tf": "workloads.tf_models", "torch": "workloads.torch_models"}
_PACKAGES = {"tf": ("tensorflow", "keras"), "torch": ("torch",)}


def framework_missing(name: str) -> str | None:
    """None if `name`'s packages are installed, else the reason (for an 'unavailable' row).

    Looks for the packages without importing them, so it is cheap.
    """
    if name not in FRAMEWORKS:
        raise WorkloadError(choices_message("framework", name, FRAMEWORKS))
    missing = [p for p in _PACKAGES[name] if importlib.util.find_spec(p) is None]
    if not missing:
        return None
    return f"{', '.join(missing)} not installed (pip install 'stratbench[{name}]')"


def framework_module(name: str) -> ModuleType:
    """workloads.tf_models or workloads.torch_models; WorkloadError if not installed."""
    reason = framework_missing(name)
    if reason:
        raise WorkloadError(f"framework {name!r} unavailable: {reason}")
    return importlib.import_module(_MODULES[name])
