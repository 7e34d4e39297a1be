"""Small inline-SVG charts (no plotting library, no external fetch): lines and scatter, with
linear or log axes. Every text that reaches the SVG is escaped here; the result is Markup.
Every data point carries an SVG <title>: the browser shows its values on hover, without a
script."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from markupsafe import Markup

from harness.core.units import three_figures

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 30, 50


@dataclass
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    lows: Sequence[float] = field(default_factory=tuple)  # optional error bars
    highs: Sequence[float] = field(default_factory=tuple)
    flags: Sequence[bool] = field(default_factory=tuple)  # points drawn as a red ring
    marks: Sequence[bool] = field(default_factory=tuple)  # points drawn as a black ring
    tips: Sequence[str] = field(default_factory=tuple)  # hover text per point (else values)


def _finite(v: float, log: bool) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and (v > 0 or not log)


def _ticks(lo: float, hi: float, log: bool, integer: bool = False, base2: bool = False
           ) -> list[float]:
    if log and base2:  # device counts: 1, 2, 4, 8, ... (every other power when many)
        a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
        return [2.0 ** e for e in range(a, b + 1, max(1, (b - a + 7) // 8))]
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        step: int = max(1, (b - a) // 6)
        mults = (1, 2, 5) if b - a <= 2 else (1,)
        return [m * 10.0 ** e for e in range(a, b + 1, step) for m in mults]
    if hi == lo:
        return [lo]
    raw = (hi - lo) / 5
    if integer:
        raw = max(1.0, raw)
    mag = 10.0 ** math.floor(math.log10(raw))
    tick: float = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    start = math.floor(lo / tick) * tick
    return [start + i * tick for i in range(int((hi - start) / tick) + 2)
            if start + i * tick <= hi + tick * 1e-9]


def _pad(lo: float, hi: float, share: float = 0.04) -> tuple[float, float]:
    """A log axis widened by ``share`` of its span on each side."""
    f = (hi / lo) ** share
    return lo / f, hi * f


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:g}"


def chart(series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
          logx: bool = False, logy: bool = False, lines: bool = True,
          diagonal: bool = False, integer_x: bool = False, log2x: bool = False) -> Markup:
    """One chart as an <svg> element. Empty data gives a short 'no data' note instead.
    ``log2x``: ticks at powers of 2 on a log x axis (device counts)."""
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys, strict=False)
           if _finite(x, logx) and _finite(y, logy)]
    pts += [(x, v) for s in series
            for x, v in [*zip(s.xs, s.lows, strict=False), *zip(s.xs, s.highs, strict=False)]
            if _finite(x, logx) and _finite(v, logy)]
    if not pts:
        return Markup(f'<p class="nodata">{escape(title)}: no data</p>')
    xlo, xhi = min(p[0] for p in pts), max(p[0] for p in pts)
    ylo, yhi = min(p[1] for p in pts), max(p[1] for p in pts)
    if diagonal:
        xlo = ylo = min(xlo, ylo)
        xhi = yhi = max(xhi, yhi)
    if not logy and ylo > 0:
        ylo = 0.0
    if xlo == xhi:
        xlo, xhi = (xlo / 2, xhi * 2) if logx else (xlo - 1, xhi + 1)
    if ylo == yhi:
        ylo, yhi = (ylo / 2, yhi * 2) if logy else (ylo - 1, yhi + 1)
    if logx:  # a little room, so points at the ends do not sit on the frame
        xlo, xhi = _pad(xlo, xhi)
    if logy:
        ylo, yhi = _pad(ylo, yhi)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def tx(v: float) -> float:
        f = ((math.log10(v) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo)) if logx
             else (v - xlo) / (xhi - xlo))
        return LEFT + f * pw

    def ty(v: float) -> float:
        f = ((math.log10(v) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) if logy
             else (v - ylo) / (yhi - ylo))
        return TOP + ph - f * ph

    out = [f'<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">',
           f"<title>{escape(title)}</title>",
           f'<text x="8" y="18" class="ctitle">{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" class="frame"/>']
    for t in _ticks(xlo, xhi, logx, integer_x, log2x and logx):
        if xlo <= t <= xhi * (1 + 1e-9):
            x = tx(t)
            out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" '
                       f'class="grid"/><text x="{x:.1f}" y="{TOP + ph + 15}" '
                       f'text-anchor="middle">{escape(_fmt(t))}</text>')
    for t in _ticks(ylo, yhi, logy):
        if ylo <= t <= yhi * (1 + 1e-9):
            y = ty(t)
            out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" '
                       f'class="grid"/><text x="{LEFT - 5}" y="{y + 4:.1f}" '
                       f'text-anchor="end">{escape(_fmt(t))}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
               f"{escape(xlabel)}</text>")
    out.append(f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + ph / 2})">{escape(ylabel)}</text>')
    if diagonal:
        out.append(f'<line x1="{tx(xlo):.1f}" y1="{ty(ylo):.1f}" x2="{tx(xhi):.1f}" '
                   f'y2="{ty(yhi):.1f}" class="diag"/>')
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        good = [(x, y, j) for j, (x, y) in enumerate(zip(s.xs, s.ys, strict=False))
                if _finite(x, logx) and _finite(y, logy)]
        if lines and len(good) > 1:
            path = " ".join(f"{tx(x):.1f},{ty(y):.1f}" for x, y, _ in sorted(good))
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"/>')
        for x, y, j in good:
            if j < len(s.lows) and j < len(s.highs) and _finite(s.lows[j], logy) \
                    and _finite(s.highs[j], logy):
                out.append(f'<line x1="{tx(x):.1f}" y1="{ty(s.lows[j]):.1f}" x2="{tx(x):.1f}" '
                           f'y2="{ty(s.highs[j]):.1f}" stroke="{color}"/>')
            # a tick may be compact (2e7); a point's own values are read: three figures
            tip = (s.tips[j] if j < len(s.tips) and s.tips[j]
                   else f"{s.label}: {xlabel} {three_figures(x)}, {ylabel} {three_figures(y)}")
            out.append(f'<circle cx="{tx(x):.1f}" cy="{ty(y):.1f}" r="3.5" fill="{color}" '
                       f'class="pt"><title>{escape(tip)}</title></circle>')
            if j < len(s.marks) and s.marks[j]:
                out.append(f'<circle cx="{tx(x):.1f}" cy="{ty(y):.1f}" r="8" fill="none" '
                           f'stroke="#000" stroke-width="2" class="pick">'
                           f"<title>{escape(tip)}</title></circle>")
            if j < len(s.flags) and s.flags[j]:
                out.append(f'<circle cx="{tx(x):.1f}" cy="{ty(y):.1f}" r="8" fill="none" '
                           f'stroke="#d00" stroke-width="2" class="flag">'
                           f"<title>{escape(tip)}</title></circle>")
        ly = TOP + 12 + i * 16
        if ly < HEIGHT - 10:
            out.append(f'<rect x="{LEFT + pw + 10}" y="{ly - 8}" width="10" height="10" '
                       f'fill="{color}"/><text x="{LEFT + pw + 24}" y="{ly + 1}" '
                       f'class="legend">{escape(s.label[:28])}</text>')
    out.append("</svg>")
    return Markup("".join(out))
