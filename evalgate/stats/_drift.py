"""Per-token distribution drift between the arms, and a budget test for a ratio over documents.

Per position: KL(baseline || candidate) from the two top-k lists (``position_kld``, vectorised over
a document's positions by ``position_klds``) and whether the most likely token is the same. Per
document: the sum of the position KLDs and the token count. Over documents: the ratio of sums
theta = sum(numer) / sum(denom) (the mean per-token KLD, or the log perplexity ratio), tested
against a budget with a paired bootstrap over documents (``ratio_budget_test``).

Documents, not tokens, are the independent units: a quantization error that bites in one kind of
text (code, numbers) raises the KLD of every token of those documents together, so resampling
tokens would understate the spread by as much as a document's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.stats._checks import count, prob
from evalgate.stats._resampling import BOOTSTRAP_METHODS, BootstrapMethod, _chunks

__all__ = [
    "EXACT_METHOD",
    "LOGPROB_FLOOR",
    "NO_INTERVAL_METHOD",
    "REMAINDER_FLOOR",
    "BudgetTest",
    "DocDrift",
    "TopList",
    "document_drift",
    "kld_quantiles",
    "perplexity_ratio",
    "position_kld",
    "position_klds",
    "ratio_budget_test",
    "top1_same",
]

TopList = Sequence[Sequence[float]]
"""One position's top-k: (token id, logprob) pairs, most likely first (JSON lists work too)."""

REMAINDER_FLOOR = 1e-6
"""Q's remainder mass below this is not measured: it is 1 - (a sum of up to ~20 probabilities
that servers compute in float32), whose rounding is about 20 * 2**-24 = 1.2e-6, so a remainder
of 0 (or a little below 0, clamped) where P's is 0.3 says only "at most ~1e-6". Flooring Q's
remainder there (never above P's own remainder) only lowers the term r_p log(r_p / r_q), so the
value stays a lower bound whenever the true remainder is under the floor."""
LOGPROB_FLOOR = math.log(float(np.finfo(np.float32).tiny))
"""A shared token's candidate logprob below log(float32's smallest normal), about -87.3, is not
measured either: llama.cpp reports a probability that underflowed as -inf or as the lowest float
(-3.4e38), which would make one position's KLD 1e38. Floored likewise (never above P's logprob)."""
EXACT_METHOD = "exact (every document has the same ratio)"
NO_INTERVAL_METHOD = "none (fewer than 2 documents)"


@dataclass(frozen=True)
class DocDrift:
    """One document's drift between two arms, summed over its positions."""

    kld_sum: float
    """Sum over positions of the bucketed KL(baseline || candidate), nats."""
    top1_same: int
    """Positions where both arms' most likely token is the same."""
    n: int
    """Positions compared."""


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
    """A ``BOOTSTRAP_METHODS`` name, ``EXACT_METHOD`` or ``NO_INTERVAL_METHOD``."""


