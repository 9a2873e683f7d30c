"""stats.service_decay: a rise in disagreement along the order of service (#54), against known
answers, its null law, and scipy's permutation test of the same statistic."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from evalgate import stats


def test_a_step_after_the_first_requests_is_found_where_it_starts() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.random(60) < 0.03, rng.random(60) < 0.4]).astype(float)
    r = stats.service_decay(x, n_resamples=2000, seed=0)
    assert r.p_value < 0.001 and r.onset is not None and 50 <= r.onset <= 70
    assert r.after > 0.25 > 0.1 > r.before and r.n == 120


def test_nothing_to_test_gives_p_one() -> None:
    assert stats.service_decay(np.zeros(50), seed=0).p_value == 1.0  # every item agrees
    few = stats.service_decay([0.0, 1.0] * 9, seed=0)  # 18 items: fewer than two segments of 10
    assert (few.p_value, few.onset, few.statistic) == (1.0, None, 0.0)
    with pytest.raises(ValueError, match="values"):
        stats.service_decay([0.0, float("nan")] * 20, seed=0)


def test_a_fall_is_not_a_decay() -> None:
    """One-sided: an arm that disagrees less once it has served some requests is not blocked."""
    x = np.array([1.0] * 30 + [0.0] * 30)
    r = stats.service_decay(x, n_resamples=999, seed=0)
    assert r.p_value > 0.5 and r.onset is None


def test_its_size_holds_when_the_order_does_not_matter() -> None:
    """Exchangeable flips (10 %) and heavy-tailed KL: P(p <= 0.05) at most 0.05 up to Monte Carlo."""
    rng = np.random.default_rng(7)
    for draw in (lambda: (rng.random(100) < 0.1).astype(float), lambda: rng.lognormal(-6, 1.5, 100)):
        ps = [stats.service_decay(draw(), n_resamples=199, seed=rng).p_value for _ in range(300)]
        assert np.mean(np.array(ps) <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300)


def test_matches_scipys_permutation_test_of_the_same_statistic() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.random(40) < 0.1, rng.random(40) < 0.25]).astype(float)
    m = 10

    def rise(v: np.ndarray, axis: int = -1) -> np.ndarray:
        v = np.moveaxis(v, axis, -1)
        n, k = v.shape[-1], np.arange(m, v.shape[-1] - m + 1)
        cum = np.cumsum(v, axis=-1)
        before, after = cum[..., k - 1] / k, (cum[..., -1:] - cum[..., k - 1]) / (n - k)
        return ((after - before) / np.sqrt(1 / k + 1 / (n - k))).max(axis=-1)

    ref = st.permutation_test((x,), rise, permutation_type="pairings", alternative="greater",
                              n_resamples=9999, vectorized=True, rng=np.random.default_rng(5))  # fmt: skip
    ours = stats.service_decay(x, min_segment=m, n_resamples=9999, seed=5)
    assert ours.statistic == pytest.approx(ref.statistic / x.std(ddof=1), rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, abs=0.015)  # two Monte Carlo draws of one law
