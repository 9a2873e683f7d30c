"""Input validation shared by the statistics: each check returns the cleaned value or raises
ValueError naming the argument, so the formulas themselves only compute."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Literal

import numpy as np

Alternative = Literal["two-sided", "less", "greater"]
ALTERNATIVES = ("two-sided", "less", "greater")


def count(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative integer count, got bool {value!r}")
    try:
        out = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be a non-negative integer count, got {value!r}") from None
    if out < 0:
        raise ValueError(f"{name} must be a non-negative integer count, got {out}")
    return out


def prob(name: str, value: float, *, open_low: bool = True, open_high: bool = True) -> float:
    v = float(value)
    low_bad = v <= 0.0 if open_low else v < 0.0
    high_bad = v >= 1.0 if open_high else v > 1.0
    if math.isnan(v) or low_bad or high_bad:
        lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return v


def shape(name: str, value: float) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive finite Beta shape, got {value!r}")
    return v


def alternative(value: str) -> str:
    if value not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {value!r}")
    return value


def paired_diffs(a: Sequence[float], b: Sequence[float], n_resamples: int, rng: object) -> np.ndarray:
    """``b - a`` after checking the pairs, the resample count and the generator."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a seeded numpy.random.Generator, got {type(rng).__name__}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"a and b must be 1-D and the same length, got shapes {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("a and b are empty: need at least one pair")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("a and b must be finite (no NaN or inf)")
    if count("n_resamples", n_resamples) < 1:
        raise ValueError("n_resamples must be at least 1")
    return np.asarray(y - x, dtype=float)


def logliks(base: Sequence[float], cand: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"logliks must be non-empty 1-D of equal length, got shapes {x.shape}, {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("logliks must be finite")
    return x, y
