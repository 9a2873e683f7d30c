"""Agreement of two sampled arms: does the candidate disagree with the baseline more than the
baseline disagrees with itself from one sample to the next?

Under sampling a fixed flip budget is meaningless: two samples of the same model disagree on many
items by chance. Per item i with k repeats, b_r and c_r the arms' 0/1 outcomes of repeat r (the
same seed on both arms), take over ordered pairs of repeats r != s

    D_i = share of (r, s) with b_r != c_s        (cross-arm disagreement)
    S_i = share of (r, s) with b_r != b_s        (the baseline's own repeat-to-repeat disagreement)
    C_i = share of (r, s) with c_r != c_s        (the candidate's)
    e_i = D_i - (S_i + C_i) / 2

Pairs with r == s are left out: they share a seed, so they are coupled, while r != s are
independent draws. For 0/1 outcomes e_i = sum_{r != s} d_r d_s / (k (k - 1)) with d_r = b_r - c_r,
the unbiased estimate of (p_b,i - p_c,i)^2 >= 0; it is 0 in expectation when the arms sample the
same per-item probability, and for a deterministic item it is the flip indicator, so a margin on
its mean reads like ``--aa``'s margin on excess flips.

Under the regression policy only the candidate's losses count, and an item's direction must not be
read off the draws that then measure it: keeping the items with sum_r d_r > 0 selects the noise
that favours the baseline (at an exact A/A with k = 2 and unshared draws, (p (1 - p))^2 per
item: +6.25 pt at p = 0.5). The regression excess is split by repeat instead: a regression on
repeat r (d_r = 1) is measured on every other repeat s of the item,

    e_i = sum_{r != s} [d_r = 1] d_s / (k (k - 1)) = n+ (n+ - n- - 1) / (k (k - 1)),

n+ and n- the item's same-seed regressions and improvements. Repeats r != s are independent draws,
so E e_i = a_i delta_i exactly, a_i = P(d_r = 1) (a same-seed regression) and delta_i = p_b,i -
p_c,i: 0 at an A/A, positive for a loss (at least delta_i^2, since a_i >= delta_i), never positive
for a gain (an improvement never adds), the regression indicator for a deterministic item, and
delta_i^2 on regressed items when the arms share every draw. It works from k = 2, where no split
leaves two repeats to estimate delta_i^2 on: with two repeats, no unbiased estimate of a
regression-only excess exists that is 0 at an A/A and ignores gains, and this one subtracts them.

The test is one-sided, H1: mean e > margin, and blocks only when two tests agree (an
intersection-union test; the p-value is the larger of the two):

- an exchange test: swapping the arm labels of each repeat pair (b_r, c_r) independently (a sign
  flip of d_r) is exact under H0 "the arms are exchangeable", common seeds included, since the
  coupling of a pair is symmetric in the arms: exhaustive when at most ``log2(n_resamples)``
  repeat pairs differ, seeded Monte Carlo above;
- a margin test: a percentile bootstrap over items (an item's repeats stay together) of mean e,
  p = share of resampled means at or below the margin.

A/A (identical arms) is thus held at alpha exactly; the margin's boundary is held approximately
(``benchmarks/sim_repeats.py`` measures both).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from evalgate.stats import _checks as check

__all__ = ["SampledExcessResult", "sampled_excess_test"]

_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class SampledExcessResult:
    """The sampled agreement test of one suite (means over items)."""

    estimate: float
    """Mean excess e (cross-arm disagreement over the arms' own, repeat to repeat); with
    ``regressions``, the split estimate: same-seed regressions measured on the item's other repeats."""
    cross: float
    """Mean D: share of repeat pairs (r != s) on which the arms disagree."""
    within_x: float
    """Mean S: the baseline's repeat-to-repeat disagreement."""
    within_y: float
    """Mean C: the candidate's."""
    margin: float
    pvalue: float
    """max(p_exchange, p_margin)."""
    p_exchange: float
    p_margin: float
    items: int
    k: int
    method: str
    """"exact" when every sign pattern was enumerated, else "monte carlo"."""


def _validate(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"x and y must be 2-D (items, repeats) of one shape, got {x.shape} and {y.shape}")
    if x.shape[0] == 0 or x.shape[1] < 2:
        raise ValueError(f"need at least one item and two repeats, got shape {x.shape}")
    if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
        raise ValueError("x and y must hold 0/1 outcomes")
    return x, y


def _excess(d: np.ndarray, k: int, regressions: bool) -> np.ndarray:
    """Per-item e from d (items, repeats): ((sum d)^2 - sum d^2) / (k (k - 1)), or under the
    regression policy the split estimate n+ (sum d - 1) / (k (k - 1))."""
    s, m = d.sum(axis=-1), (d * d).sum(axis=-1)
    return _item_excess(s, m, k, regressions)


def _item_excess(s: np.ndarray, m: np.ndarray, k: int, regressions: bool) -> np.ndarray:
    """e from an item's signed sum s and count m of differing repeat pairs (n+ = (m + s) / 2)."""
    if regressions:
        return (m + s) / 2 * (s - 1) / (k * (k - 1))
    return (s * s - m) / (k * (k - 1))


def _disagreement(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per item: share of ordered repeat pairs r != s with u_r != v_s (0/1 outcomes)."""
    k = u.shape[1]
    nu, nv = u.sum(axis=1), v.sum(axis=1)
    all_pairs = nu * (k - nv) + nv * (k - nu)
    same_index = (u != v).sum(axis=1)
    return np.asarray((all_pairs - same_index) / (k * (k - 1)), dtype=float)


def sampled_excess_test(
    x: np.ndarray,
    y: np.ndarray,
    *,
    margin: float,
    n_resamples: int = 10_000,
    regressions: bool = False,
    rng: np.random.Generator,
) -> SampledExcessResult:
    """One-sided test of H1: mean excess disagreement > ``margin``; ``x`` (baseline) and ``y``
    (candidate) are (items, repeats) arrays of 0/1 outcomes, column r of both the same seed."""
    x, y = _validate(x, y)
    margin = check.prob("margin", margin, open_low=False)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a seeded numpy.random.Generator, got {type(rng).__name__}")
    if check.count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    n, k = x.shape
    d = x - y
    e = _excess(d, k, regressions)
    stat = float(e.mean())
    p_exchange, method = _exchange_p(d, stat, n, k, n_resamples, regressions, rng)
    p_margin = _margin_p(e, margin, n_resamples, rng)
    return SampledExcessResult(
        estimate=stat, cross=float(_disagreement(x, y).mean()), within_x=float(_disagreement(x, x).mean()),
        within_y=float(_disagreement(y, y).mean()), margin=margin, pvalue=max(p_exchange, p_margin),
        p_exchange=p_exchange, p_margin=p_margin, items=n, k=k, method=method,
    )  # fmt: skip


def _exchange_p(
    d: np.ndarray, stat: float, n: int, k: int, n_resamples: int, regressions: bool, rng: np.random.Generator
) -> tuple[float, str]:
    """P(mean e under random arm swaps >= observed). Only repeat pairs that differ can change:
    with their signs s_i = sum of the item's signed differences, e_i = (s_i^2 - m_i) / (k (k - 1))
    (regressions: (m_i + s_i) / 2 (s_i - 1) / (k (k - 1))), m_i the item's differing pairs; items
    without one add 0 to every resampled mean."""
    rows, cols = np.nonzero(d)
    if rows.size == 0:
        return 1.0, "exact"
    values = d[rows, cols]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])  # each item's first entry (row-major)
    m_i = np.diff(np.r_[starts, rows.size])
    tol = 1e-9 * max(1.0, abs(stat))

    def hits(signs: np.ndarray) -> int:
        s = np.add.reduceat(signs * values, starts, axis=1)
        e = _item_excess(s, m_i, k, regressions)
        return int((e.sum(axis=1) / n >= stat - tol).sum())

    m = rows.size
    if 2**m <= n_resamples:  # every sign pattern of the differing pairs
        return hits(np.array(list(itertools.product((1.0, -1.0), repeat=m)))) / 2**m, "exact"
    count, step = 0, max(1, _CHUNK_ELEMENTS // m)
    for start in range(0, n_resamples, step):
        size = min(step, n_resamples - start)
        bits = np.unpackbits(rng.integers(0, 256, size=(size, -(-m // 8)), dtype=np.uint8), axis=1)[:, :m]
        count += hits(bits.astype(np.float64) * 2 - 1)
    return (count + 1) / (n_resamples + 1), "monte carlo"


def _margin_p(e: np.ndarray, margin: float, n_resamples: int, rng: np.random.Generator) -> float:
    """Percentile bootstrap over items: (1 + #{resampled mean e <= margin}) / (1 + resamples)."""
    n = e.size
    if float(e.min()) > margin:  # every resample's mean is above the margin
        return 1 / (n_resamples + 1)
    if float(e.max()) <= margin:
        return 1.0
    low = 0
    step = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_resamples, step):
        size = min(step, n_resamples - start)
        means = e[rng.integers(0, n, size=(size, n))].mean(axis=1)
        low += int((means <= margin + 1e-12).sum())
    return min(1.0, (low + 1) / (n_resamples + 1))
