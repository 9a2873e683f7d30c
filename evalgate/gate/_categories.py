"""Per-category rows (#44): where in a suite the answers changed, by subject, category or tool.

A suite's row pools its categories; a candidate that loses five points on chemistry and gains
them back elsewhere shows no change there. Here each category gets its paired counts, delta and
interval, and the suite's overall delta gets two intervals side by side: items independent (the
paired t interval) and clustered by category (``stats.clustered_diff_ci``, CR1 with G - 1 df). A
change that varies by category makes items of one category move together, so the item-level
interval is too narrow for it; the ratio of the two widths says by how much
(benchmarks/clustered_coverage.py measures both coverages).

The rows are informational, never gated: outside the Holm family, with unadjusted intervals. k
categories at 95 % are expected to hold about k x 5 % intervals that exclude 0 with no change at
all, and each section says so with its own k. Only 0/1 suites without --repeats (one outcome per
item and arm).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.store.facts import RecordExtra
from evalgate.store.records import Pair

__all__ = [
    "GROUPED",
    "UNITS",
    "CategoryRow",
    "CategoryUnit",
    "ClusteredDelta",
    "SuiteCategories",
    "categories_for",
    "suite_categories",
]

NOT_RECORDED = "(not recorded)"
"""The category of an item whose record does not name one (a record written before it was)."""


Field = Callable[[RecordExtra], "str | None"]
"""Reads one field of a record's ``extra`` (by attribute: the typed field, never a string key)."""


def _subject(extra: RecordExtra) -> str | None:
    return extra.subject


def _src(extra: RecordExtra) -> str | None:
    return extra.src


def _bfcl_category(extra: RecordExtra) -> str | None:
    return extra.category


@dataclass(frozen=True)
class CategoryUnit:
    """How a suite's items group: the record field naming the category, and the unit that
    correlates items inside one (None: the item itself, when the suite records nothing finer)."""

    category: Field
    """The item's category, from its record's ``extra``."""
    label: str
    """What a reader calls the category (subject, category, BFCL category)."""
    within: Field | None = None
    """The finer unit the row's interval clusters on; None: the item."""
    within_label: str = "item"
    """What a reader calls that unit (item, src)."""


UNITS: Mapping[str, CategoryUnit] = {
    "mmlu": CategoryUnit(_subject, "subject"),
    "mmlu_pro": CategoryUnit(_subject, "category", _src, "src"),
    "mmlu_pro_chat": CategoryUnit(_subject, "category", _src, "src"),
    "tool_calls": CategoryUnit(_bfcl_category, "BFCL category"),
}
"""The one declaration of each suite's categories. MMLU records no unit finer than its subject;
MMLU-Pro records each item's source exam (``src``: ori_mmlu-*, stemez-*, theoremQA-*, scibench-*),
which correlates items within a category. tool_calls groups by BFCL category rather than by
function: BFCL gives nearly every case its own functions, so "by tool" would be rows of one."""
GROUPED = CategoryUnit(_subject, "subject")
"""Any other suite whose records carry a ``subject`` (an lm-eval group of tasks)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class CategoryRow:
    """One category of a suite: its paired items, delta and interval (informational)."""

    category: str
    n: int
    baseline: float
    candidate: float
    delta: float
    ci_low: float
    ci_high: float
    """Unadjusted: Tango's item-level interval, widened to the cluster-robust one over the
    section's ``within`` unit when the suite records one."""
    n10: int
    """Right on the baseline, wrong on the candidate (regressions)."""
    n01: int
    clusters: int
    """Independent units behind the interval: the items, or their ``within`` units."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class ClusteredDelta:
    """The suite's overall delta with an item-level and a category-clustered interval."""

    estimate: float
    item_low: float
    item_high: float
    """Items independent: the paired t interval (the CR1 interval with one item per cluster). With
    no item changed there is no variance to estimate: both intervals are then Tango's."""
    clustered_low: float
    clustered_high: float
    """Clustered by category: CR1 with (categories - 1) degrees of freedom."""
    n_clusters: int
    width_ratio: float | None
    """Clustered width over item-level width (None when no item changed)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class SuiteCategories:
    """verdict.json ``categories``: one suite by category, shown, never gated."""

    suite: str
    metric: str
    unit: str
    """What a category is (subject, category, BFCL category)."""
    within: str
    """The unit each row's interval counts as independent: item, or a record key (src)."""
    confidence: float
    overall: ClusteredDelta
    rows: list[CategoryRow] = field(default_factory=list)
    note: str = ""
    """The multiplicity: how many rows, unadjusted, and how many would exclude 0 by chance."""


