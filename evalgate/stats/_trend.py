"""An exact test of a trend in the discordant pairs across ordered groups (context lengths).

Group j (in order, score j) has d_j discordant pairs, n10_j of them regressions. Under H0 the
chance that a discordant pair is a regression is the same in every group; given the d_j and
the total K = sum n10_j, the n10_j are then multivariate hypergeometric, and the statistic
T = sum j * n10_j has an exact null law, computed here by convolution over the groups (exact
integers, no approximation). It is the exact conditional form of the Cochran-Armitage trend
test on the 2 x J table of (regression, improvement) by group; with two groups it is Fisher's
exact test. One-sided: H1 the share of regressions grows with the group's order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evalgate.stats import _checks as check

__all__ = ["TrendResult", "discordant_trend"]


@dataclass(frozen=True)
class TrendResult:
    """Exact conditional trend test of regressions among discordant pairs across ordered groups."""

    statistic: int
    """T = sum over groups of (group index) * (its regressions)."""
    expected: float
    """E[T] under H0 (no trend)."""
    pvalue: float
    """Mid-p, one-sided (H1: regressions make a growing share of the flips), when mid_p; else exact."""
    pvalue_exact: float
    """P(T >= observed) under H0."""
    mid_p: bool


def discordant_trend(n10: Sequence[int], n01: Sequence[int], *, mid_p: bool = True) -> TrendResult:
    """Exact one-sided test that the share of regressions (``n10``) among each group's discordant
    pairs grows with the group's order; groups in order (shortest length first). With no
    variation possible (no discordant pairs, all of one kind, or one group with any) p is 1."""
    if len(n10) != len(n01):
        raise ValueError(f"n10 and n01 must have one count per group ({len(n10)} != {len(n01)})")
    reg = [check.count(f"n10[{j}]", v) for j, v in enumerate(n10)]
    imp = [check.count(f"n01[{j}]", v) for j, v in enumerate(n01)]
    sizes = [a + b for a, b in zip(reg, imp, strict=True)]
    total, k = sum(sizes), sum(reg)
    observed = sum(j * x for j, x in enumerate(reg))
    expected = k / total * sum(j * d for j, d in enumerate(sizes)) if total else 0.0
    # ways[(regressions so far, T so far)] = number of ways (products of binomials), exact
    ways: dict[tuple[int, int], int] = {(0, 0): 1}
    for j, d in enumerate(sizes):
        nxt: dict[tuple[int, int], int] = {}
        for (r, t), w in ways.items():
            for x in range(min(d, k - r) + 1):
                key = (r + x, t + j * x)
                nxt[key] = nxt.get(key, 0) + w * math.comb(d, x)
        ways = nxt
    law = {t: w for (r, t), w in ways.items() if r == k}
    norm = sum(law.values())  # = comb(total, k)
    if len(law) <= 1:
        return TrendResult(observed, expected, 1.0, 1.0, mid_p)
    upper = sum(w for t, w in law.items() if t >= observed)
    exact = upper / norm
    midp = (upper - law.get(observed, 0) / 2) / norm
    return TrendResult(observed, expected, float(midp if mid_p else exact), float(exact), mid_p)
