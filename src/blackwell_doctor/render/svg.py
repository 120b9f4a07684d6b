"""The HTML reports' plots, drawn here as inline SVG: an x-y plot (lines, steps, points, a
shaded band; linear or log axes), a forest plot of intervals and horizontal bars.

Drawn on the server side rather than by a JavaScript plotting library: the page then needs
no script at all (its policy forbids every script, so nothing in a model id or a node name
can run even if it escaped escaping), weighs a few kilobytes, prints, and shows the same in
a browser that blocks scripts, with no third-party code to vendor, license and keep up to
date. Every series is a ``<g class="series" data-series="NAME">`` (a test counts them); a
point's ``<title>`` is its tooltip. Text is placed with :func:`render.html.esc` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from blackwell_doctor.render.html import esc

# Okabe and Ito's colour-blind safe palette (blue, vermillion, green, purple, orange, sky).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
GOOD, BAD, NEUTRAL = "#009E73", "#D55E00", "#6b6b6b"
# A line series draws a marker (with its tooltip) at each point up to this many points.
MAX_MARKERS = 200
# A forest plot's axis reaches this many times the largest change or band, no further.
FOREST_SPAN = 1.6

Kind = Literal["line", "step", "points", "linepoints", "dashed", "area"]


@dataclass(frozen=True)
class Series:
    """One series: ``points`` as (x, y); for ``area`` the outline of a filled polygon.
    ``tips`` (one per point) become the points' tooltips."""

    name: str
    points: Sequence[tuple[float, float]]
    kind: Kind
    colour: str
    tips: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class Axis:
    label: str
    log: bool = False
    low: float | None = None  # forced ends (else from the data)
    high: float | None = None


@dataclass(frozen=True)
class _Scale:
    low: float
    high: float
    start: float  # pixels
    end: float
    log: bool

    def __call__(self, v: float) -> float:
        if self.log:
            a, b, v = math.log10(self.low), math.log10(self.high), math.log10(v)
        else:
            a, b = self.low, self.high
        return self.start + (v - a) / (b - a) * (self.end - self.start)


def _finite(v: float) -> bool:
    return math.isfinite(v)


def _nice_step(span: float, target: int) -> float:
    raw = span / max(1, target)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _range(values: list[float], axis: Axis, ticks: int) -> tuple[float, float, list[float]]:
    """The axis' ends and its tick values."""
    if axis.log:
        positive = [v for v in values if v > 0]
        lo = axis.low if axis.low is not None else min(positive, default=1.0)
        hi = axis.high if axis.high is not None else max(positive, default=10.0)
        lo_d, hi_d = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        if hi_d == lo_d:
            hi_d += 1
        decades = [10.0**d for d in range(lo_d, hi_d + 1)]
        steps = (1, 2, 5) if hi_d - lo_d <= 3 else (1,)
        marks = [d * m for d in decades for m in steps if d * m <= 10.0**hi_d]
        return 10.0**lo_d, 10.0**hi_d, marks
    lo = axis.low if axis.low is not None else min(values, default=0.0)
    hi = axis.high if axis.high is not None else max(values, default=1.0)
    if axis.low is None and lo > 0 and lo < hi * 0.5:
        lo = 0.0  # start at 0 when the data come near it anyway
    if hi <= lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step(hi - lo, ticks)
    lo_t, hi_t = math.floor(lo / step) * step, math.ceil(hi / step) * step
    n = round((hi_t - lo_t) / step)
    return lo_t, hi_t, [lo_t + i * step for i in range(n + 1)]


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.10g}" if v == round(v, 2) else f"{v:.2f}"
    return f"{v:.3g}"


def _svg_open(width: int, height: int, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
    )


def _x_title(left: float, right: float, height: int, label: str) -> str:
    """The x axis's name, centred under the plot between ``left`` and ``right``."""
    return (
        f'<text x="{(left + right) / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        f"{esc(label)}</text>"
    )


