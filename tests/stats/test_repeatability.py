"""``stats.identical_shares`` (--aa both): each arm's repeat-to-repeat identity with Clopper-Pearson
intervals, and McNemar's exact one-sided test that the candidate repeats itself less often,
against scipy's exact binomial test and interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from evalgate import stats


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (7, 30), (199, 200), (1, 1)])
def test_clopper_pearson_is_scipys_exact_interval(k: int, n: int) -> None:
    want = st.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    low, high = stats.clopper_pearson(k, n, confidence=0.95)
    assert (low, high) == pytest.approx((want.low, want.high), abs=1e-12)


def test_the_exact_test_is_scipys_binomial_on_the_discordant_items() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 120))
        b = rng.random(n) < rng.uniform(0.7, 1.0)
        c = rng.random(n) < rng.uniform(0.5, 1.0)
        res = stats.identical_shares(list(b), list(c))
        only_b, only_c = int((b & ~c).sum()), int((c & ~b).sum())
        assert (res.only_baseline, res.only_candidate, res.baseline, res.candidate) == (
            only_b, only_c, int(b.sum()), int(c.sum()),
        )  # fmt: skip
        want = (
            st.binomtest(only_b, only_b + only_c, 0.5, alternative="greater").pvalue
            if only_b + only_c
            else 1.0
        )
        assert res.pvalue == pytest.approx(want, rel=1e-12)
        ci = st.binomtest(int(c.sum()), n).proportion_ci(method="exact")
        assert res.candidate_ci == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_known_answers_and_refusals() -> None:
    res = stats.identical_shares([True] * 30, [True] * 20 + [False] * 10)
    assert (res.baseline_share, res.candidate_share, res.pvalue) == (1.0, 2 / 3, 0.5**10)
    assert stats.identical_shares([], []).pvalue == 1.0  # nothing compared: nothing shown
    assert stats.identical_shares([False, True], [True, False]).pvalue == 0.75  # one each way
    with pytest.raises(ValueError, match="pair item by item"):
        stats.identical_shares([True], [True, False])
    with pytest.raises(ValueError, match="at most n"):
        stats.clopper_pearson(3, 2)
