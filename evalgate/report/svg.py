"""The forest plot: each row's delta and CI as hand-written inline SVG.

No plotting library: the report must be one offline file, and a few dozen SVG elements with
fixed-precision coordinates re-render byte for byte. The axis is symmetric around zero so
"left is worse" reads the same on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from evalgate.report._view import RowView

__all__ = ["forest_plot"]

_W = 900
_LABEL_W = 250
_X0, _X1 = 260, 690
_ROW_H = 26
_TOP = 34
_BOTTOM = 46
_STEPS = (0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5)
_COLOR = {"block": "#cf222e", "pass": "#1f2328", "info": "#8c959f", "underpowered": "#9a6700"}


def _n(x: float) -> str:
    return f"{x:.1f}"


def _domain(rows: Sequence[RowView], margin: float | None) -> tuple[float, float]:
    """Half-width of the axis and the tick step, in delta units (fractions)."""
    reach = max(
        [abs(r.raw.ci_low) for r in rows] + [abs(r.raw.ci_high) for r in rows] + [margin or 0.0, 0.01]
    )
    step = next((s for s in _STEPS if reach / s <= 5), 0.5)
    return max(step, math.ceil(reach / step - 1e-9) * step), step


def forest_plot(rows: Sequence[RowView], *, margin: float | None = None) -> Markup:
    """An SVG with one line per (suite, metric): point = delta, whiskers = CI, zero line dashed."""
    if not rows:
        return Markup("")
    half, step = _domain(rows, margin)
    height = _TOP + _ROW_H * len(rows) + _BOTTOM

    def x(v: float) -> float:
        return _X0 + (max(-half, min(half, v)) + half) / (2 * half) * (_X1 - _X0)

    y_end = _TOP + _ROW_H * len(rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="forest" viewBox="0 0 {_W} {height}" '
        f'width="{_W}" height="{height}" role="img" aria-labelledby="forest-title">',
        '<title id="forest-title">Forest plot: change in score (candidate minus baseline) with its '
        "confidence interval, per suite and metric</title>",
    ]
    if margin:
        out.append(
            f'<rect x="{_n(x(-margin))}" y="{_TOP - 6}" width="{_n(x(margin) - x(-margin))}" '
            f'height="{_ROW_H * len(rows) + 6}" fill="#dafbe1" />'
        )
        out.append(
            f'<line x1="{_n(x(-margin))}" y1="{_TOP - 6}" x2="{_n(x(-margin))}" y2="{y_end}" '
            'stroke="#cf222e" stroke-dasharray="2 3" />'
        )
        out.append(
            f'<text x="{_n(x(-margin))}" y="{_TOP - 10}" text-anchor="middle" class="axis">'
            f"−margin {escape(_n(margin * 100))} pt</text>"
        )
    k = -round(half / step)
    while k * step <= half + 1e-9:
        v = k * step
        tx = _n(x(v))
        out.append(f'<line x1="{tx}" y1="{_TOP - 6}" x2="{tx}" y2="{y_end}" stroke="#eaeef2" />')
        out.append(f'<text x="{tx}" y="{y_end + 16}" text-anchor="middle" class="axis">{v * 100:+g}</text>')
        k += 1
    zx = _n(x(0.0))
    out.append(
        f'<line x1="{zx}" y1="{_TOP - 6}" x2="{zx}" y2="{y_end}" stroke="#57606a" stroke-dasharray="4 3" />'
    )
    for i, r in enumerate(rows):
        out.append(_row(r, _TOP + _ROW_H * i + _ROW_H / 2, x))
    out.append(
        f'<text x="{_n((_X0 + _X1) / 2)}" y="{y_end + 36}" text-anchor="middle" class="axis">'
        "← candidate worse · change in points (candidate − baseline) · candidate better →</text>"
    )
    out.append(f'<text x="{_X1 + 10}" y="{_TOP - 14}" class="axis">delta [CI]</text>')
    out.append("</svg>")
    return Markup("\n".join(out))


def _row(r: RowView, cy: float, pos: Callable[[float], float]) -> str:
    status = "underpowered" if r.underpowered and r.status == "pass" else r.status
    color = _COLOR.get(status, "#1f2328")
    label = f"{r.suite} · {r.metric}"
    if len(label) > 38:
        label = label[:37] + "…"
    y = _n(cy)
    lo, hi, d = pos(r.raw.ci_low), pos(r.raw.ci_high), pos(r.raw.delta)
    fill = color if r.primary else "#ffffff"
    weight = ' font-weight="600"' if r.primary else ""
    return "\n".join(
        [
            f"<g><title>{escape(r.suite)} {escape(r.metric)}: {escape(r.delta)} {escape(r.ci)}, "
            f"{escape(status)}</title>",
            f'<text x="{_LABEL_W}" y="{_n(cy + 4)}" text-anchor="end" class="label"{weight}>{escape(label)}</text>',
            f'<line x1="{_n(lo)}" y1="{y}" x2="{_n(hi)}" y2="{y}" stroke="{color}" stroke-width="2" />',
            f'<line x1="{_n(lo)}" y1="{_n(cy - 5)}" x2="{_n(lo)}" y2="{_n(cy + 5)}" stroke="{color}" stroke-width="2" />',
            f'<line x1="{_n(hi)}" y1="{_n(cy - 5)}" x2="{_n(hi)}" y2="{_n(cy + 5)}" stroke="{color}" stroke-width="2" />',
            f'<circle cx="{_n(d)}" cy="{y}" r="5" fill="{fill}" stroke="{color}" stroke-width="2" />',
            f'<text x="{_X1 + 10}" y="{_n(cy + 4)}" class="value">{escape(r.delta)} {escape(r.ci.removesuffix(" pt"))}</text>',
            "</g>",
        ]
    )