def _x_ticks(sx: _Scale, ticks: Sequence[float], top: int, base: int, unit: str = "") -> list[str]:
    """A row plot's vertical grid line from ``top`` to ``base`` at each tick, and its label
    under ``base`` (with ``unit`` but at 0)."""
    out = []
    for t in ticks:
        px = sx(t)
        out.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{base}"/>'
            f'<text x="{px:.1f}" y="{base + 16}" text-anchor="middle">'
            f"{esc(tick_label(t))}{esc(unit) if t else ''}</text>"
        )
    return out


def _cut(label: str, chars: int) -> str:
    """A row's label as drawn: at most ``chars`` characters, an ellipsis where cut."""
    return label if len(label) <= chars else label[: chars - 1] + "…"


def _xy(x: float, y: float) -> str:
    return f"{x:.1f},{y:.1f}"


def xy_plot(
    series: Sequence[Series],
    x: Axis,
    y: Axis,
    *,
    title: str,
    width: int = 680,
    height: int = 300,
    hlines: Sequence[tuple[float, str]] = (),
) -> str:
    """Series against shared axes; ``hlines`` are labelled horizontal reference lines, drawn
    where they fall inside the data's range."""
    left, right, top, bottom = 64, 36, 12, 44

    def usable(p: tuple[float, float]) -> bool:
        return (
            _finite(p[0]) and _finite(p[1]) and (not x.log or p[0] > 0) and (not y.log or p[1] > 0)
        )

    pts = [p for s in series for p in s.points if usable(p)]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]  # a reference line outside the data is left out, not drawn
    x_lo, x_hi, x_ticks = _range(xs, x, 6)
    y_lo, y_hi, y_ticks = _range(ys, y, 5)
    sx = _Scale(x_lo, x_hi, left, width - right, x.log)
    sy = _Scale(y_lo, y_hi, height - bottom, top, y.log)
    out = [_svg_open(width, height, title)]
    for t in y_ticks:
        py = sy(t)
        out.append(
            f'<line class="grid" x1="{left}" x2="{width - right}" y1="{py:.1f}" y2="{py:.1f}"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{esc(tick_label(t))}</text>'
        )
    for t in x_ticks:
        px = sx(t)
        out.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{height - bottom}"/>'
        )
        out.append(
            f'<text x="{px:.1f}" y="{height - bottom + 16}" text-anchor="middle">'
            f"{esc(tick_label(t))}</text>"
        )
    out.append(
        f'<line class="axis" x1="{left}" x2="{width - right}" y1="{height - bottom}" '
        f'y2="{height - bottom}"/><line class="axis" x1="{left}" x2="{left}" y1="{top}" '
        f'y2="{height - bottom}"/>'
    )
    out.append(_x_title(left, width - right, height, x.label))
    out.append(
        f'<text transform="translate(14 {(top + height - bottom) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{esc(y.label)}</text>'
    )
    for value, label in hlines:
        if not y_lo <= value <= y_hi:
            continue
        py = sy(value)
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py:.1f}" y2="{py:.1f}" '
            'stroke="#a0a0a0" stroke-dasharray="2 3"/>'
            f'<text x="{width - right - 4}" y="{py - 4:.1f}" text-anchor="end">{esc(label)}</text>'
        )
    for s in series:
        out.append(_series(s, sx, sy, usable))
    out.append("</svg>")
    return "\n".join(out)


def _series(
    s: Series, sx: _Scale, sy: _Scale, usable: Callable[[tuple[float, float]], bool]
) -> str:
    kept = [(p, s.tips[i] if i < len(s.tips) else "") for i, p in enumerate(s.points) if usable(p)]
    head = f'<g class="series" data-series="{esc(s.name)}" data-kind="{s.kind}">'
    parts = [head]
    coords = [(sx(p[0]), sy(p[1])) for p, _ in kept]
    colour = esc(s.colour)
    if s.kind == "area" and coords:
        poly = " ".join(_xy(a, b) for a, b in coords)
        parts.append(
            f'<polygon points="{poly}" fill="{colour}" fill-opacity="0.15" stroke="none"/>'
        )
    if s.kind == "step" and coords:
        path = [f"M{_xy(*coords[0])}"]
        path += [f"H{x1:.1f}V{y1:.1f}" for x1, y1 in coords[1:]]
        parts.append(
            f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="1.8"/>'
        )
    if s.kind in ("line", "linepoints", "dashed") and len(coords) > 1:
        dash = ' stroke-dasharray="6 4"' if s.kind == "dashed" else ""
        poly = " ".join(_xy(a, b) for a, b in _decimated(coords))
        parts.append(
            f'<polyline points="{poly}" fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>'
        )
    if s.kind == "points" or (s.kind == "linepoints" and len(coords) <= MAX_MARKERS):
        for (cx, cy), (_, tip) in zip(coords, kept, strict=True):
            title = f"<title>{esc(tip)}</title>" if tip else ""
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}">{title}</circle>'
            )
    parts.append("</g>")
    return "".join(parts)


