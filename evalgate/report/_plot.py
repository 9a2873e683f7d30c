"""What the report's line charts share: the <svg> head with its accessible title, one series drawn
as a line through its points with a dot and a hover title at each, and the legend of line styles."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import escape

__all__ = ["chart_head", "legend", "series", "title_id"]


def series(
    points: Sequence[tuple[float, float, str]],
    *,
    x: Callable[[float], float],
    y: Callable[[float], float],
    color: str,
    dash: str,
    radius: float,
) -> list[str]:
    """``points``: (x, y, title) in the data's units, placed by the chart's scales ``x`` and ``y``,
    each title already escaped by the caller; the line is left out for a single point, and
    ``dash`` (a stroke-dasharray, or "") styles it."""
    line_points, marks = [], []
    for data_x, data_y, title in points:
        x_px, y_px = x(data_x), y(data_y)
        line_points.append(f"{x_px:.1f},{y_px:.1f}")
        marks.append(
            f'<circle cx="{x_px:.1f}" cy="{y_px:.1f}" r="{radius:g}" fill="{color}"><title>{title}</title></circle>'
        )
    style = f' stroke-dasharray="{dash}"' if dash else ""
    line = [
        f'<polyline points="{" ".join(line_points)}" fill="none" stroke="{color}" stroke-width="2"{style} />'
    ]
    return (line if len(line_points) > 1 else []) + marks


def title_id(prefix: str, suite: str) -> str:
    """An id for a chart's <title> unique per suite on the page: ``prefix`` and the suite's name made safe."""
    return prefix + "".join(c if c.isalnum() else "-" for c in suite.lower())[:40]


def chart_head(kind: str, tid: str, title: str, *, width: int, height: int) -> list[str]:
    """The opening <svg> of class ``kind`` labelled by its <title> ``tid``; ``title`` already escaped."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-labelledby="{escape(tid)}" font-size="12" fill="#1f2328">',
        f'<title id="{escape(tid)}">{title}</title>',
    ]


def legend(entries: Sequence[tuple[str, str, str]], *, x: int, y0: int) -> list[str]:
    """One row per (name, color, dash): a line sample from ``x`` and the name (escaped here) after it,
    22 px apart from ``y0`` + 10."""
    out = []
    for j, (name, color, dash) in enumerate(entries):
        y = y0 + 10 + 22 * j
        style = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{color}" stroke-width="2"{style} />'
        )
        out.append(f'<text x="{x + 30}" y="{y + 4}">{escape(name)}</text>')
    return out
