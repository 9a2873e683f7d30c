"""The cluster-robust interval of the paired difference: a hand-computed answer, statsmodels, the
paired t interval it must become with one item per cluster, and the edge cases. Its coverage
under a clustered change is benchmarks/clustered_coverage.py (a small run: tests/gate/test_categories.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from evalgate.stats import CR1_METHOD, clustered_diff_ci


def _arms(d: list[int]) -> tuple[list[float], list[float]]:
    """Baseline and candidate outcomes whose paired differences are ``d`` (-1, 0 or 1)."""
    b = [1.0 if x < 0 else 0.0 for x in d]
    c = [1.0 if x > 0 else 0.0 for x in d]
    return b, c


# four clusters of five items; per-cluster sums of d: 2, 0, -1, 3
D = [1, 1, 0, 0, 0] + [0] * 5 + [-1, 0, 0, 0, 0] + [1, 1, 1, 0, 0]
G = [g for g in "abcd" for _ in range(5)]


def test_a_hand_computed_answer() -> None:
    # dbar = 4/20 = 0.2; residual sums S_g - 5 dbar = 1, -1, -2, 2; squares sum to 10;
    # V = G/(G-1) * 10 / N^2 = 4/3 * 10/400 = 1/30; half-width t_{3, 0.975} * sqrt(1/30)
    r = clustered_diff_ci(*_arms(D), G)
    half = 3.182446305284263 * math.sqrt(1 / 30)
    assert r.estimate == pytest.approx(0.2)
    assert r.se == pytest.approx(math.sqrt(1 / 30))
    assert (r.low, r.high) == pytest.approx((0.2 - half, 0.2 + half))
    assert (r.n_items, r.n_clusters, r.method, r.confidence) == (20, 4, CR1_METHOD, 0.95)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_it_is_statsmodels_ols_with_cluster_covariance(seed: int) -> None:
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, size=9)  # unequal clusters
    groups = np.repeat(np.arange(sizes.size), sizes)
    b = rng.random(groups.size) < 0.6
    c = np.where(rng.random(groups.size) < 0.2, ~b, b)
    r = clustered_diff_ci(b.astype(float), c.astype(float), groups.tolist(), confidence=0.9)
    d = c.astype(float) - b.astype(float)
    fit = sm.OLS(d, np.ones((d.size, 1))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    low, high = fit.conf_int(alpha=0.1)[0]
    assert r.estimate == pytest.approx(fit.params[0])
    assert r.se == pytest.approx(fit.bse[0])
    assert (r.low, r.high) == pytest.approx((max(-1, low), min(1, high)))


def test_one_item_per_cluster_is_the_paired_t_interval() -> None:
    b, c = _arms(D)
    r = clustered_diff_ci(b, c, list(range(len(D))))
    t = st.ttest_rel(c, b).confidence_interval(0.95)
    assert (r.low, r.high) == pytest.approx((t.low, t.high))
    assert r.n_clusters == 20
    clustered = clustered_diff_ci(b, c, G)
    assert clustered.high - clustered.low > r.high - r.low  # these clusters do correlate


def test_labels_are_compared_as_given() -> None:
    b, c = _arms([1, 0, -1, 0])
    assert clustered_diff_ci(b, c, [1, "1", 1, "1"]).n_clusters == 2
    assert clustered_diff_ci(b, c, ["x", "x", "y", "y"]).n_clusters == 2


def test_edge_cases() -> None:
    empty = clustered_diff_ci([], [], [])
    assert math.isnan(empty.estimate) and (empty.low, empty.high) == (-1.0, 1.0) and empty.n_items == 0
    single = clustered_diff_ci(*_arms([1, 0, 0]), ["a"] * 3)
    assert single.estimate == pytest.approx(1 / 3) and (single.low, single.high) == (-1.0, 1.0)
    assert single.n_clusters == 1 and math.isnan(single.se)
    same = clustered_diff_ci([1, 0, 1, 1], [1, 0, 1, 1], ["a", "a", "b", "b"])  # all concordant
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    lost = clustered_diff_ci([1] * 6, [0] * 6, ["a", "b", "c"] * 2)  # all discordant, one way
    assert (lost.estimate, lost.low, lost.high) == (-1.0, -1.0, -1.0)
    wide = clustered_diff_ci(*_arms([1, 1, -1, -1]), ["a", "a", "b", "b"])
    assert (wide.low, wide.high) == (-1.0, 1.0)  # clipped to the range of a difference


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (([1, 0], [1], ["a", "b"]), {}, "same length"),
        (([1, 0], [1, 1], ["a"]), {}, "one cluster per item: 1 labels for 2 items"),
        (([1, 2], [1, 1], ["a", "b"]), {}, r"baseline outcomes must be in \[0, 1\], got 2.0 at item 1"),
        (([1, 0], [1, math.nan], ["a", "b"]), {}, "candidate outcomes must be in"),
        (([1, 0], [1, 1], ["a", "b"]), {"confidence": 1.0}, "confidence must be in"),
    ],
)
def test_bad_input_is_named(args: tuple, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        clustered_diff_ci(*args, **kwargs)
