"""Exact (Clopper-Pearson) bounds of a binomial share, written once: the drift rows' zero-inflated
bound, the non-inferiority test's nuisance interval and the arms' identical-output shares use them."""

from __future__ import annotations

from scipy import stats as _st

from evalgate.stats import _checks as check

__all__ = ["clopper_pearson", "cp_lower", "cp_upper"]


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound of a share, k of n."""
    return 1.0 if k >= n else float(_st.beta.ppf(1 - alpha, k + 1, n - k))


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson lower bound of a share, k of n."""
    return 0.0 if k <= 0 else float(_st.beta.ppf(alpha, k, n - k + 1))


def clopper_pearson(k: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial share k / n (equal tails); (0, 1) for n = 0."""
    k, n = check.count("k", k), check.count("n", n)
    confidence = check.prob("confidence", confidence)
    if k > n:
        raise ValueError(f"k must be at most n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    tail = (1 - confidence) / 2
    return cp_lower(k, n, tail), cp_upper(k, n, tail)
