"""Non-binary metrics: bootstrap intervals and a sign-flip test of mean(b - a).

The percentile interval alone behaves like a Wald interval when the differences sit on a few
items (a skewed mean): with 10 % of 50 items changed it covers 0.84-0.94, not 0.95. The
studentized (bootstrap-t) interval corrects that skew to second order but leans on each
resample's standard error, unstable when few values differ. ``method="union"`` reports the union
of the two from one resampling pass: it covers whenever either does (measured in
tests/stats/test_coverage.py), at little cost where both agree (symmetric, dense differences).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalgate.stats import _checks as check
from evalgate.stats._checks import Alternative
from evalgate.stats._paired import _solve_mde, _z

__all__ = [
    "BOOTSTRAP_METHODS",
    "BootstrapMethod",
    "BootstrapResult",
    "PermutationResult",
    "mde_mean",
    "paired_bootstrap",
    "sign_flip_test",
]

BootstrapMethod = Literal["percentile", "studentized", "union"]
BOOTSTRAP_METHODS: tuple[str, ...] = ("percentile", "studentized", "union")

_CHUNK_ELEMENTS = 4_000_000  # bound on resampling matrices so 10k items x 10k resamples fits in memory


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap interval of mean(b - a)."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str = "percentile"


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
    method: BootstrapMethod = "percentile",
    rng: np.random.Generator,
) -> BootstrapResult:
    """Bootstrap interval of mean(b - a), resampling items so the pairing is kept.

    ``"percentile"``: the resampled means' quantiles. ``"studentized"`` (bootstrap-t, Efron &
    Tibshirani 1993 ch. 12): t* = (mean* - mean) / se* per resample and the interval
    mean - t*_(1 - tail) se .. mean - t*_(tail) se; a resample without spread (se* = 0) counts as
    t* = +-inf, so the bound it decides is unbounded (the caller clips to the metric's range).
    ``"union"``: the union of both intervals. With every difference equal (no spread) each
    collapses to the point: the caller must not read that as certainty (``stats.graded_diff_ci``).
    """
    d = check.paired_diffs(a, b, n_resamples, rng)
    confidence = check.prob("confidence", confidence)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {BOOTSTRAP_METHODS}, got {method!r}")
    means, ses = _resample(d, n_resamples, rng)
    tail = (1 - confidence) / 2
    mean = float(d.mean())
    p_low, p_high = (float(q) for q in np.quantile(means, [tail, 1 - tail]))
    if method == "percentile":
        return BootstrapResult(mean, p_low, p_high, confidence, method)
    se = float(d.std(ddof=1)) / math.sqrt(d.size) if d.size > 1 else 0.0
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))  # spread from float rounding is no spread
    if se <= tol:  # no spread: every resample is the point itself
        t_low, t_high = mean, mean
    else:
        shift = np.where(np.abs(means - mean) <= tol, 0.0, means - mean)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(ses > tol, shift / ses, np.where(shift == 0, 0.0, np.sign(shift) * np.inf))
        q_low, q_high = np.quantile(t, [tail, 1 - tail], method="inverted_cdf")
        t_low, t_high = mean - float(q_high) * se, mean - float(q_low) * se
    if method == "studentized":
        return BootstrapResult(mean, t_low, t_high, confidence, method)
    return BootstrapResult(mean, min(p_low, t_low), max(p_high, t_high), confidence, method)


def _resample(d: np.ndarray, n_resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's mean and standard error (ddof 1; 0 for a single item)."""
    means, ses = [], []
    for k in _chunks(n_resamples, d.size):
        x = d[rng.integers(0, d.size, size=(k, d.size))]
        means.append(x.mean(axis=1))
        ses.append(x.std(axis=1, ddof=1) / math.sqrt(d.size) if d.size > 1 else np.zeros(k))
    return np.concatenate(means), np.concatenate(ses)


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
    n: int,
    sd: float,
    *,
    span: float = 1.0,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: Alternative = "two-sided",
) -> float:
    """Smallest loss of mean(b - a) that a test of the mean difference detects with ``power``
    when it comes on top of the measured noise.

    ``sd``: the spread of the per-item differences with no change (their root mean square, the
    scale of the sign-flip test's null). A change does not just shift every item: one that sits
    on some items raises the spread. The model: a loss d is concentrated on the fewest items it
    can be, d / ``span`` of them each losing the whole range ``span`` (1 for a metric in [0, 1],
    a --repeats per-item mean included), which adds d * span to the second moment, the most any
    change of size d can add; the MDE solves Connor's n = [z_a sqrt(sd^2 + d span) +
    z_b sqrt(sd^2 + d span - d^2)]^2 / d^2 (for a binary metric, sd^2 is the flip rate and this
    is ``mde``), plus span / n: the continuity correction of a test that counts ties as extreme,
    as the sign-flip p does (McNemar's mid-p needs none; so ``mde_mean(n, sqrt(f)) ==
    mde(n, f) + 1 / n``). ``span=0`` is a shift of every item: (z_a + z_b) sd / sqrt(n). Returns
    inf when no loss up to ``span`` is detectable.
    """
    n = check.count("n", n)
    if not (math.isfinite(sd) and sd >= 0):
        raise ValueError(f"sd must be finite and >= 0, got {sd!r}")
    if not (math.isfinite(span) and span >= 0):
        raise ValueError(f"span must be finite and >= 0, got {span!r}")
    z_a, z_b = _z(alpha, power, alternative)
    if n == 0:
        return math.inf
    d = _solve_mde(n, float(sd) ** 2, float(span), z_a, z_b) + span / n
    return d if span == 0 or d <= span else math.inf
