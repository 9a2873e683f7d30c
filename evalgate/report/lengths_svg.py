"""The long-context chart: accuracy per arm and flip rate against context length (log2 x axis).

Hand-written inline SVG for the reasons the forest plot gives (one offline file, byte-stable),
drawn like the throughput chart (attributes, no stylesheet, the same arm colours). Context
lengths are powers of two in practice, so a log2 axis spaces 1k, 2k, 4k, 8k evenly and any
other length where it falls. Accuracy reads on the left axis (0 to 100 %); the flip rate, small
beside it, on its own right axis, as bars. The longest length, the gated one, is labelled with
its row's status. Every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from evalgate.gate import LengthRow, SuiteLengths
from evalgate.report._plot import chart_head, legend, series, title_id

__all__ = ["length_label", "lengths_chart"]

_W, _H = 720, 320
_X0, _X1, _Y0, _Y1 = 70, 560, 40, 260  # plot area: left, right, top, bottom
_PAD = 30  # room inside the plot area before the first and after the last length
_ARMS = (("baseline", "#57606a", "6 4"), ("candidate", "#0969da", ""))
_FLIP = "#cf222e"
_FLIP_STEPS = (0.05, 0.1, 0.2, 0.25, 0.5, 1.0)
_STATUS = {"block": "#cf222e", "pass": "#1a7f37", "info": "#57606a"}


def length_label(tokens: int) -> str:
    """1024 -> 1k, 131072 -> 128k, 1536 -> 1.5k, 1000 -> 1000: how lengths are written."""
    if tokens >= 1024 and tokens % 512 == 0:
        return f"{tokens / 1024:g}k"
    return str(tokens)


def _flip_top(rates: Sequence[float]) -> float:
    top = max(rates, default=0.0) * 1.15
    return next((s for s in _FLIP_STEPS if s >= top), 1.0)


def lengths_chart(section: SuiteLengths, *, arms: Sequence[str] = ("baseline", "candidate")) -> Markup:
    """The chart of one suite's length rows; ``arms``: the legend's names (variants) for both arms."""
    rows = section.rows
    if not rows:
        return Markup("")
    logs = [math.log2(r.context_length) for r in rows]
    lo, hi = min(logs), max(logs)

    def px(v: float) -> float:
        if hi == lo:
            return (_X0 + _X1) / 2
        return _X0 + _PAD + (v - lo) / (hi - lo) * (_X1 - _X0 - 2 * _PAD)

    def py(frac: float, top: float = 1.0) -> float:
        return _Y1 - (_Y1 - _Y0) * min(1.0, frac / top)

    flip_top = _flip_top([r.flip_rate for r in rows])
    tid = title_id("lengths-title-", section.suite)
    out = chart_head(
        "lengths", tid, f"{escape(section.suite)}: {escape(section.metric)} per arm and the flip rate against "
        "context length in tokens (log2 scale)", width=_W, height=_H,
    )  # fmt: skip
    for k in range(5):  # accuracy grid: 0, 25, 50, 75, 100 %; flip axis at the same heights
        y = py(k / 4)
        out.append(f'<line x1="{_X0}" y1="{y:.1f}" x2="{_X1}" y2="{y:.1f}" stroke="#eaeef2" />')
        out.append(f'<text x="{_X0 - 8}" y="{y + 4:.1f}" text-anchor="end">{k * 25}%</text>')
        out.append(f'<text x="{_X1 + 8}" y="{y + 4:.1f}" fill="{_FLIP}">{flip_top * k / 4 * 100:g}%</text>')
    bar = min(28.0, (_X1 - _X0 - 2 * _PAD) / max(1, 2 * len(rows)))
    for r, v in zip(rows, logs, strict=True):
        x, y = px(v), py(r.flip_rate, flip_top)
        out.append(
            f'<rect x="{x - bar / 2:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{_Y1 - y:.1f}" fill="{_FLIP}" '
            f'fill-opacity="0.25" stroke="{_FLIP}"><title>{length_label(r.context_length)} tokens: '
            f"{r.flips} of {r.n} flipped ({r.flip_rate:.1%}; {r.n10} lost, {r.n01} gained)</title></rect>"
        )
        out.append(
            f'<text x="{x:.1f}" y="{_Y1 + 18}" text-anchor="middle">{length_label(r.context_length)}</text>'
        )
        out.append(f'<text x="{x:.1f}" y="{_Y1 + 32}" text-anchor="middle" fill="#57606a">n = {r.n}</text>')
    out.append(f'<line x1="{_X0}" y1="{_Y1}" x2="{_X1}" y2="{_Y1}" stroke="#57606a" />')
    for (arm, color, dash), name in zip(_ARMS, arms, strict=True):
        out += series(_points(rows, logs, arm, name), x=px, y=py, color=color, dash=dash, radius=4)
    out += _legend(arms)
    t = section.trend
    if t is not None:
        x = px(math.log2(t.context_length)) + bar / 2  # the longest length is the last: text ends there
        color = _STATUS.get(t.status, "#57606a")
        word = "gated" if t.gated else "shown"
        out.append(
            f'<text x="{x:.1f}" y="{_Y0 - 12}" text-anchor="end" fill="{color}" font-weight="600">'
            f"{escape(t.status.upper())} ({word})<title>{escape(t.reason)}</title></text>"
        )
    out.append(
        f'<text x="{(_X0 + _X1) / 2:.1f}" y="{_Y1 + 52}" text-anchor="middle">'
        "context length in tokens (log2 scale)</text>"
    )
    out.append(
        f'<text x="16" y="{(_Y0 + _Y1) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(_Y0 + _Y1) / 2:.1f})">{escape(section.metric[:40])}</text>'
    )
    out.append(f'<text x="{_X1 + 8}" y="{_Y0 - 12}" fill="{_FLIP}">flip rate</text>')
    out.append("</svg>")
    return Markup("\n".join(out))


def _points(
    rows: Sequence[LengthRow], logs: Sequence[float], arm: str, name: str
) -> list[tuple[float, float, str]]:
    """Each length's (log2 of the length, the arm's accuracy, hover title)."""
    out = []
    for r, v in zip(rows, logs, strict=True):
        value = r.baseline if arm == "baseline" else r.candidate
        title = f"{escape(name)} at {length_label(r.context_length)} tokens: {value:.1%} of {r.n}"
        out.append((v, value, title))
    return out


def _legend(arms: Sequence[str]) -> list[str]:
    entries = [(name[:9], color, dash) for (_, color, dash), name in zip(_ARMS, arms, strict=True)]
    out = legend(entries, x=_X1 + 56, y0=_Y0)
    y = _Y0 + 54
    out.append(
        f'<rect x="{_X1 + 56}" y="{y - 6}" width="24" height="10" fill="{_FLIP}" fill-opacity="0.25" '
        f'stroke="{_FLIP}" />'
    )
    out.append(f'<text x="{_X1 + 86}" y="{y + 4}">flips</text>')
    return out
