"""Agreement between the arms: did the answers change, not only the accuracy?

Flips that cancel pass McNemar: on the CPU engine, Q4_0 weights flipped 15 % of ARC-Easy
answers at an unchanged accuracy. The agreement gate tests the flip count against a budget
with an exact one-sided binomial test, in the same Holm family as the accuracy rows.

Default budget (a product decision, documented in the README): 5 % of items may flip without
an A/A run. With ``--aa`` the budget is the measured A/A flip rate plus 3 points, so a noisy
(nondeterministic) server is not blocked for its own noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.records import Pair
from evalgate.stats import DEFAULT_FLIP_BUDGET

__all__ = ["DEFAULT_AA_MARGIN", "DEFAULT_FLIP_BUDGET", "AgreementRow", "agreement_row", "flip_count"]

DEFAULT_AA_MARGIN = 0.03


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
