"""Quantities as people write and read them: durations, bytes, rates, counts, money.

Parsers and formatters live together so that a unit means one thing everywhere; how a number,
a prefix and a unit are written is read by workloads.quantities, for every grammar. Each
context keeps its own meaning where users expect it: a `--cluster` rate is bits per second and
a bare number is bits (`rate=25G` is 25 Gbit/s, tc's convention), while a `--topology`
bandwidth needs its unit and is returned in bytes per second (`300GB/s`, `400Gbit`). Every
parse error is a SpecError, one line naming the bad value and what is allowed.
"""

from __future__ import annotations

import math
import re

from harness.core.errors import SpecError
from workloads.quantities import NUMBER, read_duration, read_number, read_size, scale


def finite_number(value: object) -> bool:
    """A real, finite number (a bool is not one): what a figure must be to be compared,
    ranked or shown as a number rather than as missing."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def three_figures(value: float) -> str:
    """Three significant figures, and no e-notation from 1 up: '4.56', '123', '1,230'."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    for factor, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= factor:
            return f"{three_figures(seconds / factor)} {unit}"
    return f"{seconds:.3g} s"


def format_bytes(n: float) -> str:
    if n >= 1e12:
        return f"{three_figures(n / 1e12)} TB"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def format_count(n: float) -> str:
    """'25,000', '10 million', '1.5 billion': a count of samples as a sentence gives it."""
    for factor, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if n >= factor:
            return f"{three_figures(n / factor)} {word}"
    return f"{n:,.0f}"


def format_ratio(ratio: float) -> str:
    """A ratio of at least 1 as people write it: '1.8x', '25x', '120x', '1,200x' (two
    significant figures; never '1x', never e-notation)."""
    rounded = float(f"{ratio:.2g}")
    return f"{rounded:.1f}x" if rounded < 10 else f"{rounded:,.0f}x"


def format_fraction(fraction: float) -> str:
    """A share as a percentage people read: '40%', '2%', and below 1% two significant
    figures ('0.029%'), never a '0%' that is not nothing."""
    if fraction == 0 or abs(fraction) >= 0.01:
        return f"{fraction:.0%}"
    percent = fraction * 100
    return f"{percent:.{1 - math.floor(math.log10(abs(percent)))}f}%"


# Below this ratio a difference reads as a percentage ('40% slower'); from it on, as a
# multiple ('1.8x slower'): '523% slower' for a 6.2x difference is what nobody writes.
PERCENT_BELOW = 1.5


def compare(ratio: float, more: str, less: str) -> str:
    """``ratio`` = this / that, in words: '4% slower', '6.2x slower', '1.8x faster' (with
    ``more`` = 'slower', ``less`` = 'faster'). Percentages are of ``that`` for ``more`` and
    of ``this`` for ``less``, so that '40% faster' and '40% slower' are the same ratio's two
    readings."""
    if not math.isfinite(ratio) or ratio <= 0:
        return f"{more} (by an unknown factor)"
    word, r = (more, ratio) if ratio >= 1 else (less, 1 / ratio)
    if r >= PERCENT_BELOW:
        return f"{format_ratio(r)} {word}"
    pct = round((r - 1) * 100)
    return f"under 1% {word}" if pct < 1 else f"{pct}% {word}"


def times_the(ratio: float, what: str) -> str:
    """'120x the cost', '30% more cost', '40% less cost' (``ratio`` = this / that)."""
    if not math.isfinite(ratio) or ratio <= 0:
        return f"an unknown multiple of the {what}"
    if ratio >= PERCENT_BELOW:
        return f"{format_ratio(ratio)} the {what}"
    if ratio >= 1:
        pct = round((ratio - 1) * 100)
        return f"the same {what}" if pct < 1 else f"{pct}% more {what}"
    if 1 / ratio >= PERCENT_BELOW:
        return f"{format_ratio(1 / ratio)} less {what}"
    pct = round((1 - ratio) * 100)
    return f"the same {what}" if pct < 1 else f"{pct}% less {what}"


def format_rate(bits: float) -> str:
    if not math.isfinite(bits):
        return ""
    for factor, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bits >= factor:
            return f"{bits / factor:.3g} {unit}"
    return f"{bits:g} bit/s"


def format_usd(value: float) -> str:
    """Cents where they matter; whole dollars from $10,000 on (a table column stays narrow)."""
    if not math.isfinite(value):
        return "-"
    if 0 < value < 0.005:
        return "under $0.01"  # never '$0.00' for something that costs money
    return f"${value:,.0f}" if value >= 1e4 else f"${value:,.2f}"


# Parsing

# The most devices any spec may describe (a topology, a count): far above any real cluster,
# low enough that a typo cannot ask the simulator for billions of devices.
MAX_DEVICES = 1 << 17

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|b|byte|bytes)?(?:/s)?\s*$", re.I)
_CLI_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)\s*$", re.I)


