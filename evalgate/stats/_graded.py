"""The interval of a graded row: mean(b - a) of per-item values in a bounded range, with a level
that holds when the differences are sparse, and when none differ at all.

Two regimes, chosen by how many items differ between the arms:

- **enough differ** (at least ``min_differing``): the union of the percentile and studentized
  bootstrap intervals (``paired_bootstrap(method="union")``). The percentile interval alone is a
  Wald interval in disguise when the change sits on a few items: at the non-inferiority margin
  its one-sided type I error reached 0.10-0.175 with 10 % of 50-200 items changed. The
  studentized interval widens the side the skew makes uncertain; the union covers whenever either
  does.
- **too few differ**: resampling has nothing to resample. With every item identical the bootstrap
  interval is [0, 0], so five identical items would show non-inferiority at any margin. The
  interval is then Tango's score interval (``paired_diff_ci``) on the changes counted as whole
  flips: an item's loss |d_i| / span is a fraction of a baseline-right, candidate-wrong pair, its
  gain of the reverse. For a 0/1 metric (or --repeats outcomes averaged per item) this is the
  very bound a binary suite of the same items gets (5 identical items: -35 pt at 90 %); for a
  graded change it is conservative, since spreading each change over a whole flip only adds
  variance (a mean-preserving spread). So a few identical items never pass non-inferiority, while
  a thousand identical items still do, as a binary suite would.

Why not invert the sign-flip test at -margin: shifting the differences by the margin breaks the
symmetry that test needs exactly where it matters (a few large losses among many zeros): with
10 % of 50 items changed by -0.2 at a 2 pt margin it rejects whenever two or fewer changed,
P = 0.11 at a one-sided 0.05.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from evalgate.stats import _checks as check
from evalgate.stats._intervals import _tango
from evalgate.stats._resampling import paired_bootstrap

__all__ = ["FLIP_METHOD", "MIN_DIFFERING", "RESAMPLE_METHOD", "GradedCI", "graded_diff_ci"]

MIN_DIFFERING = 10
"""Fewer items whose value differs than this: the bootstrap has too little to resample, and the
interval counts each change as a whole flip instead."""
RESAMPLE_METHOD = "bootstrap (union of percentile and studentized)"
FLIP_METHOD = "tango (changes counted as whole flips)"


@dataclass(frozen=True)
class GradedCI:
    """Interval of mean(b - a) for a graded metric."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    """``RESAMPLE_METHOD`` or ``FLIP_METHOD``."""
    differing: int
    """Items whose value differs between the arms."""

    @property
    def resampled(self) -> bool:
        """False when too few items differed and the changes were counted as whole flips."""
        return self.method == RESAMPLE_METHOD


def graded_diff_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = 0.95,
    span: float = 1.0,
    min_differing: int = MIN_DIFFERING,
    n_resamples: int = 10_000,
    rng: np.random.Generator,
) -> GradedCI:
    """Two-sided ``confidence`` interval of mean(b - a) for values within a range of width
    ``span`` (1 for a metric in [0, 1]; every |b_i - a_i| must be at most ``span``), clipped to
    [-span, span]. Its lower bound is a one-sided (1 + confidence) / 2 bound, the one
    non-inferiority tests against -margin."""
    d = check.paired_diffs(a, b, n_resamples, rng)
    confidence = check.prob("confidence", confidence)
    if not (math.isfinite(span) and span > 0):
        raise ValueError(f"span must be finite and > 0, got {span!r}")
    if float(np.abs(d).max()) > span * (1 + 1e-12):
        raise ValueError(f"a difference exceeds span {span!r}: {float(np.abs(d).max())!r}")
    min_differing = check.count("min_differing", min_differing)
    differing = int((d != 0).sum())
    mean = float(d.mean())
    if differing < min_differing:
        losses = float(np.clip(-d, 0.0, None).sum()) / span
        gains = float(np.clip(d, 0.0, None).sum()) / span
        z = float(_st.norm.ppf(0.5 + confidence / 2))
        low, high = _tango(losses, gains, d.size, z)  # type: ignore[arg-type]
        return GradedCI(mean, low * span, high * span, confidence, FLIP_METHOD, differing)
    res = paired_bootstrap(a, b, n_resamples=n_resamples, confidence=confidence, method="union", rng=rng)
    low, high = max(-span, res.low), min(span, res.high)
    return GradedCI(mean, low, high, confidence, RESAMPLE_METHOD, differing)
