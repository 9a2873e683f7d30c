"""The "Answers per arm" table (verdict.json's ``answers``, evalgate/gate/_answers.py) for every renderer.

One row per (generation suite, arm): pass@1 (avg of k), pass@k and majority@k when sampled, the
no-answer and truncated rates, reasoning tokens when the server separated them, and the share of
identical responses per (item, repeat). Columns nobody has (k = 1, no reasoning) are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalgate.report import _format as fmt

__all__ = ["NOTE", "OUTPUT_NOTE", "answers_table", "output_length_table"]

NOTE = (
    "pass@1 (avg of k): the primary metric averaged over each item's k samples; no answer: empty, or "
    "no extractable answer; truncated: cut at the token cap (both count as unanswered in the agreement "
    "row's test); identical responses: the same text on both arms for the same item and repeat."
)


def _num(x: Any) -> str:
    return "—" if x is None else f"{float(x):.3f}"


def _tokens(mean: Any, median: Any) -> str:
    return "—" if mean is None else f"{float(mean):.0f} / {float(median):.0f}"


def answers_table(answers: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) from verdict.json's ``answers`` (the dict form every renderer reads)."""
    sampled = any(int(a.get("k", 1)) > 1 for a in answers)
    reasoning = any(
        a[arm].get("reasoning_mean") is not None for a in answers for arm in ("baseline", "candidate")
    )
    headers = ["suite", "arm", "k", "pass@1 (avg of k)"]
    headers += ["pass@k", "majority@k"] if sampled else []
    headers += ["no answer", "truncated"]
    headers += ["reasoning tokens (mean / median)"] if reasoning else []
    headers += ["identical responses"]
    rows = []
    for a in answers:
        for arm in ("baseline", "candidate"):
            x = a[arm]
            row = [fmt.clean(str(a["suite"])), arm, str(a["k"]), _num(x["pass1"])]
            row += [_num(x.get("passk")), _num(x.get("majority"))] if sampled else []
            row += [fmt.pct(float(x["no_answer"])), fmt.pct(float(x["truncated"]))]
            row += [_tokens(x.get("reasoning_mean"), x.get("reasoning_median"))] if reasoning else []
            row += [fmt.pct(float(a["identical"])) if arm == "candidate" else "—"]  # a property of the pair
            rows.append(row)
    return headers, rows


OUTPUT_NOTE = (
    "Items bucketed by the baseline's completion length; n10 / n01: right on the baseline and wrong on "
    "the candidate / the reverse. Trend p: the exact one-sided test that regressions make a growing "
    "share of the flips as answers grow (a KV cache read back at every step compounds its error), "
    "shown, not gated: unadjusted, outside the Holm family."
)


def output_length_table(sections: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) from verdict.json's ``output_lengths`` (the dict form every renderer reads)."""
    headers = ["suite", "completion tokens", "n", "baseline", "candidate", "n10 / n01", "trend p"]
    rows = []
    for s in sections:
        for i, r in enumerate(s["rows"]):
            trend = s.get("trend_p")
            rows.append([
                fmt.clean(str(s["suite"])), str(r["span"]), str(r["n"]), _num(r["baseline"]), _num(r["candidate"]),
                f"{r['n10']} / {r['n01']}", "—" if i or trend is None else f"{float(trend):.3g}",
            ])  # fmt: skip
    return headers, rows
