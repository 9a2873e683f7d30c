"""The graded row's interval (#29): the studentized bootstrap, the union, and Tango's bound on
changes counted as whole flips when too few items differ. Known answers and edge cases here;
coverage in test_coverage.py, the gate's non-inferiority in tests/gate/test_noninferiority.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalgate import stats
from evalgate.stats._graded import FLIP_METHOD, RESAMPLE_METHOD


def _by_hand(d: np.ndarray, seed: int, b: int, confidence: float) -> tuple[float, float, float, float]:
    """Percentile and bootstrap-t limits computed independently from the same resample indices."""
    idx = np.random.default_rng(seed).integers(0, d.size, size=(b, d.size))
    x = d[idx]
    means, ses = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(d.size)
    se = d.std(ddof=1) / math.sqrt(d.size)
    t = np.sort((means - d.mean()) / ses)
    tail = (1 - confidence) / 2
    lo_t, hi_t = t[math.ceil(tail * b) - 1], t[math.ceil((1 - tail) * b) - 1]  # inverted-cdf quantiles
    p_lo, p_hi = np.quantile(means, [tail, 1 - tail])
    return float(p_lo), float(p_hi), float(d.mean() - hi_t * se), float(d.mean() - lo_t * se)


def test_studentized_and_union_match_a_computation_by_hand() -> None:
    gen = np.random.default_rng(5)
    a = gen.uniform(0, 1, 60)
    b = np.clip(a + gen.normal(-0.03, 0.2, 60), 0, 1)
    d = b - a
    p_lo, p_hi, t_lo, t_hi = _by_hand(d, 11, 2000, 0.9)
    pct = stats.paired_bootstrap(a, b, n_resamples=2000, confidence=0.9, rng=np.random.default_rng(11))
    stu = stats.paired_bootstrap(
        a, b, n_resamples=2000, confidence=0.9, method="studentized", rng=np.random.default_rng(11)
    )
    uni = stats.paired_bootstrap(
        a, b, n_resamples=2000, confidence=0.9, method="union", rng=np.random.default_rng(11)
    )
    assert (pct.low, pct.high) == pytest.approx((p_lo, p_hi), abs=1e-12)
    assert (stu.low, stu.high) == pytest.approx((t_lo, t_hi), abs=1e-12)
    assert (uni.low, uni.high) == pytest.approx((min(p_lo, t_lo), max(p_hi, t_hi)), abs=1e-12)
    assert pct.method == "percentile" and stu.method == "studentized" and uni.method == "union"


def test_studentized_widens_the_side_a_few_large_losses_make_uncertain() -> None:
    """Sparse losses (a skewed mean): the bootstrap-t lower limit sits below the percentile one."""
    a = np.ones(100)
    b = a.copy()
    b[:12] = 0.7
    kw = {"n_resamples": 4000, "confidence": 0.9}
    pct = stats.paired_bootstrap(a, b, rng=np.random.default_rng(0), **kw)  # type: ignore[arg-type]
    stu = stats.paired_bootstrap(a, b, method="studentized", rng=np.random.default_rng(0), **kw)  # type: ignore[arg-type]
    assert stu.low < pct.low < pct.estimate


def test_bootstrap_edge_cases() -> None:
    const = stats.paired_bootstrap(
        [0.2, 0.3], [0.3, 0.4], method="union", n_resamples=50, rng=np.random.default_rng(0)
    )
    assert const.low == pytest.approx(0.1) and const.high == pytest.approx(0.1)  # no spread: the point
    one = stats.paired_bootstrap(
        [0.2], [0.5], method="studentized", n_resamples=20, rng=np.random.default_rng(0)
    )
    assert one.low == pytest.approx(0.3) == one.high
    with pytest.raises(ValueError, match="method"):
        stats.paired_bootstrap([0], [1], method="bca", rng=np.random.default_rng(0))  # type: ignore[arg-type]


def test_graded_ci_counts_changes_as_whole_flips_below_the_threshold() -> None:
    a, b = np.zeros(30), np.zeros(30)
    b[:2], a[2] = 1.0, 1.0  # 2 gains, 1 loss, 3 items differ
    ci = stats.graded_diff_ci(a, b, confidence=0.9, rng=np.random.default_rng(0))
    tango = stats.paired_diff_ci(0, 1, 2, 27, confidence=0.9)
    assert ci.method == FLIP_METHOD and not ci.resampled and ci.differing == 3
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((tango.estimate, tango.low, tango.high), abs=1e-12)
    # a metric on [0, 2] (span 2): the same changes doubled give the same interval, doubled
    wide = stats.graded_diff_ci(2 * a, 2 * b, confidence=0.9, span=2.0, rng=np.random.default_rng(0))
    assert (wide.low, wide.high) == pytest.approx((2 * tango.low, 2 * tango.high), abs=1e-12)
    none = stats.graded_diff_ci(
        np.full(5, 0.4), np.full(5, 0.4), confidence=0.9, rng=np.random.default_rng(0)
    )
    assert none.low == pytest.approx(stats.paired_diff_ci(5, 0, 0, 0, confidence=0.9).low) and none.high > 0.3


def test_graded_ci_resamples_when_enough_items_differ_and_stays_in_range() -> None:
    gen = np.random.default_rng(1)
    a = gen.uniform(0, 1, 40)
    b = a.copy()
    b[:10] = 0.0  # ten items lose: enough to resample
    ci = stats.graded_diff_ci(a, b, confidence=0.95, n_resamples=2000, rng=np.random.default_rng(2))
    uni = stats.paired_bootstrap(
        a, b, n_resamples=2000, confidence=0.95, method="union", rng=np.random.default_rng(2)
    )
    assert ci.method == RESAMPLE_METHOD and ci.resampled and ci.differing == 10
    assert (ci.low, ci.high) == pytest.approx((max(-1.0, uni.low), min(1.0, uni.high)))
    assert -1.0 <= ci.low <= ci.estimate <= ci.high <= 1.0
    forced = stats.graded_diff_ci(
        [0.0, 1.0], [1.0, 0.0], min_differing=0, n_resamples=200, rng=np.random.default_rng(0)
    )
    assert forced.resampled


def test_graded_ci_validates() -> None:
    with pytest.raises(ValueError, match="span"):
        stats.graded_diff_ci([0.0], [3.0], rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="span"):
        stats.graded_diff_ci([0.0], [1.0], span=0.0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        stats.graded_diff_ci([0.0], [1.0], rng=0)  # type: ignore[arg-type]
