"""What a model costs in memory, measured: the peak resident set gained from building it.

Peak RSS alone counts the interpreter and the framework's libraries (hundreds of MB) as if
they were the model. Linux lets a process reset its own high-water mark (``clear_refs``
value 5, since 4.0). A runner notes its RSS before building the model, resets the
high-water mark once the model is built and wrapped (so the builder's temporaries do not
count, the model's resident state does), and reads the new peak (``VmHWM``) after training:
the difference is parameters, gradients, optimizer state, activations and the framework's
working memory, nothing loaded before. Torch processes run with one malloc arena
(harness/launch/placement.TORCH_ENV): with one per allocating thread, the rise varied by
up to a fifth from run to run with the same model.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> float | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1]) * 1024  # kB
    except OSError:
        return None
    return None


def current() -> float | None:
    """This process's resident memory now, or None where /proc cannot say."""
    return _status_bytes("VmRSS")


def _trim() -> None:
    """Give freed heap memory back to the system (glibc keeps freed blocks below its mmap
    threshold, up to 32 MB each, resident): else a builder's freed temporaries count."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def reset_peak() -> bool:
    """Reset this process's peak RSS to its current RSS, freed memory given back first;
    False where the system does not allow it (then nothing is reported)."""
    _trim()
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_since(baseline: float | None, was_reset: bool = True) -> float | None:
    """Bytes the peak RSS rose above ``baseline`` (from ``current``) since ``reset_peak``."""
    peak = _status_bytes("VmHWM")
    if baseline is None or peak is None or not was_reset:
        return None
    return max(0.0, peak - baseline)
