"""Paired statistics for gating a rollout: tests, intervals, power, agreement.

Every function is pure and deterministic given its inputs (random ones take an explicit
``numpy.random.Generator``). Binary outcomes use the paired 2x2 table of one eval run on two arms:

    n11 = both right, n10 = baseline right & candidate wrong (a regression),
    n01 = baseline wrong & candidate right (an improvement), n00 = both wrong,

and ``delta = p_candidate - p_baseline = (n01 - n10) / n``. A negative delta is a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize, special
from scipy import stats as _st

from evalgate._stats_sequential import (
    SequentialResult,
    _count,
    flip_evalue,
    flip_futile,
    sequential_evalue,
    sequential_futile,
    sequential_test,
)

__all__ = [
    "BinomTestResult",
    "BootstrapResult",
    "DiffCI",
    "McNemarResult",
    "PermutationResult",
    "SequentialResult",
    "choice_kl",
    "flip_budget_test",
    "flip_evalue",
    "flip_futile",
    "holm",
    "mcnemar",
    "mde",
    "paired_bootstrap",
    "paired_diff_ci",
    "sequential_evalue",
    "sequential_futile",
    "sequential_test",
    "sign_flip_test",
    "top1_agree",
]

Alternative = Literal["two-sided", "less", "greater"]
_ALTERNATIVES = ("two-sided", "less", "greater")
_CHUNK_ELEMENTS = 4_000_000  # bound on resampling matrices so 10k items x 10k resamples fits in memory


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


@dataclass(frozen=True)
class DiffCI:
    """Confidence interval for delta = p_candidate - p_baseline."""

    estimate: float
    low: float
    high: float
    method: str
    confidence: float


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile bootstrap interval of mean(b - a)."""

    estimate: float
    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class PermutationResult:
    """Sign-flip permutation test of mean(b - a)."""

    statistic: float
    pvalue: float
    alternative: str


@dataclass(frozen=True)
class BinomTestResult:
    """Exact one-sided binomial test of a flip count against a flip budget."""

    flips: int
    n: int
    budget: float
    rate: float
    pvalue: float


# ---------------------------------------------------------------- validation


def _prob(name: str, value: float, *, open_low: bool = True, open_high: bool = True) -> float:
    v = float(value)
    low_bad = v <= 0.0 if open_low else v < 0.0
    high_bad = v >= 1.0 if open_high else v > 1.0
    if math.isnan(v) or low_bad or high_bad:
        lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return v


def _alternative(alternative: str) -> str:
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    return alternative


def _pairs(a: Sequence[float], b: Sequence[float], n_resamples: int, rng: object) -> np.ndarray:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a seeded numpy.random.Generator, got {type(rng).__name__}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"a and b must be 1-D and the same length, got shapes {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("a and b are empty: need at least one pair")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("a and b must be finite (no NaN or inf)")
    if _count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    return np.asarray(y - x, dtype=float)


