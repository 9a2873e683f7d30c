"""The drift chart: the mean per-token KL against the scored position, one line per pair of arms.

Hand-written inline SVG for the reasons the forest plot gives (one offline file, byte-stable, no
script), drawn like the long-context chart (attributes, no stylesheet, the same arm colours).
Where the KL sits along the document says what drifts: a rise late in the span is a KV cache
whose error grows with the context it holds; a flat line is the weights. The candidate's line is
solid, the A/A noise floor's (``--aa``) dashed; the KL budget is a red dashed line when it falls
near the data, else named at the top. Every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from evalgate.gate import SuiteDrift
from evalgate.report._plot import chart_head, legend, series, title_id

__all__ = ["drift_chart", "nice_top"]

_W, _H = 760, 300
_X0, _X1, _Y0, _Y1 = 80, 560, 40, 240  # plot area: left, right, top, bottom
_PAD = 20
_PAIRS = (("candidate", "candidate", "#0969da", ""), ("aa", "A/A (noise floor)", "#57606a", "6 4"))
_BUDGET = "#cf222e"
_NEAR = 1.5
"""The budget line is drawn when it is at most this many times the largest mean shown."""


def nice_top(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (the axis' top)."""
    if not (value > 0 and math.isfinite(value)):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next((m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-12)), 10 * power)


def _kl(value: float) -> str:
    return f"{value:.3g}"


def drift_chart(section: SuiteDrift, *, budget: float | None = None) -> Markup:
    """The chart of one suite's ``by_position`` means; empty for a suite without distributions."""
    starts = list(section.positions)
    lines = [
        (key, name, color, dash, list(section.by_position[key]))
        for key, name, color, dash in _PAIRS
        if len(section.by_position.get(key, [])) == len(starts) and starts
    ]
    if not lines:
        return Markup("")
    peak = max((v for *_, values in lines for v in values if math.isfinite(v)), default=0.0)
    show_budget = budget is not None and budget > 0 and (peak == 0 or budget <= _NEAR * peak)
    top = nice_top(max(peak, budget if show_budget and budget else 0.0) * 1.1)
    last = starts[-1] if len(starts) > 1 else 1

    def px(position: float) -> float:
        if len(starts) == 1:
            return (_X0 + _X1) / 2
        return _X0 + _PAD + position / last * (_X1 - _X0 - 2 * _PAD)

    def py(value: float) -> float:
        return _Y1 - (_Y1 - _Y0) * max(0.0, min(1.0, value / top))

    tid = title_id("drift-title-", section.suite)
    out = chart_head(
        "drift", tid, f"{escape(section.suite)}: mean KL(baseline ‖ candidate) per token, in nats, against the "
        "scored position", width=_W, height=_H,
    )  # fmt: skip
    for k in range(5):
        y = py(top * k / 4)
        out.append(f'<line x1="{_X0}" y1="{y:.1f}" x2="{_X1}" y2="{y:.1f}" stroke="#eaeef2" />')
        out.append(f'<text x="{_X0 - 8}" y="{y + 4:.1f}" text-anchor="end">{_kl(top * k / 4)}</text>')
    out.append(f'<line x1="{_X0}" y1="{_Y1}" x2="{_X1}" y2="{_Y1}" stroke="#57606a" />')
    step = max(1, math.ceil(len(starts) / 10))  # at most ~10 labels
    for j, s in enumerate(starts):
        if j % step == 0 or j == len(starts) - 1:
            out.append(f'<text x="{px(s):.1f}" y="{_Y1 + 18}" text-anchor="middle">{s}</text>')
    if budget is not None and budget > 0:
        if show_budget:
            y = py(budget)
            out.append(
                f'<line x1="{_X0}" y1="{y:.1f}" x2="{_X1}" y2="{y:.1f}" stroke="{_BUDGET}" '
                'stroke-dasharray="3 3" />'
            )
            out.append(
                f'<text x="{_X1 - 4}" y="{y - 5:.1f}" text-anchor="end" fill="{_BUDGET}">budget {_kl(budget)}</text>'
            )
        else:
            out.append(
                f'<text x="{_X1}" y="{_Y0 - 12}" text-anchor="end" fill="{_BUDGET}">budget '
                f"{_kl(budget)} nats/token: above the chart</text>"
            )
    for _, name, color, dash, values in lines:
        out += series(_points(starts, values, name), x=px, y=py, color=color, dash=dash, radius=3.5)
    out += legend([(name, color, dash) for _, name, color, dash, _ in lines], x=_X1 + 40, y0=_Y0)
    out.append(
        f'<text x="{(_X0 + _X1) / 2:.1f}" y="{_Y1 + 40}" text-anchor="middle">'
        "scored position (first position of each bucket)</text>"
    )
    out.append(
        f'<text x="18" y="{(_Y0 + _Y1) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 18 {(_Y0 + _Y1) / 2:.1f})">mean KL, nats/token</text>'
    )
    out.append("</svg>")
    return Markup("\n".join(out))


def _points(starts: Sequence[int], values: Sequence[float], name: str) -> list[tuple[float, float, str]]:
    """Each bucket's (first position, mean KL, hover title) for one pair of arms."""
    width = starts[1] - starts[0] if len(starts) > 1 else 1
    return [
        (s, v, f"{escape(name)}, positions {s}-{s + width - 1}: mean KL {_kl(v)} nats/token")
        for s, v in zip(starts, values, strict=True)
    ]
