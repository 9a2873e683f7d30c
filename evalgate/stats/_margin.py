"""Tests of a paired difference of proportions against a margin, not against zero.

Two uses: non-inferiority of accuracy (delta > -margin), and ``--aa``'s question "does the
candidate flip more answers than the baseline's own noise, by more than the margin?", asked of
the two flip indicators of the same items (candidate vs baseline, A/A vs baseline). Both are
Tango's (1998) score statistic for the paired difference, the statistic ``paired_diff_ci``
inverts, so a test and its interval always agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from evalgate.stats import _checks as check
from evalgate.stats._binomial import cp_lower, cp_upper

__all__ = ["EXACT_LIMIT", "ExcessTestResult", "excess_test", "tango_score"]

EXACT_LIMIT = 1000
"""Up to this many discordant items the excess test is exact (unconditional); above it the
normal approximation of the score statistic is used. Near a small rate the score statistic's
upper tail is heavier than the normal's: with 50 items and a 3 % rate, the score test would
reject at Holm's alpha/12 about four times too often (P(Bin(50, 0.03) >= 5) = 0.019 against
0.0042). At 1,000 discordant items the Edgeworth term is about a tenth of the level."""

_GAMMA = 1e-6  # Berger & Boos (1994): the nuisance is searched over a 1 - gamma interval, gamma added to p


def tango_score(delta0: float, n10: np.ndarray | int, n01: np.ndarray | int, n: int) -> np.ndarray:
    """Tango's score statistic for H0: delta = ``delta0``, delta = (n01 - n10) / n; positive when
    the data say delta > delta0. Vectorised over ``n10`` and ``n01``."""
    b, c = np.asarray(n01, dtype=float), np.asarray(n10, dtype=float)
    d = float(delta0)
    w = -b - c + (2 * n - b + c) * d
    q21 = (np.sqrt(np.maximum(w * w + 8 * n * c * d * (1 - d), 0.0)) - w) / (4 * n)
    var = n * (2 * q21 + d * (1 - d))
    return np.asarray((b - c - n * d) / np.sqrt(np.maximum(var, 1e-300)), dtype=float)


@dataclass(frozen=True)
class ExcessTestResult:
    """One-sided test of H1: rate_x - rate_y > margin on paired indicators."""

    estimate: float  # (only_x - only_y) / n
    margin: float
    pvalue: float
    method: str  # "exact" (unconditional, Berger-Boos) or "score" (normal approximation)


def excess_test(only_x: int, only_y: int, n: int, *, margin: float) -> ExcessTestResult:
    """Whether indicator x (the candidate flipped) is more frequent than indicator y (the A/A arm
    flipped) by more than ``margin``, on the same ``n`` items; ``only_x``: items where x alone is
    1, ``only_y`` where y alone is. Items where both or neither are 1 carry no information on the
    difference but count in n.

    The test is paired, so the A/A rate's own sampling error is part of its null distribution;
    subtracting the measured A/A rate as if it were exact is what let noisy servers through.
    """
    b, c, n = check.count("only_x", only_x), check.count("only_y", only_y), check.count("n", n)
    if b + c > n:
        raise ValueError(f"only_x + only_y ({b + c}) cannot exceed n ({n})")
    margin = check.prob("margin", margin, open_low=False)
    if n == 0:
        return ExcessTestResult(math.nan, margin, 1.0, "score")
    estimate = (b - c) / n
    t_obs = float(tango_score(margin, c, b, n))
    if b + c > EXACT_LIMIT:
        return ExcessTestResult(estimate, margin, float(_st.norm.sf(t_obs)), "score")
    return ExcessTestResult(estimate, margin, _exact_pvalue(b, c, n, margin, t_obs), "exact")


def _exact_pvalue(b: int, c: int, n: int, margin: float, t_obs: float) -> float:
    """sup over the nuisance P(only_y) of P(T >= t_obs) under rate_x - rate_y = margin, the
    nuisance restricted to its 1 - gamma Clopper-Pearson interval, plus gamma (Berger & Boos 1994)."""
    top = (1 - margin) / 2
    lo, hi = cp_lower(c, n, _GAMMA / 2), cp_upper(c, n, _GAMMA / 2)
    lo, hi = min(lo, top), min(hi, top)
    c_lo = int(_st.binom.ppf(1e-13, n, lo)) if lo > 0 else 0
    c_hi = int(_st.binom.isf(1e-13, n, hi)) if hi > 0 else 0
    cs = np.arange(max(0, c_lo - 1), min(n, c_hi + 1) + 1)
    # the rejection region is {b' >= bstar(c')}: T grows with b' at fixed c' (binary search)
    low, high = np.zeros(cs.size, dtype=np.int64), n - cs + 1
    while (low < high).any():
        mid = (low + high) // 2
        hit = tango_score(margin, cs, mid, n) >= t_obs - 1e-9
        high = np.where((low < high) & hit, mid, high)
        low = np.where((low < high) & ~hit, mid + 1, low)
    grid = np.unique(np.concatenate([np.linspace(lo, hi, 41), [min(c / n, top)]]))[:, None]
    rate_x_given = np.minimum(1.0, (grid + margin) / np.maximum(1 - grid, 1e-300))
    tail = _st.binom.pmf(cs, n, grid) * _st.binom.sf(low - 1, n - cs, rate_x_given)
    return float(min(1.0, tail.sum(axis=1).max() + _GAMMA))
