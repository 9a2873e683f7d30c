"""Agreement between the arms: did the answers change, not only the accuracy?

Flips that cancel pass McNemar: on the CPU engine, Q4_0 weights flipped 15 % of ARC-Easy
answers at an unchanged accuracy. The agreement gate tests the flip count against a budget
with an exact one-sided binomial test, in the same Holm family as the accuracy rows.

Default budget (a product decision, documented in the README): 5 % of items may flip without
an A/A run. With ``--aa`` the budget is the measured A/A flip rate plus 3 points, so a noisy
(nondeterministic) server is not blocked for its own noise.

Unanswered items: a generation suite's records say whether each completion came back empty or
cut at its token cap (``finish_reason`` "length"); with ``--errors-as-wrong`` an item that failed
counts as unanswered too, and every suite (log-likelihood ones included) gets the test. A candidate that leaves items unanswered where the baseline answered
is not only "wrong" there (a low-accuracy baseline would hide it): the row also tests
(candidate unanswered, baseline answered) against the reverse with a one-sided McNemar mid-p,
as its own member of the Holm family, and the row blocks when that test is significant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.records import Pair, Record
from evalgate.stats import DEFAULT_FLIP_BUDGET

__all__ = [
    "DEFAULT_AA_MARGIN",
    "DEFAULT_FLIP_BUDGET",
    "AgreementRow",
    "UnansweredTest",
    "agreement_reason",
    "agreement_row",
    "flip_count",
    "unanswered",
    "unanswered_test",
]

DEFAULT_AA_MARGIN = 0.03


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class UnansweredTest:
    """Items left unanswered (empty, cut at the token cap, or failed with --errors-as-wrong) per arm,
    and the one-sided paired test of the candidate leaving more of them than the baseline."""

    baseline_rate: float
    candidate_rate: float
    n10: int
    """Items the candidate left unanswered where the baseline answered."""
    n01: int
    """Items the baseline left unanswered where the candidate answered."""
    p_value: float
    """McNemar mid-p, one-sided (H1: the candidate leaves more items unanswered)."""
    p_adjusted: float | None = None
    significant: bool = False


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class AgreementRow:
    """One suite's flip-rate test against its budget (in verdict.json's ``agreement``)."""

    suite: str
    metric: str
    """The primary metric whose per-item outcomes define a flip."""
    n: int
    flips: int
    flip_rate: float
    budget: float
    budget_source: str
    p_value: float
    kl_mean: float | None = None
    top1_agree: float | None = None
    text_agree: float | None = None
    extracted_agree: float | None = None
    aa_flip_rate: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    status: str = "pass"
    reason: str = ""
    unanswered: UnansweredTest | None = None
    """Generation suites (every suite with --errors-as-wrong): unanswered items per arm and their
    test; None otherwise (such a row is written without the key)."""


def unanswered(record: Record) -> bool | None:
    """Whether ``record`` holds no answer: an error counted as wrong (``--errors-as-wrong``), an
    empty completion, or one cut at its token cap; None when the record does not say (a
    log-likelihood item, or a record written before evalgate kept these)."""
    extra = record.extra
    if "error" in extra:
        return True
    if "empty" not in extra:
        return None
    return bool(extra["empty"]) or extra.get("finish_reason") == "length"


def unanswered_test(pairs: Sequence[Pair], *, errors_as_wrong: bool = False) -> UnansweredTest | None:
    """The unanswered rates and test of a suite whose records say (a generation suite), or of any
    suite when failed items count as wrong; else None."""
    if not errors_as_wrong and not any("empty" in r.extra for p in pairs for r in (p.baseline, p.candidate)):
        return None
    flags = [(bool(unanswered(p.baseline)), bool(unanswered(p.candidate))) for p in pairs]
    n = len(flags)
    n10 = sum(c and not b for b, c in flags)
    n01 = sum(b and not c for b, c in flags)
    test = stats.mcnemar(n10, n01, alternative="less", mid_p=True)
    return UnansweredTest(
        baseline_rate=sum(b for b, _ in flags) / n if n else 0.0,
        candidate_rate=sum(c for _, c in flags) / n if n else 0.0,
        n10=n10,
        n01=n01,
        p_value=float(test.pvalue),
    )


def agreement_reason(a: AgreementRow) -> str:
    """The row's reason: its flips against the budget, and its unanswered items if it has the test."""
    aa = f", A/A {a.aa_flip_rate:.1%}" if a.aa_flip_rate is not None else ""
    where = f"{a.flip_rate:.1%} of answers flipped ({a.flips}/{a.n}{aa}), budget {a.budget:.1%} ({a.budget_source})"
    if a.significant:
        text = f"{where}: more than the budget, p = {a.p_value:.3g}, adjusted {a.p_adjusted:.3g}"
    else:
        text = f"{where}, p = {a.p_value:.3g}"
    u = a.unanswered
    if u is None:
        return text
    text += (
        f"; unanswered (failed, empty or cut at the token cap): baseline {u.baseline_rate:.1%}, candidate "
        f"{u.candidate_rate:.1%}, {u.n10} left by the candidate where the baseline answered vs {u.n01} "
        f"the reverse (one-sided McNemar mid-p = {u.p_value:.3g}"
    )
    if u.significant:
        return text + f", adjusted {u.p_adjusted:.3g}): the candidate leaves more items unanswered"
    return text + ")"