def _logliks(base: Sequence[float], cand: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"logliks must be non-empty 1-D of equal length, got shapes {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("logliks must be finite")
    return x, y


# ---------------------------------------------------------------- McNemar


def mcnemar(
    n10: int, n01: int, *, alternative: Alternative = "two-sided", mid_p: bool = True
) -> McNemarResult:
    """Exact conditional McNemar test, mid-p by default.

    Given nd = n10 + n01 discordant pairs, n10 ~ Bin(nd, 1/2) under H0. The mid-p version
    (Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91) keeps the level in practice
    while the exact test is needlessly conservative. ``"less"`` is H1: delta < 0 (the candidate
    regressed, n10 large); ``"greater"`` is H1: delta > 0.
    """
    n10, n01 = _count("n10", n10), _count("n01", n01)
    _alternative(alternative)
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
    elif n10 == n01:  # every other outcome is more extreme
        exact, midp = 1.0, 1.0 - 0.5 * point
    else:
        exact = min(1.0, 2.0 * float(_st.binom.cdf(min(n10, n01), nd, 0.5)))
        midp = exact - point  # half of the observed point, in each of the two tails
    midp = min(1.0, max(0.0, midp))
    return McNemarResult(n10, n01, float(n10), midp if mid_p else exact, exact, alternative, mid_p)


# ---------------------------------------------------------------- CI of the paired difference


def _wilson(x: int, n: int, z: float) -> tuple[float, float]:
    centre = (x + z * z / 2) / (n + z * z)
    half = z * math.sqrt(x * (n - x) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def _tango_score(d: float, b: int, c: int, n: int) -> float:
    """Tango's score statistic at delta = d, with b = n01 and c = n10 (decreasing in d)."""
    w = -b - c + (2 * n - b + c) * d
    q21 = (math.sqrt(max(w * w + 8 * n * c * d * (1 - d), 0.0)) - w) / (4 * n)
    var = n * (2 * q21 + d * (1 - d))
    return (b - c - n * d) / math.sqrt(max(var, 1e-300))


def _tango(n10: int, n01: int, n: int, z: float) -> tuple[float, float]:
    eps = 1e-12
    est = (n01 - n10) / n

    def root(target: float, boundary: float) -> float:
        def f(d: float) -> float:
            return _tango_score(d, n01, n10, n) - target

        lo, hi = -1 + eps, 1 - eps
        if f(lo) * f(hi) > 0:  # no crossing inside (-1, 1): the limit is the boundary
            return boundary
        return float(optimize.brentq(f, lo, hi, xtol=1e-12))

    low = -1.0 if est == -1 else root(z, -1.0)
    high = 1.0 if est == 1 else root(-z, 1.0)
    return low, high


def _newcombe(n11: int, n10: int, n01: int, n00: int, z: float) -> tuple[float, float]:
    n = n11 + n10 + n01 + n00
    p1, p2 = (n11 + n01) / n, (n11 + n10) / n  # candidate, baseline
    l1, u1 = _wilson(n11 + n01, n, z)
    l2, u2 = _wilson(n11 + n10, n, z)
    margins = (n11 + n01) * (n10 + n00) * (n11 + n10) * (n01 + n00)
    a = n11 * n00 - n01 * n10
    if margins == 0 or 0 <= a <= n / 2:
        phi = 0.0
    else:  # Newcombe's continuity-corrected phi
        phi = (a - n / 2 if a > n / 2 else a) / math.sqrt(margins)
    est = p1 - p2
    dl = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    du = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return max(-1.0, est - dl), min(1.0, est + du)


def paired_diff_ci(
    n11: int,
    n10: int,
    n01: int,
    n00: int,
    *,
    confidence: float = 0.95,
    method: Literal["tango", "newcombe"] = "tango",
) -> DiffCI:
    """Confidence interval for delta = (n01 - n10) / n from the paired 2x2 table.

    ``"tango"``: Tango's (1998, Stat Med 17:891) score interval, solved numerically; it stays
    inside [-1, 1] and keeps its coverage near nominal even with few discordant pairs.
    ``"newcombe"``: Newcombe's (1998, Stat Med 17:2635) method 10, Wilson intervals of both
    marginals combined with a phi-corrected square-and-add.
    With n = 0 there is no information: the estimate is NaN and the interval is (-1, 1).
    """
    n11, n10, n01, n00 = (
        _count(k, v) for k, v in zip(("n11", "n10", "n01", "n00"), (n11, n10, n01, n00), strict=True)
    )
    confidence = _prob("confidence", confidence)
    if method not in ("tango", "newcombe"):
        raise ValueError(f"method must be 'tango' or 'newcombe', got {method!r}")
    n = n11 + n10 + n01 + n00
    if n == 0:
        return DiffCI(math.nan, -1.0, 1.0, method, confidence)
    z = float(_st.norm.ppf(0.5 + confidence / 2))
    if method == "tango":
        low, high = _tango(n10, n01, n, z)
    else:
        low, high = _newcombe(n11, n10, n01, n00, z)
    return DiffCI((n01 - n10) / n, low, high, method, confidence)


# ---------------------------------------------------------------- family, power, flips


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
    """Minimum detectable |delta| for McNemar at the given power (Connor 1987, Biometrics 43:207).

    Solves n = [z_a sqrt(psi) + z_b sqrt(psi - d^2)]^2 / d^2 for d. A delta of d needs at least
    d discordant pairs per item, so psi = max(flip_rate, d); with flip_rate 0 this is the
    all-one-way case psi = d. Returns inf when no |delta| <= 1 is detectable (n below z_a^2).
    """
    n = _count("n", n)
    flip_rate = _prob("flip_rate", flip_rate, open_low=False, open_high=False)
    alpha, power = _prob("alpha", alpha), _prob("power", power)
    z_a = float(_st.norm.ppf(1 - (alpha / 2 if _alternative(alternative) == "two-sided" else alpha)))
    z_b = float(_st.norm.ppf(power))

    def required_n(d: float) -> float:
        psi = max(flip_rate, d)
        return (z_a * math.sqrt(psi) + z_b * math.sqrt(max(psi - d * d, 0.0))) ** 2 / (d * d)

    if n < required_n(1.0):
        return math.inf
    return float(optimize.brentq(lambda d: required_n(d) - n, 1e-9, 1.0, xtol=1e-12))


def flip_budget_test(flips: int, n: int, *, budget: float) -> BinomTestResult:
    """Exact one-sided binomial test, H1: the flip rate exceeds ``budget``; p = P(X >= flips).

    Needed because flips that cancel pass McNemar: a balanced flip storm is still a changed model.
    """
    flips, n = _count("flips", flips), _count("n", n)
    if flips > n:
        raise ValueError(f"flips ({flips}) cannot exceed n ({n})")
    budget = _prob("budget", budget, open_low=False, open_high=False)
    pvalue = 1.0 if flips == 0 else float(_st.binom.sf(flips - 1, n, budget))
    return BinomTestResult(flips, n, budget, flips / n if n else math.nan, min(1.0, pvalue))


# ---------------------------------------------------------------- non-binary metrics


def _chunks(n_resamples: int, n: int) -> list[int]:
    size = max(1, _CHUNK_ELEMENTS // n)
    return [min(size, n_resamples - i) for i in range(0, n_resamples, size)]


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    rng: np.random.Generator,
) -> BootstrapResult:
    """Percentile bootstrap of mean(b - a), resampling items so the pairing is kept."""
    d = _pairs(a, b, n_resamples, rng)
    confidence = _prob("confidence", confidence)
    means = np.concatenate(
        [d[rng.integers(0, d.size, size=(k, d.size))].mean(axis=1) for k in _chunks(n_resamples, d.size)]
    )
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return BootstrapResult(float(d.mean()), float(low), float(high), confidence)


def sign_flip_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = 10_000,
    alternative: Alternative = "two-sided",
    rng: np.random.Generator,
) -> PermutationResult:
    """Paired sign-flip permutation test of mean(b - a) = 0.

    Under H0 each difference is symmetric about 0, so its sign is exchangeable. The p-value
    (1 + #{as extreme}) / (1 + n_resamples) is valid at any number of resamples.
    """
    d = _pairs(a, b, n_resamples, rng)
    _alternative(alternative)
    stat = float(d.mean())
    tol = 1e-9 * max(1.0, float(np.abs(d).mean()))  # ties from float rounding count as extreme
    hits = 0
    for k in _chunks(n_resamples, d.size):
        perm = (rng.integers(0, 2, size=(k, d.size)) * 2 - 1) @ d / d.size
        if alternative == "two-sided":
            hits += int((np.abs(perm) >= abs(stat) - tol).sum())
        elif alternative == "greater":
            hits += int((perm >= stat - tol).sum())
        else:
            hits += int((perm <= stat + tol).sum())
    return PermutationResult(stat, (hits + 1) / (n_resamples + 1), alternative)


# ---------------------------------------------------------------- agreement (multiple choice)


def choice_kl(base_logliks: Sequence[float], cand_logliks: Sequence[float]) -> float:
    """KL(P_base || P_cand) in nats between softmaxes over per-choice logliks.

    Sees drift in the answer distribution before it is large enough to flip the top choice.
    """
    x, y = _logliks(base_logliks, cand_logliks)
    lp, lq = x - special.logsumexp(x), y - special.logsumexp(y)
    return max(0.0, float(np.sum(np.exp(lp) * (lp - lq))))


def top1_agree(base_logliks: Sequence[float], cand_logliks: Sequence[float]) -> bool:
    """Whether both arms pick the same choice (ties go to the first, as lm-eval's argmax does)."""
    x, y = _logliks(base_logliks, cand_logliks)
    return bool(np.argmax(x) == np.argmax(y))
