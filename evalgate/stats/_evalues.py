"""Always-valid e-values: the accuracy test on the stream of discordant pairs and the flip-budget test.

Each discordant pair is a regression (baseline right, candidate wrong) with probability theta;
H0 is theta = 1/2. Mixing the likelihood ratio over theta ~ Beta(a, b) gives the e-process

    E_t = 2^(r+s) B(a + r, b + s) / B(a, b),   r regressions and s improvements after t pairs,

a nonnegative martingale with mean 1 under H0, so by Ville's inequality P(sup_t E_t >= 1/alpha)
<= alpha: the stream may be checked after every pair and stopped at any time without inflating
the false-block rate. With a = b the mixture is symmetric, so the test is two-sided (it grows
for a regression or an improvement); read the direction from ``regressions``/``improvements``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import betainc, betaln
from scipy.stats import beta as _beta

from evalgate.stats import _checks as check

__all__ = [
    "SequentialResult",
    "flip_evalue",
    "flip_futile",
    "sequential_evalue",
    "sequential_futile",
    "sequential_test",
]


@dataclass(frozen=True)
class SequentialResult:
    """Where and why a sequential test on the discordant stream stopped."""

    stopped_at: int  # discordant pairs consumed when the decision was made
    decision: Literal["block", "futile", "continue"]
    evalue: float  # E at stopped_at
    regressions: int  # r at stopped_at
    improvements: int  # s at stopped_at


def _log_evalue(r: np.ndarray | int, s: np.ndarray | int, a: float, b: float) -> np.ndarray:
    out = (np.asarray(r) + np.asarray(s)) * math.log(2.0) + betaln(a + r, b + s) - betaln(a, b)
    return np.asarray(out, dtype=float)


def sequential_evalue(regressions: int, improvements: int, *, a: float = 1.0, b: float = 1.0) -> float:
    """Beta-binomial mixture e-value 2^(r+s) B(a+r, b+s) / B(a, b), computed in log space."""
    r, s = (check.count(k, v) for k, v in (("regressions", regressions), ("improvements", improvements)))
    return float(np.exp(_log_evalue(r, s, check.shape("a", a), check.shape("b", b))))


def sequential_test(
    discordant: Sequence[int],
    *,
    alpha: float = 0.05,
    a: float = 1.0,
    b: float = 1.0,
    n_total: int | None = None,
) -> SequentialResult:
    """Walk the discordant stream (1 = regression, 0 = improvement) and stop at the first decision.

    ``"block"``: E reached 1/alpha. ``"futile"``: E can no longer reach 1/alpha, because even
    the best case, every remaining pair in one direction, stays below it. ``n_total`` bounds the
    stream's final length; a caller that has run k of N items passes ``len(discordant) + N - k``
    (the items left can add at most that many pairs). Without it there is no futility stop.

    The bound is exact, not a heuristic: for a fixed number of further pairs, log E is convex in
    how they split, so its maximum is at an all-one-way split, and along an all-one-way path E is
    first falling then rising, so its maximum is at the path's end.
    """
    x = np.asarray(discordant)
    if x.ndim != 1 or (x.size and not np.isin(x, (0, 1)).all()):
        raise ValueError("discordant must be a 1-D sequence of 0 (improvement) and 1 (regression)")
    if not 0 < float(alpha) < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    a, b = check.shape("a", a), check.shape("b", b)
    t = x.size
    if n_total is not None and check.count("n_total", n_total) < t:
        raise ValueError(f"n_total ({n_total}) is smaller than the stream's length ({t})")
    r = np.concatenate(([0], np.cumsum(x == 1)))
    s = np.arange(t + 1) - r
    log_e = _log_evalue(r, s, a, b)
    threshold = math.log(1 / float(alpha))
    blocked = np.flatnonzero(log_e >= threshold)
    decision: Literal["block", "futile", "continue"] = "block" if blocked.size else "continue"
    stop = int(blocked[0]) if blocked.size else t
    if n_total is not None:
        left = n_total - np.arange(t + 1)
        best = np.maximum(_log_evalue(r + left, s, a, b), _log_evalue(r, s + left, a, b))
        futile = np.flatnonzero(np.maximum(best, log_e) < threshold)
        if futile.size and (decision == "continue" or futile[0] < stop):
            stop, decision = int(futile[0]), "futile"
    return SequentialResult(stop, decision, float(np.exp(log_e[stop])), int(r[stop]), int(stop - r[stop]))


def _futility_threshold(alpha: float, confidence: float) -> float:
    """log(1/alpha), the bar both futility checks ask whether log E can still reach, once their
    shared options are checked."""
    if not 0 < float(alpha) < 1 or not 0.5 < float(confidence) < 1:
        raise ValueError(f"alpha must be in (0, 1) and confidence in (0.5, 1), got {alpha!r}, {confidence!r}")
    return math.log(1 / float(alpha))


def sequential_futile(
    regressions: int,
    improvements: int,
    *,
    items_seen: int,
    items_total: int,
    alpha: float = 0.05,
    a: float = 1.0,
    b: float = 1.0,
    confidence: float = 0.95,
    min_fraction: float = 0.2,
) -> bool:
    """Whether a suite should stop early because the e-value will almost surely not reach 1/alpha.

    Two reasons, either suffices. Exact: even if every item left were a discordant pair in
    one direction, E stays below 1/alpha (see ``sequential_test``). Projected: the items left
    are expected to add ``left * (r + s + 1) / (k + 2)`` discordant pairs; even if they split
    at the ``confidence`` upper (or lower) bound of the regression share seen so far (a
    Beta(r + 1, s + 1) posterior quantile), E ends below 1/alpha. The projection is checked
    only after ``min_fraction`` of the items, so early noise cannot end a suite.

    Stopping for futility never blocks, so it cannot raise the false-block rate; what it costs
    is power, measured in ``benchmarks/sequential_savings.py``.
    """
    r, s = check.count("regressions", regressions), check.count("improvements", improvements)
    k, n = check.count("items_seen", items_seen), check.count("items_total", items_total)
    if k > n or r + s > k:
        raise ValueError(f"inconsistent counts: {r} + {s} discordant of {k} seen of {n} items")
    threshold = _futility_threshold(alpha, confidence)
    a, b = check.shape("a", a), check.shape("b", b)
    left = n - k
    if left == 0:
        return bool(_log_evalue(r, s, a, b) < threshold)
    exact = max(_log_evalue(r + left, s, a, b), _log_evalue(r, s + left, a, b), _log_evalue(r, s, a, b))
    if exact < threshold:
        return True
    if k < min_fraction * n:
        return False
    more = left * (r + s + 1) / (k + 2)
    hi, lo = float(_beta.ppf(confidence, r + 1, s + 1)), float(_beta.ppf(1 - confidence, r + 1, s + 1))
    best = max(float(_log_evalue(r + more * share, s + more * (1 - share), a, b)) for share in (hi, lo))
    return best < threshold


def _log_flip_evalue(flips: float, n: float, budget: float) -> float:
    # log of (1/(1-b)) * integral_b^1 (q/b)^F ((1-q)/(1-b))^(n-F) dq, via the regularized beta
    upper = 1.0 - float(betainc(flips + 1, n - flips + 1, budget))
    if upper <= 0.0:
        return -math.inf
    return (
        -flips * math.log(budget)
        - (n - flips + 1) * math.log1p(-budget)
        + float(betaln(flips + 1, n - flips + 1))
        + math.log(upper)
    )


def flip_evalue(flips: int, n: int, *, budget: float) -> float:
    """Always-valid e-value that the flip rate exceeds ``budget``: the binomial likelihood ratio of
    q against ``budget``, mixed over q uniform on (budget, 1).

    Each item multiplies it by q/b (a flip) or (1-q)/(1-b) (no flip), whose mean is at most 1
    whenever the true rate is at most b, so it is a nonnegative supermartingale under H0 and
    P(sup E >= 1/alpha) <= alpha (Ville): the flip gate may look after every chunk, like the
    accuracy e-value, where the fixed-n binomial test of ``flip_budget_test`` may not.
    """
    f, m = check.count("flips", flips), check.count("n", n)
    if f > m:
        raise ValueError(f"flips ({f}) cannot exceed n ({m})")
    if not 0 < float(budget) < 1:
        raise ValueError(f"budget must be in (0, 1), got {budget!r}")
    return float(math.exp(_log_flip_evalue(f, m, float(budget))))


def flip_futile(
    flips: int,
    *,
    items_seen: int,
    items_total: int,
    budget: float,
    alpha: float = 0.05,
    confidence: float = 0.95,
    min_fraction: float = 0.2,
) -> bool:
    """Whether the flip e-value will almost surely not reach 1/alpha by the last item: even if the
    items left flip at the ``confidence`` upper bound of the rate seen so far, it ends below.
    Like ``sequential_futile``, checked only after ``min_fraction`` of the items; stopping for
    futility never blocks, so it cannot raise the false-block rate."""
    f = check.count("flips", flips)
    k, n = check.count("items_seen", items_seen), check.count("items_total", items_total)
    if f > k or k > n:
        raise ValueError(f"inconsistent counts: {f} flips of {k} seen of {n} items")
    threshold = _futility_threshold(alpha, confidence)
    if _log_flip_evalue(f + (n - k), n, budget) < threshold:
        return True  # exact: not even if every item left flips
    if k < min_fraction * n:
        return False
    rate = float(_beta.ppf(confidence, f + 1, k - f + 1))
    return _log_flip_evalue(f + (n - k) * rate, n, budget) < threshold
