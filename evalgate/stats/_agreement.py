"""Agreement between the arms: the flip count against a budget, and for multiple choice the
drift of the answer distribution (KL) and whether the top choice is the same."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as _st

from evalgate.stats import _checks as check

__all__ = ["DEFAULT_FLIP_BUDGET", "BinomTestResult", "choice_kl", "flip_budget_test", "top1_agree"]

DEFAULT_FLIP_BUDGET = 0.05
"""The flip rate tolerated without an A/A run: a product decision, explained in ``evalgate.gate._agreement``
and shared by the fixed-n agreement gate and the sequential rule."""


@dataclass(frozen=True)
class BinomTestResult:
    """Exact one-sided binomial test of a flip count against a flip budget."""

    flips: int
    n: int
    budget: float
    rate: float
    pvalue: float


def flip_budget_test(flips: int, n: int, *, budget: float) -> BinomTestResult:
    """Exact one-sided binomial test, H1: the flip rate exceeds ``budget``; p = P(X >= flips).

    Needed because flips that cancel pass McNemar: a balanced flip storm is still a changed model.
    """
    flips, n = check.count("flips", flips), check.count("n", n)
    if flips > n:
        raise ValueError(f"flips ({flips}) cannot exceed n ({n})")
    budget = check.prob("budget", budget, open_low=False, open_high=False)
    pvalue = 1.0 if flips == 0 else float(_st.binom.sf(flips - 1, n, budget))
    return BinomTestResult(flips, n, budget, flips / n if n else math.nan, min(1.0, pvalue))


def choice_kl(base_logliks: Sequence[float], cand_logliks: Sequence[float]) -> float:
    """KL(P_base || P_cand) in nats between softmaxes over per-choice logliks.

    Sees drift in the answer distribution before it is large enough to flip the top choice.
    """
    x, y = check.logliks(base_logliks, cand_logliks)
    lp, lq = x - special.logsumexp(x), y - special.logsumexp(y)
    return max(0.0, float(np.sum(np.exp(lp) * (lp - lq))))


def top1_agree(base_logliks: Sequence[float], cand_logliks: Sequence[float]) -> bool:
    """Whether both arms pick the same choice (ties go to the first, as lm-eval's argmax does)."""
    x, y = check.logliks(base_logliks, cand_logliks)
    return bool(np.argmax(x) == np.argmax(y))