def flip_count(pairs: Sequence[Pair], metric: str) -> int:
    return sum(
        (p.baseline.metrics.get(metric, 0.0) >= 0.5) != (p.candidate.metrics.get(metric, 0.0) >= 0.5)
        for p in pairs
    )


def agreement_row(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    budget: float,
    budget_source: str,
    aa_flip_rate: float | None,
    errors_as_wrong: bool = False,
) -> AgreementRow:
    """Flip-rate test plus the descriptive agreement measures the suite's records allow."""
    n = len(pairs)
    flips = flip_count(pairs, metric)
    test = stats.flip_budget_test(flips, n, budget=budget) if n else None
    row = AgreementRow(
        suite=suite, metric=metric, n=n, flips=flips, flip_rate=flips / n if n else 0.0, budget=budget,
        budget_source=budget_source, p_value=float(test.pvalue) if test else 1.0, aa_flip_rate=aa_flip_rate,
    )  # fmt: skip
    kls, top1, text, extracted = [], [], [], []
    for p in pairs:
        b, c = p.baseline.response, p.candidate.response
        if _choice_logliks(b) and _choice_logliks(c) and len(b) == len(c):
            lb, lc = _choice_logliks(b), _choice_logliks(c)
            kls.append(stats.choice_kl(lb, lc))
            top1.append(stats.top1_agree(lb, lc))
        elif isinstance(b, str) and isinstance(c, str):
            text.append(b == c)
        if p.baseline.extracted is not None and p.candidate.extracted is not None:
            extracted.append(p.baseline.extracted == p.candidate.extracted)
    row.kl_mean = _mean(kls)
    row.top1_agree = _mean(top1)
    row.text_agree = _mean(text)
    row.extracted_agree = _mean(extracted) if not top1 else None  # MC extracted = top-1, already shown
    row.unanswered = unanswered_test(pairs, errors_as_wrong=errors_as_wrong)
    return row


def _choice_logliks(response: Any) -> list[float] | None:
    """Per-choice logliks from a multiple-choice record (``[[loglik, greedy], ...]``)."""
    if isinstance(response, list) and response and all(isinstance(x, list) and len(x) == 2 for x in response):
        values = [float(x[0]) for x in response]
        return values if all(math.isfinite(v) for v in values) else None
    return None


def _mean(values: Sequence[float | bool]) -> float | None:
    """Rounded to 4 decimals: llama.cpp's logprobs move by up to ~0.01 nats with the batch a
    request lands in, so more digits would only record scheduling noise (and break re-runs)."""
    return round(sum(map(float, values)) / len(values), 4) if values else None