def _outcome(p: Pair, metric: str) -> tuple[float, float] | None:
    b, c = p.baseline.metrics.get(metric), p.candidate.metrics.get(metric)
    if b is None or c is None or not (math.isfinite(b) and math.isfinite(c)):
        return None  # no usable value on an arm: left out, as the gate's row leaves it out
    return (1.0 if b >= 0.5 else 0.0), (1.0 if c >= 0.5 else 0.0)


def _label(p: Pair, read: Field) -> str | None:
    value = read(p.baseline.extra)
    return None if value is None else str(value)


def _row(
    category: str, items: list[tuple[Pair, float, float]], unit: CategoryUnit, confidence: float
) -> CategoryRow:
    b = [x for _, x, _ in items]
    c = [y for _, _, y in items]
    n = len(items)
    n10 = sum(1 for x, y in zip(b, c, strict=True) if x and not y)
    n01 = sum(1 for x, y in zip(b, c, strict=True) if y and not x)
    n11 = sum(1 for x, y in zip(b, c, strict=True) if x and y)
    tango = stats.paired_diff_ci(n11, n10, n01, n - n11 - n10 - n01, confidence=confidence)
    low, high, clusters = float(tango.low), float(tango.high), n
    if unit.within is not None:
        labels = [_label(p, unit.within) or f"item:{p.item_id}" for p, _, _ in items]
        robust = stats.clustered_diff_ci(b, c, labels, confidence=confidence)
        clusters = robust.n_clusters
        if clusters >= 2:  # never narrower than what the items alone say
            low, high = min(low, robust.low), max(high, robust.high)
    return CategoryRow(category, n, sum(b) / n, sum(c) / n, (n01 - n10) / n, low, high, n10, n01, clusters)


def suite_categories(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    confidence: float = 0.95,
    unit: CategoryUnit | None = None,
) -> SuiteCategories | None:
    """The suite's rows by category, or None when its records name fewer than two categories."""
    unit = unit or UNITS.get(suite, GROUPED)
    if not any(_label(p, unit.category) is not None for p in pairs):
        return None
    groups: dict[str, list[tuple[Pair, float, float]]] = {}
    for p in pairs:
        outcome = _outcome(p, metric)
        if outcome is not None:
            groups.setdefault(_label(p, unit.category) or NOT_RECORDED, []).append((p, *outcome))
    if len(groups) < 2:
        return None
    everything = [x for name in sorted(groups) for x in groups[name]]
    b = [x for _, x, _ in everything]
    c = [y for _, _, y in everything]
    item = stats.clustered_diff_ci(b, c, [p.item_id for p, _, _ in everything], confidence=confidence)
    by_category = stats.clustered_diff_ci(
        b, c, [_label(p, unit.category) or NOT_RECORDED for p, _, _ in everything], confidence=confidence
    )
    item_width = item.high - item.low
    overall = ClusteredDelta(
        item.estimate, item.low, item.high, by_category.low, by_category.high, by_category.n_clusters,
        (by_category.high - by_category.low) / item_width if item_width > 0 else None,
    )  # fmt: skip
    if b == c:  # no item changed: no variance to estimate, and a [0, 0] interval would claim certainty
        right = int(sum(b))
        tango = stats.paired_diff_ci(right, 0, 0, len(b) - right, confidence=confidence)
        overall = ClusteredDelta(0.0, tango.low, tango.high, tango.low, tango.high, overall.n_clusters, None)
    rows = [_row(name, groups[name], unit, confidence) for name in sorted(groups)]
    k = len(rows)
    excluding = sum(1 for r in rows if r.ci_low > 0 or r.ci_high < 0)
    note = (
        f"{k} {unit.label} rows, informational: never gated, outside the Holm family; unadjusted "
        f"{confidence:.0%} intervals, so about {k * (1 - confidence):.2g} of {k} would exclude 0 by chance "
        f"alone with no change at all ({excluding} do)"
    )
    return SuiteCategories(suite, metric, unit.label, unit.within_label, confidence, overall, rows, note)


def categories_for(
    per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]], *, confidence: float
) -> list[SuiteCategories]:
    """One section per 0/1 suite whose records name two or more categories (primary metric)."""
    out = []
    for suite, (metrics, pairs) in per_suite.items():
        section = suite_categories(suite, metrics[0], pairs, confidence=confidence)
        if section is not None:
            out.append(section)
    return out
