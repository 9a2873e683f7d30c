"""What the report's line charts share: one series drawn as a line through its points with a dot
and a hover title at each."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["series"]


def series(points: Sequence[tuple[float, float, str]], *, color: str, dash: str, radius: float) -> list[str]:
    """``points``: (x, y, title) in pixels, each title already escaped by the caller; the line is
    left out for a single point, and ``dash`` (a stroke-dasharray, or "") styles it."""
    line_points, marks = [], []
    for x, y, title in points:
        line_points.append(f"{x:.1f},{y:.1f}")
        marks.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:g}" fill="{color}"><title>{title}</title></circle>'
        )
    style = f' stroke-dasharray="{dash}"' if dash else ""
    line = [
        f'<polyline points="{" ".join(line_points)}" fill="none" stroke="{color}" stroke-width="2"{style} />'
    ]
    return (line if len(line_points) > 1 else []) + marks
