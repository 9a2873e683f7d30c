"""A budget test for a ratio over documents: theta = sum(numer) / sum(denom) (the mean per-token
KLD, or the log perplexity ratio) against a budget, by a paired bootstrap over documents.

Documents, not tokens, are the independent units: a quantization error that bites in one kind of
text (code, numbers) raises the KLD of every token of those documents together, so resampling
tokens would understate the spread by as much as a document's length.

Documents whose drift is exactly 0 (bit-identical on both arms) are bounded on their own: the
bootstrap of mostly-zero documents collapses to [0, 0] at a small n (or to an upper bound of
+inf), so the share of documents that differ gets a Clopper-Pearson bound, times the size of
those that do (``ratio_budget_test``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.stats._binomial import cp_lower, cp_upper
from evalgate.stats._checks import count, prob
from evalgate.stats._drift import _finite
from evalgate.stats._resampling import BOOTSTRAP_METHODS, BootstrapMethod, _chunks

__all__ = [
    "EXACT_METHOD",
    "IDENTICAL_METHOD",
    "NO_INTERVAL_METHOD",
    "ZERO_INFLATED_METHOD",
    "BudgetTest",
    "ratio_budget_test",
]

EXACT_METHOD = "exact (every document has the same ratio)"
NO_INTERVAL_METHOD = "none (fewer than 2 documents)"
IDENTICAL_METHOD = "identical (every document's drift is exactly 0: no differing one to size the drift by)"
"""Every numerator is exactly 0: the estimate and lower bound are 0, the upper bound +inf (how
large a drift the unseen differing documents carry is unknown); ``share_upper`` says how many
documents could differ."""
ZERO_INFLATED_METHOD = "zero-inflated"
"""The prefix of the method where some but not all numerators are exactly 0 (the rest of the
string names the size bound and its assumption): lower bound and p-value from the percentile
bootstrap; upper bound the larger of the percentile one and share x size, the Clopper-Pearson
bound of the share of documents that differ times a bound of the ratio over those documents."""


@dataclass(frozen=True)
class BudgetTest:
    """Paired bootstrap test over documents of theta = sum(numer) / sum(denom) against a budget.

    H0: theta <= budget (within budget); a small ``p_value`` says the data show theta above it.
    ``lower`` and ``upper`` are each one-sided (1 - alpha) bounds: ``lower > budget`` is the
    evidence of excess (it agrees with ``p_value <= alpha`` up to one resample's granularity),
    ``upper <= budget`` the evidence of being within budget.
    """

    estimate: float
    lower: float
    upper: float
    p_value: float
    n: int
    budget: float
    alpha: float
    method: str
    """A ``BOOTSTRAP_METHODS`` name, ``EXACT_METHOD``, ``NO_INTERVAL_METHOD``, ``IDENTICAL_METHOD``,
    or a string starting with ``ZERO_INFLATED_METHOD``."""
    nonzero: int
    """Documents whose numerator is not exactly 0 (that differ between the arms)."""
    share_upper: float | None = None
    """Where some document is exactly 0 (n >= 2): the one-sided (1 - alpha) Clopper-Pearson upper
    bound of the share of documents that differ ("identical on 50 of 50: at most 5.8 % could
    differ"); None where none is."""


def _ratio_inputs(numer: Sequence[float], denom: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = _finite("numer", numer), _finite("denom", denom)
    if x.shape != y.shape:
        raise ValueError(f"numer and denom must have the same length, got {x.size} and {y.size}")
    if (y <= 0).any():
        i = int(np.argmax(y <= 0))
        raise ValueError(
            f"denom[{i}] must be > 0 (a document with no scored units adds nothing), got {y[i]!r}"
        )
    return x, y


def ratio_budget_test(
    numer: Sequence[float],
    denom: Sequence[float],
    *,
    budget: float,
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    method: BootstrapMethod = "union",
    upper_alpha: float | None = None,
    seed: int | np.random.Generator,
) -> BudgetTest:
    """Test theta = sum(numer) / sum(denom) against ``budget`` (H0: theta <= budget), resampling
    documents so each document's numerator and denominator stay together.

    ``numer``/``denom``: per document, the KLD sum and token count (theta: mean per-token KLD),
    or loglik_base - loglik_cand and the token/word/byte count (theta: the log perplexity ratio,
    whose budget for a relative margin m is log(1 + m)).

    Why the union of two bootstraps (``method="union"``, the default): per-document KLD is heavy
    tailed, and at 30-60 documents the percentile interval of a skewed ratio is too short on the
    side the tail makes uncertain (a sample that missed the rare bad documents has a low ratio
    and a small spread). The studentized interval (bootstrap-t on t* = (theta* - theta) / se*, se
    the delta-method standard error sqrt(sum e_i^2 / (n (n - 1))) / mean(denom) with residuals
    e_i = numer_i - theta denom_i) corrects that skew to second order but is erratic when a
    resample's se* is small. Taking the larger upper bound, the smaller lower bound and the
    larger p-value keeps each direction covered whenever either method covers it, at little cost
    where both agree. Measured (benchmarks/sim_drift.py, n = 50, one-sided 0.95, lognormal
    per-document KLD with sigma 0.75 / 1.0, gamma shape 0.5): the lower bound, which decides a
    block, covers 0.96-0.98 (false blocks at the budget <= 0.04); the upper bound 0.93 / 0.91 /
    0.94 (percentile alone 0.90 / 0.86 / 0.89). No interval reaches its level for every heavy
    tail at a fixed n (Bahadur & Savage 1956): a sample that missed the tail cannot show it.

    Documents whose numerator is exactly 0 (bit-identical on both arms; an A/A run on
    deterministic servers has mostly these) make both bootstraps degenerate: at n = 12 with 90 %
    of the population identical, 0.9**12 = 28 % of samples are all 0 and would give [0, 0], and a
    resample of only zeros has se* = 0, which sends the studentized upper bound to +inf. So where
    some are 0 (``ZERO_INFLATED_METHOD``) the studentized part is not used; theta = pi * M * s,
    pi the share of documents that differ, M the ratio over those, s their mean denominator over
    everyone's (taken as measured), and the upper bound is the larger of the percentile one and
    pi_up * M_up * s: pi_up the one-sided Clopper-Pearson bound at alpha / 2 (exact whatever the
    sizes), M_up the ``method`` bound at alpha / 2 over the differing documents alone (at 2-3 of
    them the percentile one, as a resample of one document is too likely for the studentized
    part: about their largest ratio; with one, its own ratio). The assumption, which every bound
    from a sample makes (Bahadur & Savage): no differing document far larger than those seen.
    Measured (benchmarks/sim_drift.py section zero, 1000 replicates, 90 % identical, lognormal
    sigma 0.75 / 1.0 / 1.5, gamma shape 0.5): the upper bound covers 0.94 / 0.89 / 0.77 / 0.82 at
    n = 12 (before: 0.71-0.73, a quarter of them [0, 0]) and 0.95 / 0.93 / 0.86 / 0.90 at n = 50,
    never +inf unless every document is 0. The lower bound and p-value are the percentile
    bootstrap's (covers 0.97-0.99 here; a short lower bound only delays a block). Every numerator
    0 (``IDENTICAL_METHOD``): estimate and lower bound 0, upper +inf, p = 1; ``share_upper``
    bounds how many documents could differ.

    ``upper_alpha``: the level of the upper bound where every document differs (default
    ``alpha``). The gate passes alpha / 2, the level the zero-inflated size bound already uses
    (its limit as the share that differs goes to 1): at alpha the union's upper bound gives false
    "within budget" rates of 0.07-0.10 at n = 30-50 for a lognormal sigma 0.75 law and 0.11-0.13 at
    n = 3-10; at alpha / 2 from n = 30 on 0.045-0.055 (docs/measurements.md, "the fewest documents
    that may be powered"). ``BudgetTest.alpha`` stays ``alpha``.

    When every document has the same nonzero ratio, every resample is theta itself: the interval
    is [theta, theta] and p is 1 if theta <= budget else 0, exactly. Fewer than 2 documents: no
    interval (-inf, inf), p = 1. ``seed``: an int or a seeded Generator (drawn from, so the
    caller's stream moves).
    """
    x, y = _ratio_inputs(numer, denom)
    alpha = prob("alpha", alpha)
    up = alpha if upper_alpha is None else prob("upper_alpha", upper_alpha)
    if not math.isfinite(budget):
        raise ValueError(f"budget must be finite, got {budget!r}")
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {BOOTSTRAP_METHODS}, got {method!r}")
    if count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    n = int(x.size)
    theta = float(x.sum() / y.sum()) if n else math.nan

    nonzero = int(np.count_nonzero(x))
    share = cp_upper(nonzero, n, alpha) if 2 <= n and nonzero < n else None

    def result(lower: float, upper: float, p: float, how: str) -> BudgetTest:
        return BudgetTest(theta, lower, upper, p, n, float(budget), alpha, how, nonzero, share)

    if n < 2:
        return result(-math.inf, math.inf, 1.0, NO_INTERVAL_METHOD)
    if nonzero == 0:
        return result(0.0, math.inf, 1.0, IDENTICAL_METHOD)
    resid = x - theta * y
    tol = 1e-12 * max(1.0, float(np.abs(x).max()))
    if nonzero == n and float(np.abs(resid).max()) <= tol:
        return result(theta, theta, 1.0 if theta <= budget else 0.0, EXACT_METHOD)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(count("seed", seed))
    thetas, ses = _resample_ratio(x, y, n_resamples, rng)
    p_lower, p_upper = (float(v) for v in np.quantile(thetas, [alpha, 1 - alpha]))
    p_pct = _pvalue(int(np.count_nonzero(thetas <= budget)), thetas.size)
    if nonzero < n:
        mixed, how = _share_times_size(x, y, alpha=alpha, n_resamples=n_resamples, method=method, rng=rng)
        return result(p_lower, max(p_upper, mixed), p_pct, how)
    if up != alpha:
        p_upper = float(np.quantile(thetas, 1 - up))
    if method == "percentile":
        return result(p_lower, p_upper, p_pct, method)
    se = math.sqrt(float((resid**2).sum()) / (n * (n - 1))) / float(y.mean())
    flat = 1e-12 * max(1.0, abs(theta))  # a resample's spread from float rounding is no spread
    shift = np.where(np.abs(thetas - theta) <= flat, 0.0, thetas - theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ses > flat, shift / ses, np.where(shift == 0, 0.0, np.sign(shift) * np.inf))
    q_low = float(np.quantile(t, up, method="inverted_cdf"))
    q_high = float(np.quantile(t, 1 - alpha, method="inverted_cdf"))
    t_lower, t_upper = theta - q_high * se, theta - q_low * se
    p_t = _pvalue(int(np.count_nonzero(t >= (theta - budget) / se)), t.size)
    if method == "studentized":
        return result(t_lower, t_upper, p_t, method)
    return result(min(p_lower, t_lower), max(p_upper, t_upper), max(p_pct, p_t), method)


def _share_times_size(
    x: np.ndarray,
    y: np.ndarray,
    *,
    alpha: float,
    n_resamples: int,
    method: BootstrapMethod,
    rng: np.random.Generator,
) -> tuple[float, str]:
    """pi_up * M_up * s of ``ratio_budget_test`` (each bound at alpha / 2), and the method."""
    nz = x != 0
    n, k = x.size, int(nz.sum())
    xs, ys = x[nz], y[nz]
    half = alpha / 2
    if k == 1:
        size, how = float(xs[0] / ys[0]), "the 1 differing document's ratio (assumed: none larger)"
    else:
        # a resample of one document has se* = 0 and t = +-inf: once those below theta pass
        # alpha / 2 of the resamples (k = 2, 3 at alpha 0.05) the studentized bound is +inf
        degenerate = math.log(k - 1) - k * math.log(k) > math.log(half / 2)
        inner: BootstrapMethod = "percentile" if degenerate else method
        kw = {"alpha": half, "n_resamples": n_resamples, "method": inner, "seed": rng}
        size = ratio_budget_test(xs, ys, budget=0.0, **kw).upper  # type: ignore[arg-type]
        seen = " (assumed: none larger than those seen)" if k <= 3 else ""
        how = f"{inner} size of the {k} differing documents{seen}"
    pi = cp_upper(k, n, half) if size >= 0 else cp_lower(k, n, half)
    mixed = pi * size * float(ys.mean() / y.mean())
    return mixed, f"{ZERO_INFLATED_METHOD}: percentile, and Clopper-Pearson share x {how}"


def _pvalue(hits: int, resamples: int) -> float:
    """(1 + hits) / (1 + resamples): a resampling p-value is never 0 (Davison & Hinkley 1997, 4.4),
    the same rule as the sign-flip test's."""
    return (1 + hits) / (1 + resamples)


def _resample_ratio(
    x: np.ndarray, y: np.ndarray, n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's ratio and delta-method standard error. The indices are drawn as
    ``scipy.stats.bootstrap(..., paired=True)`` draws them (one (n_resamples, n) block while it
    fits), so the percentile part can be checked against it on the same resamples."""
    n = x.size
    thetas, ses = [], []
    for k in _chunks(n_resamples, n):
        idx = rng.integers(0, n, size=(k, n))
        xs, ys = x[idx], y[idx]
        sy = ys.sum(axis=1)
        th = xs.sum(axis=1) / sy
        e = xs - th[:, None] * ys
        thetas.append(th)
        ses.append(np.sqrt((e**2).sum(axis=1) / (n * (n - 1))) * n / sy)
    return np.concatenate(thetas), np.concatenate(ses)
