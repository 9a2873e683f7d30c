"""The per-category section (verdict.json ``categories``, gate/_categories.py) for every renderer.

HTML gets one table of every suite's categories, each numeric cell carrying its raw value for the
sort (``data-sort``), so the page's script can sort by any column and filter by text; without
script the table reads as rendered, sorted by suite and category. The terminal and summary.md get
one line per suite: the overall delta's two intervals and the category that dropped most.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalgate.gate import CategoryRow, SuiteCategories, Verdict
from evalgate.report import _format as fmt

__all__ = ["HEADERS", "CategoryCell", "CategoryPanel", "category_lines", "category_panel"]

HEADERS = ("suite", "category", "n", "baseline", "candidate", "delta", "CI", "n10 / n01", "flips", "units")
NOTE = (
    "Each category's paired items, informational: never gated and outside the Holm family. "
    "delta = candidate − baseline with an unadjusted interval (Tango's, widened to the cluster-robust "
    "one where a suite records a unit finer than the category, e.g. MMLU-Pro's source exam; units: what "
    "it counts as independent). With k categories about k × 5 % of the 95 % intervals exclude 0 by "
    "chance alone. Click a column to sort; type to filter."
)


@dataclass(frozen=True)
class CategoryCell:
    text: str
    sort: str
    """The raw value the column sorts by (a number, or the text itself)."""
    numeric: bool = True


@dataclass(frozen=True)
class CategoryPanel:
    key: str
    title: str
    note: str
    headers: tuple[str, ...]
    rows: list[list[CategoryCell]]
    summaries: list[str]
    """Per suite: its overall delta item-level beside clustered, its multiplicity, its largest drop."""


def _num(text: str, value: float) -> CategoryCell:
    return CategoryCell(text, repr(float(value)))


def _cells(s: SuiteCategories, r: CategoryRow) -> list[CategoryCell]:
    suite, category = fmt.clean(s.suite), fmt.clean(r.category)
    return [
        CategoryCell(suite, suite, numeric=False),
        CategoryCell(category, category, numeric=False),
        _num(str(r.n), r.n),
        _num(fmt.score(r.baseline), r.baseline),
        _num(fmt.score(r.candidate), r.candidate),
        _num(fmt.points(r.delta), r.delta),
        _num(fmt.ci(r.ci_low, r.ci_high), r.ci_low),
        _num(f"{r.n10} / {r.n01}", r.n10 - r.n01),
        _num(fmt.pct((r.n10 + r.n01) / r.n), (r.n10 + r.n01) / r.n),
        _num(f"{r.clusters} {s.within}{'s' if r.clusters != 1 else ''}", r.clusters),
    ]


def summary(s: SuiteCategories) -> str:
    """The overall delta of one suite with its item-level and category-clustered intervals."""
    o = s.overall
    ratio = f", {o.width_ratio:.2f}x the width" if o.width_ratio is not None else ""
    if not any(r.n10 + r.n01 for r in s.rows):
        ratio = " (no item changed: both are Tango's interval)"
    return fmt.clean(
        f"{s.suite} by {s.unit}: overall delta {fmt.points(o.estimate)}, CI items independent "
        f"{fmt.ci(o.item_low, o.item_high)}, clustered by {s.unit} ({o.n_clusters}) "
        f"{fmt.ci(o.clustered_low, o.clustered_high)}{ratio}; {s.note}"
    )


def category_panel(verdict: Verdict) -> CategoryPanel | None:
    if not verdict.categories:
        return None
    rows = [_cells(s, r) for s in verdict.categories for r in s.rows]
    summaries = category_lines(verdict)
    return CategoryPanel("categories", "Per-category results", NOTE, HEADERS, rows, summaries)


def _largest_drop(rows: Sequence[CategoryRow]) -> str:
    worst = min(rows, key=lambda r: (r.delta, r.category))
    if worst.delta >= 0:
        return "no category dropped"
    return f"largest drop {worst.category} {fmt.points(worst.delta)} {fmt.ci(worst.ci_low, worst.ci_high)} (n {worst.n})"


def category_lines(verdict: Verdict) -> list[str]:
    """One line per suite for the terminal and summary.md (plain text: callers escape it)."""
    return [fmt.clean(f"{summary(s)}; {_largest_drop(s.rows)}") for s in verdict.categories]
