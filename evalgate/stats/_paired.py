"""Paired binary outcomes: McNemar's test, Holm's correction over the family, and its power."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as _st

from evalgate.stats import _checks as check
from evalgate.stats._checks import Alternative

__all__ = ["McNemarResult", "holm", "mcnemar", "mde", "required_n"]


@dataclass(frozen=True)
class McNemarResult:
    """Exact conditional McNemar test of the discordant pairs."""

    n10: int
    n01: int
    statistic: float  # n10, whose null law given nd = n10 + n01 is Bin(nd, 1/2)
    pvalue: float  # mid-p when mid_p else exact
    pvalue_exact: float
    alternative: str
    mid_p: bool


def mcnemar(
    n10: int, n01: int, *, alternative: Alternative = "two-sided", mid_p: bool = True
) -> McNemarResult:
    """Exact conditional McNemar test, mid-p by default.

    Given nd = n10 + n01 discordant pairs, n10 ~ Bin(nd, 1/2) under H0. The mid-p version
    (Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91) keeps the level in practice
    while the exact test is needlessly conservative. ``"less"`` is H1: delta < 0 (the candidate
    regressed, n10 large); ``"greater"`` is H1: delta > 0.
    """
    n10, n01 = check.count("n10", n10), check.count("n01", n01)
    check.alternative(alternative)
    nd = n10 + n01
    if nd == 0:
        return McNemarResult(n10, n01, 0.0, 1.0, 1.0, alternative, mid_p)
    point = float(_st.binom.pmf(n10, nd, 0.5))
    if alternative == "less":  # P(X >= n10)
        exact = float(_st.binom.sf(n10 - 1, nd, 0.5))
        midp = exact - 0.5 * point
    elif alternative == "greater":  # P(X <= n10)
        exact = float(_st.binom.cdf(n10, nd, 0.5))
        midp = exact - 0.5 * point
    elif n10 == n01:  # Fagerland et al. (2013): mid-p = 2 P(X <= k) - P(X = k), exactly 1 at a tie
        exact = midp = 1.0
    else:
        exact = min(1.0, 2.0 * float(_st.binom.cdf(min(n10, n01), nd, 0.5)))
        midp = exact - point  # half of the observed point, in each of the two tails
    midp = min(1.0, max(0.0, midp))
    return McNemarResult(n10, n01, float(n10), midp if mid_p else exact, exact, alternative, mid_p)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in the input order.

    Controls the family-wise error over the suites' primary metrics without assuming independence.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"pvalues must be 1-D, got shape {p.shape}")
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues must all be in [0, 1] (no NaN)")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def mde(
    n: int,
    flip_rate: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
) -> float:
    """Minimum detectable |delta| for McNemar at the given power (Connor 1987, Biometrics 43:207),
    for a change on top of the measured noise.

    Solves n = [z_a sqrt(psi) + z_b sqrt(psi - d^2)]^2 / d^2 for d with psi = flip_rate + d: the
    server's own flips (``flip_rate``, half each way) stay, and a regression of d adds d one-way
    flips on top of them. Taking psi = max(flip_rate, d), as if the change turned existing noise
    flips one way, overstated the power at the MDE (0.46-0.72 instead of 0.80). With flip_rate 0
    this is the all-one-way case psi = d. The binary case of ``mde_mean`` (its ``sd`` the square
    root of the flip rate, ``span`` 1). Returns inf when no |delta| <= 1 is detectable.
    """
    n = check.count("n", n)
    flip_rate = check.prob("flip_rate", flip_rate, open_low=False, open_high=False)
    z_a, z_b = _z(alpha, power, alternative)
    return _solve_mde(n, flip_rate, 1.0, z_a, z_b)


def _z(alpha: float, power: float, alternative: str) -> tuple[float, float]:
    """The normal quantiles (z_alpha, z_power) of a power calculation, its three options checked."""
    alpha, power = check.prob("alpha", alpha), check.prob("power", power)
    two_sided = check.alternative(alternative) == "two-sided"
    return float(_st.norm.ppf(1 - (alpha / 2 if two_sided else alpha))), float(_st.norm.ppf(power))


def _connor_n(d: float, second_moment: float, span: float, z_a: float, z_b: float) -> float:
    """Items a test of the mean paired difference needs to detect a loss of ``d`` added on top of
    noise whose per-item differences have ``second_moment`` (mean of squares), the loss taken as
    concentrated on the fewest items it can be: d / span of them, each losing the whole ``span``.
    That adds d * span to the second moment (d^2 (1 - q) / q to the variance for a share q), the
    largest any shape of change of size d can add, so the power holds for every shape."""
    psi = second_moment + d * span
    return (z_a * math.sqrt(psi) + z_b * math.sqrt(max(psi - d * d, 0.0))) ** 2 / (d * d)


def _solve_mde(n: int, second_moment: float, span: float, z_a: float, z_b: float) -> float:
    """The smallest d with ``_connor_n(d) <= n`` (it falls with d), inf when none up to
    ``span``; with span 0 (a shift of every item) the closed form (z_a + z_b) sd / sqrt(n)."""
    if n == 0:
        return math.inf
    if span == 0:
        return (z_a + z_b) * math.sqrt(second_moment) / math.sqrt(n)
    top = span  # a loss of more than the whole range is not a loss an item can have
    if n < _connor_n(top, second_moment, span, z_a, z_b):
        return math.inf
    return float(
        optimize.brentq(
            lambda d: _connor_n(d, second_moment, span, z_a, z_b) - n, 1e-9 * top, top, xtol=1e-12 * top
        )
    )


def required_n(
    delta: float,
    flip_rate: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
) -> int:
    """Items McNemar needs to detect |delta| with ``power`` at ``alpha`` for a change on top of
    the noise (discordance flip_rate + delta): Connor's n, the inverse of ``mde``
    (``mde(required_n(d, f), f) <= d``), for planning a run before it starts."""
    delta = check.prob("delta", delta, open_high=False)
    flip_rate = check.prob("flip_rate", flip_rate, open_low=False, open_high=False)
    z_a, z_b = _z(alpha, power, alternative)
    return max(1, math.ceil(_connor_n(delta, flip_rate, 1.0, z_a, z_b) - 1e-9))
