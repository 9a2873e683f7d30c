"""Non-binary metrics: a percentile bootstrap interval and a sign-flip test of mean(b - a)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from evalgate.stats import _checks as check
from evalgate.stats._checks import Alternative

__all__ = ["BootstrapResult", "PermutationResult", "mde_mean", "paired_bootstrap", "sign_flip_test"]

_CHUNK_ELEMENTS = 4_000_000  # bound on resampling matrices so 10k items x 10k resamples fits in memory


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
    d = check.paired_diffs(a, b, n_resamples, rng)
    confidence = check.prob("confidence", confidence)
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
    d = check.paired_diffs(a, b, n_resamples, rng)
    check.alternative(alternative)
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


def mde_mean(
    n: int, sd: float, *, alpha: float = 0.05, power: float = 0.8, alternative: Alternative = "two-sided"
) -> float:
    """Smallest |mean(b - a)| a test of the mean difference detects with ``power``: the normal
    approximation (z_a + z_b) sd / sqrt(n), ``sd`` the per-item differences' standard deviation."""
    n = check.count("n", n)
    alpha, power = check.prob("alpha", alpha), check.prob("power", power)
    if not (math.isfinite(sd) and sd >= 0):
        raise ValueError(f"sd must be finite and >= 0, got {sd!r}")
    if n == 0:
        return math.inf
    two_sided = check.alternative(alternative) == "two-sided"
    z_a = float(_st.norm.ppf(1 - (alpha / 2 if two_sided else alpha)))
    return (z_a + float(_st.norm.ppf(power))) * float(sd) / math.sqrt(n)
