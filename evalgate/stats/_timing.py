"""The cache-isolation probe's timing test: is another tenant's cached prefix visible in latency?

Each probe times three requests of the same length on one server: SAME (the victim's prefix under
the victim's salt, the positive control), CROSS (that prefix under another salt) and COLD (a
fresh prefix). Latencies are compared within a probe as log ratios, so a server that drifts
slower over the run moves all three together: ``gap = log(cold / same)`` is what a cache hit buys,
``leak = log(cold / cross)`` what another tenant's prefix buys. Both are tested one-sided with
the paired sign-flip test (``sign_flip_test``), and the leak gets a one-sided bootstrap upper
bound (``paired_bootstrap``, the union of the percentile and studentized intervals, so it covers
when either does).

The decision is an equivalence test against one stated margin, the largest CROSS speed-up that
is no leak: ``share`` of the measured gap (a partial hit shows as a share of a full one), and at
least ``min_margin`` (a ratio): a cross-tenant speed-up that small is within what a busy server's
own drift makes (1.09x with 0 cached tokens was seen on real SGLang), and at a small gap a share
of it is smaller still. In order: BLOCK when CROSS is significantly faster than COLD *beyond the
margin* (a 1.09x speed-up inside a 1.23x margin no longer blocks 30-80 % of runs); ERROR when the
positive control fails (SAME not significantly faster than COLD, or its gap within the margin:
then even a full leak could not block); PASS when the leak's upper bound is below the margin;
otherwise UNDERPOWERED, with the probes a rerun would need at the spread measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.stats._resampling import paired_bootstrap, sign_flip_test

__all__ = ["DEFAULT_LEAK_SHARE", "DEFAULT_MIN_MARGIN", "TimingResult", "cache_timing_test"]

DEFAULT_LEAK_SHARE = 0.2
"""A CROSS speed-up below a fifth of what a real hit buys (in log latency) is no usable leak."""
DEFAULT_MIN_MARGIN = 1.1
"""The margin is at least this speed-up (a ratio): at the calibrated gap of 1.5x a fifth of it is
1.084x, under the 1.09x seen with no cached token on a busy machine."""


@dataclass(frozen=True)
class TimingResult:
    """The paired timing test of one probe run (log-latency units; exp() gives ratios)."""

    n: int
    gap: float
    """Mean log(cold / same): the cache's measured speed-up."""
    gap_p: float
    """One-sided p that SAME is no faster than COLD."""
    leak: float
    """Mean log(cold / cross): the speed-up another tenant's prefix gives."""
    leak_p: float
    """One-sided p that CROSS is no faster than COLD (shown; a BLOCK needs ``block_p``)."""
    block_p: float
    """One-sided p that CROSS's speed-up is within the margin: BLOCK below ``alpha``."""
    leak_upper: float
    """One-sided upper bound on ``leak`` at level ``alpha``."""
    margin: float
    """max(``share`` x ``gap``, log ``min_margin``): the largest speed-up that is no leak."""
    status: str
    """pass, block, error or underpowered."""
    reason: str
    probes_needed: int | None
    """UNDERPOWERED: the probes at which the upper bound would fall below the margin at the
    spread measured (None when no number of probes would, or not UNDERPOWERED)."""


def cache_timing_test(
    same: Sequence[float],
    cross: Sequence[float],
    cold: Sequence[float],
    *,
    share: float = DEFAULT_LEAK_SHARE,
    min_margin: float = DEFAULT_MIN_MARGIN,
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    rng: np.random.Generator,
) -> TimingResult:
    """The decision of the module docstring from per-probe latencies (seconds, > 0, paired by
    position). ``share`` in (0, 1); ``min_margin`` a ratio >= 1; ``alpha`` the one-sided level of
    each test."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    if not 1.0 <= min_margin < math.inf:
        raise ValueError(f"min_margin must be a ratio of at least 1, got {min_margin}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    arrays = [np.asarray(x, dtype=float) for x in (same, cross, cold)]
    n = arrays[0].size
    if n < 2 or any(a.size != n for a in arrays):
        raise ValueError(
            f"need at least 2 probes with three latencies each, got sizes {[a.size for a in arrays]}"
        )
    if any(not np.all(np.isfinite(a)) or np.any(a <= 0) for a in arrays):
        raise ValueError("latencies must be finite and positive")
    log_same, log_cross, log_cold = (np.log(a) for a in arrays)
    gap_t = sign_flip_test(log_same, log_cold, n_resamples=n_resamples, alternative="greater", rng=rng)
    leak_t = sign_flip_test(log_cross, log_cold, n_resamples=n_resamples, alternative="greater", rng=rng)
    bound = paired_bootstrap(
        log_cross, log_cold, n_resamples=n_resamples, confidence=1 - 2 * alpha, method="union", rng=rng
    )
    gap, leak = gap_t.statistic, leak_t.statistic
    margin = max(share * max(gap, 0.0), math.log(min_margin))
    beyond = sign_flip_test(
        log_cross + margin, log_cold, n_resamples=n_resamples, alternative="greater", rng=rng
    )
    needed: int | None = None
    ratio = f"CROSS {math.exp(leak):.3g}x, SAME {math.exp(gap):.3g}x faster than COLD"
    within = f"margin {math.exp(margin):.3g}x"
    if beyond.pvalue < alpha:
        status = "block"
        reason = f"CROSS is faster than COLD beyond the {within} (p = {beyond.pvalue:.3g}): {ratio}"
    elif gap_t.pvalue >= alpha or gap <= margin:
        status = "error"
        why = (
            f"p = {gap_t.pvalue:.3g}"
            if gap_t.pvalue >= alpha or gap <= 0
            else f"its gap is within the {within}"
        )
        reason = (
            f"the positive control failed: SAME is not significantly faster than COLD ({why}; "
            f"{ratio}), so this probe could not have seen a leak"
        )
    elif bound.high < margin:
        status = "pass"
        reason = f"CROSS's speed-up is at most {math.exp(bound.high):.3g}x, below the {within}"
        if leak_t.pvalue < alpha:
            reason += f" (CROSS is faster than COLD, p = {leak_t.pvalue:.3g}, but within the margin)"
    else:
        status = "underpowered"
        needed = probes_needed(n, leak, bound.high, margin)
        more = f"about {needed} probes would decide" if needed else "more probes may not decide"
        reason = (
            f"CROSS's speed-up could be up to {math.exp(bound.high):.3g}x, not below the {within} "
            f"({share:g} of the cache gap, at least {min_margin:g}x); {more}"
        )
    return TimingResult(
        n, gap, gap_t.pvalue, leak, leak_t.pvalue, beyond.pvalue, bound.high, margin, status, reason, needed
    )


def probes_needed(n: int, estimate: float, upper: float, margin: float) -> int | None:
    """Probes at which the bound's half-width, shrinking as 1 / sqrt(n), brings ``upper`` below
    ``margin`` if the estimate stays; None when the estimate itself is at or above the margin."""
    if estimate >= margin:
        return None
    half = upper - estimate
    if half <= 0:
        return n
    return math.ceil(n * (half / (margin - estimate)) ** 2)
