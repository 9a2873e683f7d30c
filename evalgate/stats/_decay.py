"""A test of decay with the order of service: does the arms' disagreement rise once a server has
served some requests (a pool that fills, a cached prefix read back wrong, a worker that degrades
after its first N requests)?

``values`` are one number per item in the order the candidate's server served them: 1 for a
flipped item and 0 for one that agrees, or a document's KL. The statistic looks for the split
where the items after it disagree more than those before, in the two-sample t form with the
pooled variance of all items:

    T = max over k of (mean(x[k:]) - mean(x[:k])) / (s * sqrt(1/k + 1/(n-k))),  m <= k <= n - m

``m`` (``min_segment``) keeps a split from resting on a handful of items. The maximum over k finds a
step (good for N requests, then bad) as well as a gradual rise, and its argmax is where the decay
is said to start. Its null law is the permutation law: under H0 the disagreement does not depend
on the order served, so every ordering of the values is equally likely; s is the same for every
ordering, so only the means move. The p-value is (1 + #{T* >= T}) / (1 + B) over B seeded random
orderings (a resampling p-value is never 0).

The assumption to keep: the order must not carry the items' content. Items served in the dataset's
order (MMLU sorted by subject) would let a subject the candidate finds hard read as decay; the
order has to be a seeded shuffle for the test to mean "the server changed", not "the items did".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.stats._checks import count
from evalgate.stats._drift import _finite
from evalgate.stats._resampling import _chunks

__all__ = ["DecayResult", "service_decay"]


@dataclass(frozen=True)
class DecayResult:
    """One-sided permutation test of a rise in disagreement along the order of service."""

    statistic: float
    """T: the largest standardized rise (0 when no split rises, or every value is the same)."""
    p_value: float
    onset: int | None
    """The split k of T: the first item (0-based, in service order) of the part that disagrees
    more; None where no split rises."""
    before: float
    """The mean disagreement before ``onset`` (the whole mean where there is none)."""
    after: float
    """The mean from ``onset`` on (the whole mean where there is none)."""
    n: int
    n_resamples: int


def _rises(x: np.ndarray, m: int) -> np.ndarray:
    """Per row of ``x`` (orderings of one sample), (mean after k - mean before k) /
    sqrt(1/k + 1/(n-k)) for k = m..n-m; the pooled s is left out (the same for every row)."""
    n = x.shape[-1]
    k = np.arange(m, n - m + 1)
    cum = np.cumsum(x, axis=-1)
    total = cum[..., -1:]
    before = cum[..., k - 1] / k
    after = (total - cum[..., k - 1]) / (n - k)
    return (after - before) / np.sqrt(1.0 / k + 1.0 / (n - k))


def service_decay(
    values: Sequence[float],
    *,
    min_segment: int = 10,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator,
) -> DecayResult:
    """Test H0 "the disagreement does not depend on the order served" against H1 "it rises from
    some point on". ``values``: per item, in service order. With fewer than 2 * ``min_segment``
    items, or every value the same, there is nothing to test: T 0, p 1, no onset. ``seed``: an
    int or a seeded Generator (drawn from, so the caller's stream moves)."""
    x = _finite("values", values)
    m = count("min_segment", min_segment)
    if m < 1:
        raise ValueError("min_segment must be at least 1")
    if count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    n = int(x.size)
    mean = float(x.mean()) if n else math.nan
    s = float(x.std(ddof=1)) if n > 1 else 0.0
    if n < 2 * m or s <= 1e-15 * max(1.0, abs(mean)):
        return DecayResult(0.0, 1.0, None, mean, mean, n, 0)
    rises = _rises(x, m)
    best = int(np.argmax(rises))
    t = float(rises[best])
    onset = m + best if t > 0 else None
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(count("seed", seed))
    hits = 0
    for size in _chunks(n_resamples, n):
        shuffled = rng.permuted(np.broadcast_to(x, (size, n)), axis=1)
        hits += int(np.count_nonzero(_rises(shuffled, m).max(axis=1) >= t - 1e-12 * max(1.0, abs(t))))
    p = (1 + hits) / (1 + n_resamples)
    before = float(x[:onset].mean()) if onset is not None else mean
    after = float(x[onset:].mean()) if onset is not None else mean
    return DecayResult(max(t, 0.0) / s, float(p), onset, before, after, n, n_resamples)
