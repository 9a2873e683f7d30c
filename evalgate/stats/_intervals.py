"""Confidence intervals for the paired difference in accuracy, delta = (n01 - n10) / n."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from scipy import optimize
from scipy import stats as _st

from evalgate.stats import _checks as check
from evalgate.stats._margin import tango_score

__all__ = ["DiffCI", "paired_diff_ci"]


@dataclass(frozen=True)
class DiffCI:
    """Confidence interval for delta = p_candidate - p_baseline."""

    estimate: float
    low: float
    high: float
    method: str
    confidence: float


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
        check.count(k, v) for k, v in zip(("n11", "n10", "n01", "n00"), (n11, n10, n01, n00), strict=True)
    )
    confidence = check.prob("confidence", confidence)
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


def _wilson(x: int, n: int, z: float) -> tuple[float, float]:
    centre = (x + z * z / 2) / (n + z * z)
    half = z * math.sqrt(x * (n - x) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def _tango_score(d: float, b: int, c: int, n: int) -> float:
    """Tango's score statistic at delta = d, with b = n01 and c = n10 (decreasing in d)."""
    return float(tango_score(d, c, b, n))


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
