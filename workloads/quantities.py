"""How a quantity is written: a number, an SI or binary prefix, a unit. The one reader of them.

Every spec language reads its numbers here: the profile grammar beside it (workloads import
nothing from harness) and harness.core.units, which wraps these readers with each context's
meaning and error (a `--cluster` rate is bits, a `--topology` bandwidth needs its unit).
Readers return None for text that is not such a quantity; their callers word the error.
"""

from __future__ import annotations

import re

#: A decimal number: 25, 2.5, .5, 1e9, 1.5E-3.
NUMBER = r"(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
#: SI prefixes, decimal everywhere (k M G T P); 'Ki', 'Mi', ... are binary.
PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
BINARY = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

_COUNT = re.compile(NUMBER + r"\s*(?P<prefix>[kKmMgGtTpP])?")
_DURATION = re.compile(NUMBER + r"\s*(?P<unit>s|ms|us|µs|ns)?")
_SIZE = re.compile(NUMBER + r"\s*(?P<prefix>[kKmMgGtT]i?)?(?P<unit>B|[bB]ytes?)?")


def scale(prefix: str) -> float:
    """'k' -> 1e3, 'Ki' -> 1024, '' -> 1 (any case)."""
    prefix = prefix.lower()
    return float(BINARY[prefix[:-1]]) if prefix.endswith("i") else PREFIX[prefix]


def read_number(text: str) -> float | None:
    """'25M' -> 2.5e7, '3e9' -> 3e9, '1.5G' -> 1.5e9 (k M G T P decimal)."""
    m = _COUNT.fullmatch(text.strip())
    return float(m.group("num")) * scale(m.group("prefix") or "") if m else None


def read_duration(text: str, bare_seconds: bool = True) -> float | None:
    """'120ms' -> 0.12; a bare number is seconds where ``bare_seconds``, else only '0'."""
    m = _DURATION.fullmatch(text.strip())
    if not m or (m.group("unit") is None and not bare_seconds and float(m.group("num"))):
        return None
    return float(m.group("num")) * SECONDS[m.group("unit") or "s"]


def read_size(text: str) -> float | None:
    """'25MiB' -> 26214400, '100MB' -> 1e8, '4096' -> 4096 bytes (Ki.. binary)."""
    m = _SIZE.fullmatch(text.strip())
    return float(m.group("num")) * scale(m.group("prefix") or "") if m else None