def parse_rate_bits(text: str) -> float:
    """'400mbit', '1gbit', '100Mbps', '25G' -> bits per second (tc's units, decimal)."""
    m = _RATE.match(text)
    if not m:
        raise SpecError(f"bad rate {text!r} (use e.g. 400mbit, 1gbit, 25gbit)")
    value = float(m.group(1)) * scale(m.group(2))
    unit = (m.group(3) or "bit").lower()
    if unit in ("byte", "bytes") or m.group(3) == "B":
        value *= 8
    if value <= 0:
        raise SpecError(f"rate {text!r} must be > 0")
    return value


def parse_size_bytes(text: str) -> int:
    """'1KiB', '256MiB', '4096', '1M' -> bytes (K/M/G decimal, Ki/Mi/Gi binary)."""
    m = _CLI_SIZE.match(text)
    if not m:
        raise SpecError(f"bad size {text!r} (use e.g. 1KiB, 64MiB, 4096)")
    value = int(float(m.group(1)) * scale(m.group(2) + m.group(3)))
    if value <= 0:
        raise SpecError(f"size {text!r} must be > 0")
    return value


def parse_size_range(text: str) -> tuple[int, int]:
    """'1KiB:256MiB' -> (low, high) in bytes."""
    low, sep, high = text.partition(":")
    if not sep:
        raise SpecError(f"bad size range {text!r} (use MIN:MAX, e.g. 1KiB:256MiB)")
    lo, hi = parse_size_bytes(low), parse_size_bytes(high)
    if lo > hi:
        raise SpecError(f"size range {text!r} has MIN > MAX")
    return lo, hi


_BANDWIDTH = re.compile(
    NUMBER + r"\s*(?P<prefix>[kKmMgGtT]i?)?(?P<unit>bits?|b|B|[bB]ytes?)(?P<per>/s|ps)?")
BANDWIDTH_HELP = "use e.g. 100Gbit, 25Gbps, 300GB/s"
DURATION_HELP = "use e.g. 5us, 1.5ms, 0"


def parse_bandwidth(text: str) -> float:
    """'400Gbit' -> 5e10 bytes/s; 'b'/'bit'/'bps' are bits, 'B'/'byte'/'Bps' bytes."""
    m = _BANDWIDTH.fullmatch(text.strip())
    if not m:
        raise SpecError(f"bad bandwidth {text!r} ({BANDWIDTH_HELP})")
    value = float(m.group("num")) * scale(m.group("prefix") or "")
    if m.group("unit") in ("b", "bit", "bits"):
        value /= 8
    if not (math.isfinite(value) and 0 < value < 1e18):
        raise SpecError(f"bandwidth {text!r} must be > 0 and finite ({BANDWIDTH_HELP})")
    return value


def parse_duration(text: str) -> float:
    """'5us' -> 5e-6 seconds; a bare '0' is zero."""
    value = read_duration(text, bare_seconds=False)
    if value is None:
        raise SpecError(f"bad latency {text!r} ({DURATION_HELP})")
    if not (math.isfinite(value) and 0 <= value <= 1e3):
        raise SpecError(f"latency {text!r} must be between 0 and 1000 s")
    return value


def parse_count(text: str, what: str, low: int = 1, high: int = MAX_DEVICES) -> int:
    if not re.fullmatch(r"\d{1,9}", text.strip()):
        raise SpecError(f"{what}={text!r} is not a whole number (use e.g. {what}=8)")
    value = int(text)
    if not low <= value <= high:
        raise SpecError(f"{what}={value} must be from {low} to {high}")
    return value


def parse_ratio(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{what}={text!r} is not a number (use e.g. {what}=2)") from None
    if not (math.isfinite(value) and 1 <= value <= 1e6):
        raise SpecError(f"{what}={text!r} must be a number >= 1")
    return value


def parse_kv(text: str, kind: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; an empty text is no options. One grammar for every
    KEY=VALUE list (`--cluster`, `--topology`, `--profile`, presets' overrides)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(f"bad {kind} option {part!r} (use key=value)")
        if key in out:
            raise SpecError(f"{kind} option {key!r} given twice")
        out[key] = value
    return out



parse_options = parse_kv  # the topology grammar's name for it




def parse_size(text: str, what: str = "size") -> float:
    """'25MiB' -> 26214400 bytes, '100MB' -> 1e8, '4096' -> 4096 (K M G T decimal, Ki..
    binary)."""
    value = read_size(text)
    if value is None:
        raise SpecError(f"bad {what} {text!r} (use e.g. 100MB, 25MiB, 4096)")
    if not (math.isfinite(value) and 0 <= value < 1e18):
        raise SpecError(f"{what} {text!r} must be >= 0 and finite")
    return value


def parse_number(text: str, what: str, low: float = 0.0, high: float = 1e30) -> float:
    """'25M' -> 2.5e7, '3e9' -> 3e9, '1.5G' -> 1.5e9 (K M G T P decimal)."""
    value = read_number(text)
    if value is None:
        raise SpecError(f"{what}={text!r} is not a number (use e.g. {what}=25M or 3e9)")
    if not (math.isfinite(value) and low <= value <= high):
        raise SpecError(f"{what}={text!r} must be from {low:g} to {high:g}")
    return value