def _as_float(value: object, where: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {value!r}") from None


def _tops(positions: Sequence[TopList], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, logprobs, valid) arrays of shape (positions, k), ragged lists padded with invalid
    entries (id -1, logprob -inf). Refuses an empty list, a NaN or +inf logprob, a non-integer id
    and an id listed twice at one position, naming the position."""
    try:
        arr = np.asarray(positions, dtype=float)
        ok = arr.ndim == 3 and arr.shape[2] == 2 and arr.shape[1] > 0
    except (TypeError, ValueError):  # ragged: pad below
        ok = False
    if ok:
        ids, lps = arr[:, :, 0], arr[:, :, 1]
        valid = np.ones(ids.shape, dtype=bool)
    else:
        k = max((len(top) for top in positions), default=0)
        ids = np.full((len(positions), k), -1.0)
        lps = np.full((len(positions), k), -np.inf)
        valid = np.zeros((len(positions), k), dtype=bool)
        for i, top in enumerate(positions):
            if len(top) == 0:
                raise ValueError(f"{name}[{i}]: empty top list (no distribution to compare)")
            for j, pair in enumerate(top):
                if len(pair) != 2:
                    raise ValueError(f"{name}[{i}][{j}]: expected (token id, logprob), got {pair!r}")
                ids[i, j] = _as_float(pair[0], f"{name}[{i}][{j}] token id")
                lps[i, j] = _as_float(pair[1], f"{name}[{i}][{j}] logprob")
                valid[i, j] = True
    bad = np.isnan(lps) | (lps == np.inf) | (valid & ((ids != np.round(ids)) | (ids < 0)))
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}[{i}][{j}]: the token id must be a non-negative integer and the logprob not NaN "
            f"or +inf, got ({ids[i, j]!r}, {lps[i, j]!r})"
        )
    ordered = np.sort(np.where(valid, ids, -1 - np.arange(ids.shape[1])), axis=1)
    dup = (np.diff(ordered, axis=1) == 0).any(axis=1)
    if dup.any():
        raise ValueError(f"{name}[{int(np.argmax(dup))}]: a token id is listed twice")
    return ids, lps, valid


def _compare(
    base_positions: Sequence[TopList],
    cand_positions: Sequence[TopList],
    names: tuple[str, str] = ("base_positions", "cand_positions"),
) -> tuple[np.ndarray, np.ndarray]:
    """(bucketed KLD, same top-1) per position, all positions at once."""
    if len(base_positions) != len(cand_positions):
        raise ValueError(
            f"the arms scored different numbers of positions: {len(base_positions)} and {len(cand_positions)}"
        )
    if len(base_positions) == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    p_ids, lp, p_ok = _tops(base_positions, names[0])
    q_ids, lq, q_ok = _tops(cand_positions, names[1])
    match = (p_ids[:, :, None] == q_ids[:, None, :]) & p_ok[:, :, None] & q_ok[:, None, :]
    shared = match.any(axis=2)
    lq_at = np.take_along_axis(lq, match.argmax(axis=2), axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        p = np.where(shared, np.exp(lp), 0.0)
        q = np.where(shared, np.exp(lq_at), 0.0)
        lq_eff = np.maximum(lq_at, np.minimum(lp, LOGPROB_FLOOR))
        terms = np.where(shared & (p > 0), p * (lp - lq_eff), 0.0)
        # both remainders sum the shared tokens in P's order: equal inputs give equal sums
        r_p = np.maximum(0.0, 1.0 - p.sum(axis=1))
        r_q = np.maximum(0.0, 1.0 - q.sum(axis=1))
        r_q_eff = np.maximum(r_q, np.minimum(r_p, REMAINDER_FLOOR))
        rest = np.where((r_p > 0) & (r_p != r_q), r_p * (np.log(r_p) - np.log(r_q_eff)), 0.0)
    return np.maximum(0.0, terms.sum(axis=1) + rest), _top1(p_ids, lp) == _top1(q_ids, lq)


def position_klds(base_positions: Sequence[TopList], cand_positions: Sequence[TopList]) -> np.ndarray:
    """``position_kld`` at every position of a document at once (one array per document, so
    the gate's 50 documents x 100 positions x 3 pairs stay a few hundred numpy calls)."""
    return _compare(base_positions, cand_positions)[0]


def position_kld(p_top: TopList, q_top: TopList) -> float:
    """KL(P || Q) in nats at one position, P the baseline's and Q the candidate's top-k lists of
    (token id, logprob).

    The vocabulary is coarsened into one bucket per token in BOTH lists plus one remainder
    bucket (each side's 1 - sum of its shared tokens' probabilities, clamped at 0). KL on a
    coarsening is a LOWER bound on the true KL (data-processing inequality), and the chain rule
    says by how much: the gap is exactly r_p * KL(P | rest || Q | rest), the divergence within the
    remainder weighted by P's remainder mass r_p. So r_p bounds how much of P the value cannot
    see token by token: near 0, the bound is tight unless the tails differ wildly. A token in only
    one list sits in the remainder on both sides.

    Equal inputs give exactly 0.0: each term is p * (lp - lq) from the logprobs, which cancels
    exactly. Q's mass below what the logprobs resolve is floored (``REMAINDER_FLOOR``,
    ``LOGPROB_FLOOR``) so the value stays finite; a negative total from rounding is clamped to 0.
    """
    return float(_compare([p_top], [q_top], ("p_top", "q_top"))[0][0])


def _top1(ids: np.ndarray, lps: np.ndarray) -> np.ndarray:
    return np.take_along_axis(ids, np.argmax(lps, axis=1)[:, None], axis=1)[:, 0]


def top1_same(p_top: TopList, q_top: TopList) -> bool:
    """Whether both arms' most likely token is the same. Ties go to the entry listed first (the
    lists come best first, so that is the first entry's id)."""
    p_ids, lp, _ = _tops([p_top], "p_top")
    q_ids, lq, _ = _tops([q_top], "q_top")
    return bool(_top1(p_ids, lp)[0] == _top1(q_ids, lq)[0])


def document_drift(base_positions: Sequence[TopList], cand_positions: Sequence[TopList]) -> DocDrift:
    """One document's KLD sum, top-1 agreements and position count: the per-document numerator
    and denominator of the mean per-token KLD (``ratio_budget_test``) and of top-1 agreement."""
    klds, same = _compare(base_positions, cand_positions)
    return DocDrift(float(klds.sum()), int(same.sum()), int(klds.size))


def _finite(name: str, values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] is not finite: {x[i]!r}")
    return x


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

    When every document has the same ratio (every numerator 0 included: an A/A run on
    deterministic servers), every resample is theta itself: the interval is [theta, theta] and
    p is 1 if theta <= budget else 0, exactly. Fewer than 2 documents: no interval (-inf, inf),
    p = 1. ``seed``: an int or a seeded Generator (drawn from, so the caller's stream moves).
    """
    x, y = _ratio_inputs(numer, denom)
    alpha = prob("alpha", alpha)
    if not math.isfinite(budget):
        raise ValueError(f"budget must be finite, got {budget!r}")
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {BOOTSTRAP_METHODS}, got {method!r}")
    if count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    n = int(x.size)
    theta = float(x.sum() / y.sum()) if n else math.nan

    def result(lower: float, upper: float, p: float, how: str) -> BudgetTest:
        return BudgetTest(theta, lower, upper, p, n, float(budget), alpha, how)

    if n < 2:
        return result(-math.inf, math.inf, 1.0, NO_INTERVAL_METHOD)
    resid = x - theta * y
    tol = 1e-12 * max(1.0, float(np.abs(x).max()))
    if float(np.abs(resid).max()) <= tol:
        return result(theta, theta, 1.0 if theta <= budget else 0.0, EXACT_METHOD)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(count("seed", seed))
    thetas, ses = _resample_ratio(x, y, n_resamples, rng)
    p_lower, p_upper = (float(v) for v in np.quantile(thetas, [alpha, 1 - alpha]))
    p_pct = _pvalue(int(np.count_nonzero(thetas <= budget)), thetas.size)
    if method == "percentile":
        return result(p_lower, p_upper, p_pct, method)
    se = math.sqrt(float((resid**2).sum()) / (n * (n - 1))) / float(y.mean())
    flat = 1e-12 * max(1.0, abs(theta))  # a resample's spread from float rounding is no spread
    shift = np.where(np.abs(thetas - theta) <= flat, 0.0, thetas - theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ses > flat, shift / ses, np.where(shift == 0, 0.0, np.sign(shift) * np.inf))
    q_low, q_high = (float(v) for v in np.quantile(t, [alpha, 1 - alpha], method="inverted_cdf"))
    t_lower, t_upper = theta - q_high * se, theta - q_low * se
    p_t = _pvalue(int(np.count_nonzero(t >= (theta - budget) / se)), t.size)
    if method == "studentized":
        return result(t_lower, t_upper, p_t, method)
    return result(min(p_lower, t_lower), max(p_upper, t_upper), max(p_pct, p_t), method)


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


def perplexity_ratio(ll_base: Sequence[float], ll_cand: Sequence[float], units: Sequence[float]) -> float:
    """The candidate's perplexity over the baseline's on the same documents, > 1 is worse:
    exp((sum ll_base - sum ll_cand) / sum units). Per arm, exp(-sum ll / sum units) is lm-eval's
    ``weighted_perplexity`` (lm_eval/api/metrics.py: exp(-weighted_mean) of (loglik, count)
    pairs), so this is the ratio of the two perplexities lm-eval would report."""
    a, b = _finite("ll_base", ll_base), _finite("ll_cand", ll_cand)
    u = _finite("units", units)
    if not (a.shape == b.shape == u.shape) or a.size == 0:
        raise ValueError(
            f"ll_base, ll_cand and units must be non-empty, of equal length: {a.size}, {b.size}, {u.size}"
        )
    if (u < 0).any() or u.sum() <= 0:
        raise ValueError("units must be >= 0 with a positive sum")
    return math.exp((float(a.sum()) - float(b.sum())) / float(u.sum()))


def kld_quantiles(values: Sequence[float], qs: Sequence[float] = (0.5, 0.9, 0.99, 0.999)) -> dict[str, float]:
    """Quantiles of per-token KLDs for the report, keyed "p50", "p90", "p99", "p99.9" (linear
    interpolation, numpy's default): a mean can hide a few positions where the candidate is
    badly off. With no values every quantile is NaN."""
    v = _finite("values", values)
    for q in qs:
        prob("qs", q, open_low=False, open_high=False)
    keys = [f"p{100 * q:g}" for q in qs]
    if v.size == 0:
        return dict.fromkeys(keys, math.nan)
    return {key: float(val) for key, val in zip(keys, np.quantile(v, list(qs)), strict=True)}
