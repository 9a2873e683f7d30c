"""Accuracy by output length (#42): where a generation suite's answers change, by how long they are.

An FP8 KV cache is read back at every decode step, so its error compounds with the length of the
answer (TensorRT-LLM#16916: per-position accuracy fell from 92 to 74 with generation length, and
looked fine capped at 96 tokens). A suite's accuracy row pools short and long answers; here its
items are bucketed by the baseline's completion length (the length the answer needed; the
candidate's own length is what may have changed), with the paired counts per bucket and the exact
trend test of the share of regressions among the flips across the buckets (``stats.discordant_trend``,
the test the long-context rows use). The rows are shown, not gated: one more test per generation
suite, outside the Holm family, so its p is said to be unadjusted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.store.records import Pair

__all__ = ["OUTPUT_BUCKETS", "OutputLengthRow", "OutputLengths", "output_lengths_for"]

OUTPUT_BUCKETS = (0, 64, 256, 1024)
"""First completion length (tokens) of each bucket; the last runs to the end (the drift rows' buckets)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class OutputLengthRow:
    """One bucket of completion lengths: its paired items and their flips."""

    span: str
    """Completion tokens of the baseline's answer: 0-63, 64-255, 256-1023, 1024+."""
    n: int
    baseline: float
    """The baseline's accuracy on these items."""
    candidate: float
    n10: int
    """Right on the baseline, wrong on the candidate (regressions)."""
    n01: int


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class OutputLengths:
    """verdict.json ``output_lengths``: one generation suite by its answers' length (shown, not gated)."""

    suite: str
    metric: str
    rows: list[OutputLengthRow] = field(default_factory=list)
    trend_p: float | None = None
    """Exact one-sided mid-p that regressions make a growing share of the flips as answers grow
    (unadjusted: not in the Holm family); None with fewer than two buckets holding flips."""
    note: str = ""


def _span(i: int) -> str:
    start = OUTPUT_BUCKETS[i]
    return f"{start}+" if i == len(OUTPUT_BUCKETS) - 1 else f"{start}-{OUTPUT_BUCKETS[i + 1] - 1}"


def _bucket(tokens: int) -> int:
    return max(i for i, start in enumerate(OUTPUT_BUCKETS) if tokens >= start)


def suite_output_lengths(suite: str, metric: str, pairs: Sequence[Pair]) -> OutputLengths | None:
    """The suite's rows, or None when its records say nothing of their completion lengths."""
    groups: dict[int, list[Pair]] = {}
    for p in pairs:
        tokens = p.baseline.tokens.get("completion")
        if tokens is None or metric not in p.baseline.metrics or metric not in p.candidate.metrics:
            continue
        groups.setdefault(_bucket(int(tokens)), []).append(p)
    if not groups:
        return None
    out = OutputLengths(suite, metric)
    for i in sorted(groups):
        these = groups[i]
        b = [p.baseline.metrics[metric] >= 0.5 for p in these]
        c = [p.candidate.metrics[metric] >= 0.5 for p in these]
        out.rows.append(
            OutputLengthRow(
                _span(i), len(these), sum(b) / len(these), sum(c) / len(these),
                sum(1 for x, y in zip(b, c, strict=True) if x and not y),
                sum(1 for x, y in zip(b, c, strict=True) if y and not x),
            )
        )  # fmt: skip
    flipping = [r for r in out.rows if r.n10 + r.n01]
    if len(flipping) >= 2:
        out.trend_p = float(
            stats.discordant_trend([r.n10 for r in out.rows], [r.n01 for r in out.rows]).pvalue
        )
    longest = out.rows[-1]
    out.note = (
        f"by the baseline's completion length; the trend test is shown, not gated (unadjusted p); "
        f"the longest bucket ({longest.span} tokens) holds {longest.n} of {len(pairs)} items"
    )
    return out


def output_lengths_for(
    per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]], generation: Sequence[str]
) -> list[OutputLengths]:
    """One section per generation suite (0/1 primary metric) whose records carry completion lengths."""
    out = []
    for suite in generation:
        metrics, pairs = per_suite[suite]
        section = suite_output_lengths(suite, metrics[0], pairs)
        if section is not None:
            out.append(section)
    return out