def _decimated(coords: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A long line (a week's soak in minutes) with, per pixel column, only its first, lowest,
    highest and last point, in order: the same picture, spikes kept, a bounded size."""
    if len(coords) <= 4 * MAX_MARKERS:
        return coords
    columns: dict[int, list[int]] = {}
    for i, (x, _) in enumerate(coords):
        columns.setdefault(int(x), []).append(i)
    keep: set[int] = set()
    for idx in columns.values():
        keep.update(
            (
                idx[0],
                idx[-1],
                min(idx, key=lambda i: coords[i][1]),
                max(idx, key=lambda i: coords[i][1]),
            )
        )
    return [coords[i] for i in sorted(keep)]


def legend(series: Sequence[Series]) -> str:
    """The series' names and colours, as an HTML list under the plot."""
    items = []
    for s in series:
        style = f"background:{esc(s.colour)}"
        if s.kind == "area":
            style += ";opacity:.3"
        items.append(f'<li><span class="swatch" style="{style}"></span>{esc(s.name)}</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


@dataclass(frozen=True)
class ForestRow:
    label: str
    value: float
    low: float | None
    high: float | None
    colour: str
    tip: str
    floor: float | None = None  # no verdict inside +-floor: a light band on the row


def forest(
    rows: Sequence[ForestRow],
    *,
    x_label: str,
    band: float | None,
    title: str,
    unit: str = "",
    clip: float | None = None,
) -> str:
    """One row per interval: a whisker from ``low`` to ``high``, a dot at ``value``; a line
    at 0 and, when given, dashed lines at +-``band``. The axis spans the values and the band
    with room to spare (at most ``FOREST_SPAN`` times their reach): a wider interval (a few
    samples' tail) runs to the edge and ends in an arrow instead of squashing every other
    row; its tooltip and the table give it whole."""
    label_chars = min(44, max((len(r.label) for r in rows), default=4))
    left, right, top, bottom, row_h = 12 + int(label_chars * 6.4), 24, 8, 40, 22
    width = max(680, left + 420)
    height = top + bottom + row_h * max(1, len(rows))
    points = [r.value for r in rows if _finite(r.value)]
    reach = max([abs(v) for v in points] + [band or 0.0, 1.0]) * FOREST_SPAN
    ends = [v for r in rows for v in (r.low, r.high) if v is not None and _finite(v)]
    if clip is not None:  # the axis never runs past +-clip (issue 40: a -1,000% outlier
        # squashed a -80% drop against 0); a value beyond it ends at the edge, labelled.
        reach = min(reach, max(clip, band or 0.0))
    lo = max(-reach, min([*points, *ends, -(band or 0.0), 0.0]))
    hi = min(reach, max([*points, *ends, band or 0.0, 0.0]))
    lo, hi, ticks = _range([lo, hi], Axis(x_label, low=lo, high=hi), 6)
    sx = _Scale(lo, hi, left, width - right, False)
    out = [_svg_open(width, height, title)]
    out += _x_ticks(sx, ticks, top, height - bottom, unit)
    zero = sx(0.0)
    out.append(
        f'<line class="axis" x1="{zero:.1f}" x2="{zero:.1f}" y1="{top}" y2="{height - bottom}"/>'
    )
    if band:
        for edge in (-band, band):
            px = sx(edge)
            out.append(
                f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{height - bottom}" '
                'stroke="#a0a0a0" stroke-dasharray="4 3"/>'
            )
    out.append(_x_title(left, width - right, height, x_label))
    for i, r in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        label = _cut(r.label, label_chars)
        colour = esc(r.colour)
        parts = [
            f'<g class="series" data-series="{esc(r.label)}"><title>{esc(r.tip)}</title>',
            f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end">{esc(label)}</text>',
        ]
        if r.floor:
            f1, f2 = sx(max(lo, -r.floor)), sx(min(hi, r.floor))
            parts.append(
                f'<rect x="{f1:.1f}" y="{cy - row_h / 2 + 2:.1f}" width="{f2 - f1:.1f}" '
                f'height="{row_h - 4}" fill="#000" fill-opacity="0.05"/>'
            )
        if r.low is not None and r.high is not None:
            x1, x2 = sx(max(lo, r.low)), sx(min(hi, r.high))
            parts.append(
                f'<line x1="{x1:.1f}" x2="{x2:.1f}" y1="{cy:.1f}" y2="{cy:.1f}" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
            for x, clipped, d in ((x1, r.low < lo, -1), (x2, r.high > hi, 1)):
                if clipped:  # an arrow: the interval goes on
                    parts.append(
                        f'<polygon points="{_xy(x + 6 * d, cy)} {_xy(x, cy - 5)} {_xy(x, cy + 5)}" '
                        f'fill="{colour}"/>'
                    )
                else:
                    parts.append(
                        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{cy - 5:.1f}" y2="{cy + 5:.1f}" '
                        f'stroke="{colour}"/>'
                    )
        if lo <= r.value <= hi:
            parts.append(f'<circle cx="{sx(r.value):.1f}" cy="{cy:.1f}" r="4" fill="{colour}"/>')
        elif _finite(r.value):  # off the axis: a marker at the edge, and the value beside it
            d = 1 if r.value > hi else -1
            x = sx(hi if d > 0 else lo)
            parts.append(
                f'<polygon class="clipped" points="{_xy(x + 7 * d, cy)} {_xy(x, cy - 6)} '
                f'{_xy(x, cy + 6)}" fill="{colour}"/>'
                f'<text x="{x - 10 * d:.1f}" y="{cy - 7:.1f}" '
                f'text-anchor="{"end" if d > 0 else "start"}">'
                f"{esc(f'{r.value:+,.0f}')}{esc(unit)}</text>"
            )
        parts.append("</g>")
        out.append("".join(parts))
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    colour: str
    tip: str = ""


def bars(rows: Sequence[Bar], *, x_label: str, title: str) -> str:
    """Horizontal bars, one ``series`` each, labelled on the left and at their end."""
    label_chars = min(40, max((len(r.label) for r in rows), default=4))
    left, right, top, bottom, row_h = 12 + int(label_chars * 6.4), 48, 8, 40, 24
    width = max(680, left + 360)
    height = top + bottom + row_h * max(1, len(rows))
    _, hi, ticks = _range([r.value for r in rows], Axis(x_label, low=0.0), 5)
    sx = _Scale(0.0, hi, left, width - right, False)
    out = [_svg_open(width, height, title)]
    out += _x_ticks(sx, ticks, top, height - bottom)
    out.append(_x_title(left, width - right, height, x_label))
    for i, r in enumerate(rows):
        y0 = top + row_h * i + 4
        label = _cut(r.label, label_chars)
        w = max(0.0, sx(r.value) - left)
        tip = f"<title>{esc(r.tip)}</title>" if r.tip else ""
        out.append(
            f'<g class="series" data-series="{esc(r.label)}">{tip}'
            f'<text x="{left - 8}" y="{y0 + 12}" text-anchor="end">{esc(label)}</text>'
            f'<rect x="{left}" y="{y0}" width="{w:.1f}" height="{row_h - 8}" '
            f'fill="{esc(r.colour)}"/>'
            f'<text x="{left + w + 4:.1f}" y="{y0 + 12}">{esc(tick_label(r.value))}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)
