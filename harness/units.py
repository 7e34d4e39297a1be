"""Numbers as people read them: durations, bytes, rates, money (terminal, report, reasons)."""

from __future__ import annotations

import math


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    for scale, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


def format_bytes(n: float) -> str:
    if n >= 1e12:
        return f"{n / 1e12:.3g} TB"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def format_rate(bits: float) -> str:
    if not math.isfinite(bits):
        return ""
    for scale, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:g} bit/s"


def format_usd(value: float) -> str:
    """Cents where they matter; whole dollars from $10,000 on (a table column stays narrow)."""
    if not math.isfinite(value):
        return "-"
    return f"${value:,.0f}" if value >= 1e4 else f"${value:,.2f}"
