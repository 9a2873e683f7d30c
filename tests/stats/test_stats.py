"""Tests for evalgate.stats: known answers, edge cases, and seeded simulations of error rates.

Table convention in the literature below: (a, b, c, d) with difference (b - c)/n, which maps onto
ours as n11 = a, n01 = b, n10 = c, n00 = d (condition 1 is the candidate).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as st
from scipy.special import gammaln, logsumexp
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from evalgate import stats
from evalgate.stats import (
    choice_kl,
    flip_budget_test,
    holm,
    mcnemar,
    mde,
    paired_bootstrap,
    paired_diff_ci,
    sequential_evalue,
    sequential_test,
    sign_flip_test,
    top1_agree,
)

# ----------------------------------------------------------------------------- McNemar

TABLES = [
    (0, 0),
    (0, 25),
    (25, 0),
    (1, 1),
    (5, 15),
    (15, 5),
    (300, 250),
    (7, 1),
    (16, 6),
    (3, 3),
    (0, 1),
    (12, 0),
    (50, 70),
    (1, 0),
]


def _enumerated_pvalues(n10: int, n01: int, alternative: str) -> tuple[float, float]:
    """Exact and mid-p by enumerating Bin(nd, 1/2): P(more extreme) + P(as extreme) [or half of it]."""
    nd = n10 + n01
    if nd == 0:
        return 1.0, 1.0
    x = np.arange(nd + 1)
    pmf = st.binom.pmf(x, nd, 0.5)
    if alternative == "two-sided":
        dist, obs = np.abs(x - nd / 2), abs(n10 - nd / 2)
        more, same = pmf[dist > obs + 1e-9].sum(), pmf[np.abs(dist - obs) <= 1e-9].sum()
        k = min(n10, n01)  # Fagerland et al. (2013): mid-p = 2 P(X <= k) - P(X = k), 1 at a tie
        return min(1.0, more + same), min(1.0, 2 * pmf[x <= k].sum() - pmf[k])
    elif alternative == "less":  # candidate regressed: n10 large
        more, same = pmf[x > n10].sum(), pmf[n10]
    else:
        more, same = pmf[x < n10].sum(), pmf[n10]
    return min(1.0, more + same), more + 0.5 * same


@pytest.mark.parametrize(("n10", "n01"), TABLES)
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_mcnemar_matches_enumeration(n10: int, n01: int, alternative: str) -> None:
    exact, midp = _enumerated_pvalues(n10, n01, alternative)
    res = mcnemar(n10, n01, alternative=alternative)
    assert res.pvalue == pytest.approx(midp, rel=1e-9, abs=1e-15)
    assert res.pvalue_exact == pytest.approx(exact, rel=1e-9, abs=1e-15)
    assert mcnemar(n10, n01, alternative=alternative, mid_p=False).pvalue == res.pvalue_exact
    assert 0.0 <= res.pvalue <= res.pvalue_exact <= 1.0
    assert (res.n10, res.n01, res.statistic, res.alternative, res.mid_p) == (n10, n01, n10, alternative, True)


@pytest.mark.parametrize(("n10", "n01"), [t for t in TABLES if sum(t) > 0])
def test_mcnemar_exact_matches_scipy_binomtest(n10: int, n01: int) -> None:
    nd = n10 + n01
    assert mcnemar(n10, n01).pvalue_exact == pytest.approx(st.binomtest(n10, nd, 0.5).pvalue, rel=1e-9)
    regress = st.binomtest(n10, nd, 0.5, alternative="greater").pvalue
    assert mcnemar(n10, n01, alternative="less").pvalue_exact == pytest.approx(regress, rel=1e-9)


def test_mcnemar_published_cavo_example() -> None:
    # Cavo et al. 2012 (complete response before/after consolidation), the worked example of
    # Fagerland, Lydersen & Laake (2014, Stat Med 33:2850; 2017 book ch. 8): table
    # [[59, 6], [16, 80]]; exact conditional P = 0.052479, mid-P = 0.034690 as printed by their
    # companion R package contingencytables (tests/testthat/test-ch8.R).
    res = mcnemar(16, 6)
    assert round(res.pvalue_exact, 6) == 0.052479
    assert round(res.pvalue, 6) == 0.034690


def test_mcnemar_edge_cases() -> None:
    assert mcnemar(0, 0).pvalue == mcnemar(0, 0).pvalue_exact == 1.0
    assert mcnemar(0, 0, alternative="less").pvalue == 1.0
    # All 25 discordant pairs one way: two-sided exact = 2 / 2^25, mid-p = 1 / 2^25.
    assert mcnemar(25, 0).pvalue_exact == pytest.approx(2.0**-24)
    assert mcnemar(25, 0).pvalue == pytest.approx(2.0**-25)
    assert mcnemar(25, 0, alternative="greater").pvalue_exact == 1.0
    # Tie: mid-p = 2 P(X <= k) - P(X = k) = 1 exactly (Fagerland, Lydersen & Laake 2013).
    for k in (1, 2, 7, 150):
        assert mcnemar(k, k).pvalue == 1.0 == mcnemar(k, k).pvalue_exact


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((-1, 3), {}, "n10 must be a non-negative integer"),
        ((1.5, 3), {}, "n10 must be a non-negative integer"),
        ((True, 3), {}, "n10 must be a non-negative integer"),
        ((1, 3), {"alternative": "two_sided"}, "alternative must be one of"),
    ],
)
def test_mcnemar_invalid(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mcnemar(*args, **kwargs)


def test_mcnemar_false_block_rate_under_h0() -> None:
    # n = 500 items, 10 % flip rate, no effect: the two-sided mid-p test blocks at most alpha + 0.01.
    rng = np.random.default_rng(20240601)
    counts = rng.multinomial(500, [0.05, 0.05, 0.90], size=2000)
    for alternative in ("two-sided", "less"):
        blocks = [mcnemar(int(a), int(b), alternative=alternative).pvalue < 0.05 for a, b, _ in counts]
        assert np.mean(blocks) <= 0.06


# ----------------------------------------------------------------------------- CI of delta

# (a, b, c, d) -> n11=a, n01=b, n10=c, n00=d. Values copied from the papers' tables as collected,
# with their citations, in the test suites of the R packages ratesci (tests/testthat/test3.R) and
# contingencytables (tests/testthat/test-ch8.R, by Fagerland, Lydersen & Laake themselves).
PUBLISHED = [
    # Tango 1998, Stat Med 17:891, Table VII (95 %).
    ((4, 9, 3, 16), 0.95, "tango", (-0.027, 0.390), 3),
    # Tango 1998, Table V (90 %).
    ((43, 0, 1, 0), 0.90, "tango", (-0.096, 0.037), 3),
    # Agresti & Min 2005, Stat Med 24:729, score interval example.
    ((53, 16, 8, 9), 0.95, "tango", (-0.020, 0.207), 3),
    # Fagerland, Lydersen & Laake 2014, Stat Med 33:2850, Bentur et al. 2009 airway data.
    ((1, 1, 7, 12), 0.95, "tango", (-0.517, -0.026), 3),
    ((1, 1, 7, 12), 0.95, "newcombe", (-0.507, -0.026), 3),
    # Cavo et al. 2012 data, Fagerland et al. (contingencytables): Tango and Newcombe square-and-add.
    ((59, 6, 16, 80), 0.95, "tango", (-0.1240, -0.0054), 4),
    ((59, 6, 16, 80), 0.95, "newcombe", (-0.1186, -0.0046), 4),
    # Newcombe 1998, Stat Med 17:2635, worked example, method 10.
    ((20, 12, 2, 16), 0.95, "newcombe", (0.0562, 0.3292), 4),
    # Tang, Ling & Tian 2010 example, Tango interval.
    ((8, 3, 1, 2), 0.95, "tango", (-0.1670, 0.4327), 4),
]


@pytest.mark.parametrize(("abcd", "confidence", "method", "expected", "digits"), PUBLISHED)
def test_paired_diff_ci_published(
    abcd: tuple, confidence: float, method: str, expected: tuple, digits: int
) -> None:
    a, b, c, d = abcd
    ci = paired_diff_ci(a, c, b, d, confidence=confidence, method=method)
    assert ci.estimate == pytest.approx((b - c) / sum(abcd))
    assert (round(ci.low, digits), round(ci.high, digits)) == expected
    assert (ci.method, ci.confidence) == (method, confidence)


def _newcombe_with_statsmodels(n11: int, n10: int, n01: int, n00: int, alpha: float) -> tuple[float, float]:
    """Newcombe method 10 rebuilt independently from statsmodels' Wilson intervals."""
    n = n11 + n10 + n01 + n00
    p1, p2 = (n11 + n01) / n, (n11 + n10) / n
    l1, u1 = proportion_confint(n11 + n01, n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(n11 + n10, n, alpha=alpha, method="wilson")
    e, f, g, h = n11 + n01, n10 + n00, n11 + n10, n01 + n00
    big_a = n11 * n00 - n01 * n10
    phi = 0.0
    if e * f * g * h > 0 and big_a > n / 2:
        phi = (big_a - n / 2) / math.sqrt(e * f * g * h)
    elif e * f * g * h > 0 and big_a < 0:
        phi = big_a / math.sqrt(e * f * g * h)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    return low, high


def test_newcombe_matches_statsmodels_wilson_components() -> None:
    rng = np.random.default_rng(7)
    tables = [
        tuple(int(v) for v in rng.multinomial(n, rng.dirichlet([1, 1, 1, 1]))) for n in (5, 20, 80, 400) * 15
    ]
    tables += [(10, 0, 0, 0), (0, 5, 0, 0), (0, 0, 5, 0), (0, 3, 4, 0), (3, 0, 0, 4), (1, 0, 0, 0)]
    for table in tables:
        for conf in (0.9, 0.95, 0.99):
            ci = paired_diff_ci(*table, confidence=conf, method="newcombe")
            assert (ci.low, ci.high) == pytest.approx(_newcombe_with_statsmodels(*table, 1 - conf), abs=1e-9)


def _tango_statistic(d: float, n10: int, n01: int, n: int) -> float:
    """Tango (1998) eq. for the score statistic with the restricted MLE of p21, written afresh."""
    b, c = n01, n10
    w = -b - c + (2 * n - b + c) * d
    q = (np.sqrt(w**2 + 8 * n * c * d * (1 - d)) - w) / (4 * n)
    return (b - c - n * d) / np.sqrt(n * (2 * q + d * (1 - d)))


def test_tango_limits_solve_the_score_equation() -> None:
    rng = np.random.default_rng(11)
    z = st.norm.ppf(0.975)
    for _ in range(60):
        n11, n10, n01, n00 = (
            int(v) for v in rng.multinomial(int(rng.integers(10, 300)), rng.dirichlet([2, 1, 1, 2]))
        )
        n = n11 + n10 + n01 + n00
        ci = paired_diff_ci(n11, n10, n01, n00)
        assert -1 <= ci.low <= ci.estimate <= ci.high <= 1
        if ci.low > -1:
            assert _tango_statistic(ci.low, n10, n01, n) == pytest.approx(z, abs=1e-6)
        if ci.high < 1:
            assert _tango_statistic(ci.high, n10, n01, n) == pytest.approx(-z, abs=1e-6)
        swapped = paired_diff_ci(n11, n01, n10, n00)  # swapping the arms negates the interval
        assert (swapped.low, swapped.high) == pytest.approx((-ci.high, -ci.low), abs=1e-9)


@pytest.mark.parametrize("method", ["tango", "newcombe"])
def test_paired_diff_ci_edge_cases(method: str) -> None:
    empty = paired_diff_ci(0, 0, 0, 0, method=method)
    assert math.isnan(empty.estimate) and (empty.low, empty.high) == (-1.0, 1.0)
    concordant = paired_diff_ci(40, 0, 0, 10, method=method)
    assert concordant.estimate == 0.0 and concordant.low < 0 < concordant.high
    all_reg = paired_diff_ci(0, 8, 0, 0, method=method)
    assert (all_reg.estimate, all_reg.low) == (-1.0, -1.0) and -1 < all_reg.high < 0
    all_imp = paired_diff_ci(0, 0, 8, 0, method=method)
    assert (all_imp.estimate, all_imp.high) == (1.0, 1.0) and 0 < all_imp.low < 1
    mixed = paired_diff_ci(0, 3, 4, 0, method=method)
    assert -1 < mixed.low < mixed.estimate < mixed.high < 1


def test_tango_all_concordant_closed_form() -> None:
    # With no discordant pairs the score equation reduces to d/(1-d) = z^2/n, i.e. d = z^2/(n+z^2).
    z = st.norm.ppf(0.975)
    ci = paired_diff_ci(30, 0, 0, 20)
    assert ci.high == pytest.approx(z**2 / (50 + z**2), abs=1e-9)
    assert ci.low == pytest.approx(-(z**2) / (50 + z**2), abs=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"confidence": 1.0}, "confidence must be in"),
        ({"confidence": 0.0}, "confidence must be in"),
        ({"method": "wald"}, "method must be"),
    ],
)
def test_paired_diff_ci_invalid(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_diff_ci(1, 2, 3, 4, **kwargs)
    with pytest.raises(ValueError, match="n00 must be a non-negative integer"):
        paired_diff_ci(1, 2, 3, -4)


@pytest.mark.parametrize("delta", [0.0, 0.02, 0.05])
def test_tango_coverage(delta: float) -> None:
    # n = 500 items, 10 % flips: 95 % intervals cover the true delta >= 94 % of the time. Exact
    # enumeration over (n10, n01) gives 0.9507 at each of these deltas; 20,000 seeded replicates
    # put the estimate within about 0.003 of that. The CI depends on (n10, n01, n) only, so each
    # distinct pair is solved once.
    rng = np.random.default_rng(int(delta * 1000) + 3)
    psi, reps = 0.10, 20_000
    counts = rng.multinomial(500, [(psi - delta) / 2, (psi + delta) / 2, 1 - psi], size=reps)[:, :2]
    pairs, weight = np.unique(counts, axis=0, return_counts=True)
    covered = 0
    for (n10, n01), w in zip(pairs.tolist(), weight.tolist(), strict=True):
        ci = paired_diff_ci(500 - n10 - n01, n10, n01, 0)
        covered += w * (ci.low <= delta <= ci.high)
    assert covered / reps >= 0.94


# ----------------------------------------------------------------------------- Holm


def test_holm_textbook() -> None:
    # Holm (1979) step-down by hand, m = 4: sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005 = 0.02,
    # 3*0.01 = 0.03, 2*0.03 = 0.06, max(1*0.04, 0.06) = 0.06; reported in the input order.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Capping and ties: 3*0.4 > 1.
    assert holm([0.4, 0.4, 0.01]) == pytest.approx([0.8, 0.8, 0.03])
    assert holm([0.5, 0.6, 0.7]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]).shape == (0,)


def test_holm_matches_statsmodels() -> None:
    rng = np.random.default_rng(3)
    for m in (2, 3, 5, 10, 40):
        p = np.concatenate([rng.uniform(0, 0.05, m // 2), rng.uniform(0, 1, m - m // 2)])
        p[0] = p[-1]  # a tie
        out = holm(p)
        assert out == pytest.approx(multipletests(p, method="holm")[1], abs=1e-12)
        assert (
            (np.diff(out[np.argsort(p, kind="stable")]) >= 0).all() and (out <= 1).all() and (out >= p).all()
        )


@pytest.mark.parametrize("bad", [[0.1, 1.2], [-0.1], [float("nan")], [[0.1, 0.2]]])
def test_holm_invalid(bad: list) -> None:
    with pytest.raises(ValueError, match="pvalues must"):
        holm(bad)


# ----------------------------------------------------------------------------- MDE


# moved to tests/stats/test_mde.py (the MDE on top of the noise, #29)


# ----------------------------------------------------------------------------- flip budget


@pytest.mark.parametrize(
    ("flips", "n", "budget"),
    [(0, 50, 0.1), (5, 50, 0.1), (12, 50, 0.1), (30, 200, 0.1), (77, 500, 0.12), (50, 50, 0.5)],
)
def test_flip_budget_matches_scipy(flips: int, n: int, budget: float) -> None:
    res = flip_budget_test(flips, n, budget=budget)
    assert res.pvalue == pytest.approx(st.binomtest(flips, n, budget, alternative="greater").pvalue, rel=1e-9)
    assert (res.flips, res.n, res.budget, res.rate) == (flips, n, budget, flips / n)


def test_flip_budget_edges_and_invalid() -> None:
    assert flip_budget_test(0, 0, budget=0.1).pvalue == 1.0
    assert math.isnan(flip_budget_test(0, 0, budget=0.1).rate)
    assert flip_budget_test(3, 10, budget=0.0).pvalue == 0.0  # any flip disproves a zero budget
    assert flip_budget_test(10, 10, budget=1.0).pvalue == 1.0
    with pytest.raises(ValueError, match="cannot exceed n"):
        flip_budget_test(11, 10, budget=0.1)
    with pytest.raises(ValueError, match="budget must be in"):
        flip_budget_test(1, 10, budget=1.1)


def test_flip_budget_false_block_rate() -> None:
    rng = np.random.default_rng(9)
    flips = rng.binomial(500, 0.10, size=2000)
    assert np.mean([flip_budget_test(int(f), 500, budget=0.10).pvalue < 0.05 for f in flips]) <= 0.06


# ----------------------------------------------------------------------------- bootstrap / sign flip


def test_paired_bootstrap_known_and_seeded() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 400).astype(float)
    b = np.where(rng.random(400) < 0.1, 1 - a, a)
    res = paired_bootstrap(a, b, rng=np.random.default_rng(1), n_resamples=20_000)
    d = b - a
    se = d.std(ddof=0) / math.sqrt(d.size)
    assert res.estimate == pytest.approx(d.mean())
    assert (res.low, res.high) == pytest.approx((d.mean() - 1.96 * se, d.mean() + 1.96 * se), abs=0.25 * se)
    again = paired_bootstrap(a, b, rng=np.random.default_rng(1), n_resamples=20_000)
    assert res == again
    constant = paired_bootstrap([1, 2, 3], [2, 3, 4], rng=np.random.default_rng(0), n_resamples=50)
    assert (constant.estimate, constant.low, constant.high) == pytest.approx((1.0, 1.0, 1.0))


def test_paired_bootstrap_coverage() -> None:
    rng = np.random.default_rng(21)
    hits = 0
    for _ in range(400):
        a = rng.normal(0, 1, 150)
        b = a + 0.1 + rng.normal(0, 0.5, 150)
        res = paired_bootstrap(a, b, n_resamples=1000, rng=rng)
        hits += res.low <= 0.1 <= res.high
    assert hits / 400 >= 0.92  # percentile bootstrap at n = 150: nominal 0.95, slightly under


def test_sign_flip_exact_small_case() -> None:
    # d = (1, 1, 1, 1, 1): of 2^5 sign patterns, 2 reach |mean| = 1, so exact two-sided p = 1/16.
    res = sign_flip_test([0] * 5, [1] * 5, n_resamples=40_000, rng=np.random.default_rng(2))
    assert res.statistic == 1.0 and res.pvalue == pytest.approx(1 / 16, abs=0.004)
    greater = sign_flip_test(
        [0] * 5, [1] * 5, n_resamples=40_000, alternative="greater", rng=np.random.default_rng(2)
    )
    assert greater.pvalue == pytest.approx(1 / 32, abs=0.003)
    less = sign_flip_test(
        [0] * 5, [1] * 5, n_resamples=1000, alternative="less", rng=np.random.default_rng(2)
    )
    assert less.pvalue == 1.0
    zero = sign_flip_test([1, 2, 3], [1, 2, 3], n_resamples=99, rng=np.random.default_rng(0))
    assert zero.pvalue == 1.0


def test_sign_flip_matches_full_enumeration() -> None:
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.9, -0.4, 0.6, 0.05])
    signs = np.array(list(itertools.product([-1, 1], repeat=d.size)))
    perm = signs @ d / d.size
    exact = np.mean(np.abs(perm) >= abs(d.mean()) - 1e-12)
    res = sign_flip_test(np.zeros(d.size), d, n_resamples=50_000, rng=np.random.default_rng(4))
    assert res.pvalue == pytest.approx(exact, abs=0.005)


def test_sign_flip_level_under_h0() -> None:
    rng = np.random.default_rng(8)
    pvals = [
        sign_flip_test(rng.normal(size=40), rng.normal(size=40), n_resamples=499, rng=rng).pvalue
        for _ in range(1000)
    ]
    assert np.mean(np.array(pvals) <= 0.05) <= 0.065


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [([], [], "empty"), ([1, 2], [1], "same length"), ([1, float("nan")], [1, 2], "finite")],
)
def test_resampling_invalid(a: list, b: list, match: str) -> None:
    for fn in (paired_bootstrap, sign_flip_test):
        with pytest.raises(ValueError, match=match):
            fn(a, b, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="n_resamples"):
        sign_flip_test([1], [2], n_resamples=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng must be a seeded"):
        paired_bootstrap([1], [2], rng=42)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- sequential


def test_sequential_evalue_known_values() -> None:
    # Beta(1, 1): E(r, s) = 2^(r+s) r! s! / (r+s+1)!, so E(0,0) = 1, E(1,0) = 1, E(3,1) = 0.8, E(8,0) = 256/9.
    assert sequential_evalue(0, 0) == pytest.approx(1.0)
    assert sequential_evalue(1, 0) == pytest.approx(1.0)
    assert sequential_evalue(3, 1) == pytest.approx(0.8)
    assert sequential_evalue(8, 0) == pytest.approx(256 / 9)
    assert sequential_evalue(2, 5) == sequential_evalue(5, 2)  # symmetric prior
    # Large counts stay finite (log space) and match an lgamma computation.
    r, s, a, b = 400, 250, 2.0, 2.0
    log_e = (
        (r + s) * math.log(2)
        + (gammaln(a + r) + gammaln(b + s) - gammaln(a + b + r + s))
        - (gammaln(a) + gammaln(b) - gammaln(a + b))
    )
    assert math.log(sequential_evalue(r, s, a=a, b=b)) == pytest.approx(log_e, rel=1e-10)


def test_sequential_block_and_continue() -> None:
    res = sequential_test([1] * 12)  # E(7,0) = 16 < 20 <= E(8,0) = 28.4
    assert (res.decision, res.stopped_at, res.regressions, res.improvements) == ("block", 8, 8, 0)
    assert res.evalue == pytest.approx(256 / 9)
    res = sequential_test([1, 0] * 10)
    assert (res.decision, res.stopped_at, res.regressions, res.improvements) == ("continue", 20, 10, 10)
    empty = sequential_test([])
    assert (empty.decision, empty.stopped_at, empty.evalue) == ("continue", 0, 1.0)
    assert sequential_test([], n_total=3).decision == "futile"  # max E = 2^3/4 = 2 < 20


def test_sequential_futility_is_exact_by_enumeration() -> None:
    # Futile exactly when no continuation of the stream, of any length up to n_total, reaches 1/alpha.
    alpha, n_total = 0.2, 12
    threshold = 1 / alpha
    rng = np.random.default_rng(6)
    outcomes: set[bool] = set()
    for _ in range(25):
        k = int(rng.integers(0, 9))
        prefix = [int(v) for v in rng.integers(0, 2, k)]
        r0, s0 = sum(prefix), k - sum(prefix)
        if max(sequential_evalue(sum(prefix[:i]), i - sum(prefix[:i])) for i in range(k + 1)) >= threshold:
            continue
        reachable = max(
            sequential_evalue(r0 + sum(tail[:i]), s0 + i - sum(tail[:i]))
            for tail in itertools.product([0, 1], repeat=n_total - k)
            for i in range(n_total - k + 1)
        )
        res = sequential_test(prefix, alpha=alpha, n_total=n_total)
        outcomes.add(reachable < threshold)
        assert (res.decision == "futile" and res.stopped_at <= k) == (reachable < threshold)
    assert outcomes == {True, False}  # both branches were exercised


def test_sequential_false_block_rate_under_h0() -> None:
    rng = np.random.default_rng(13)
    streams = rng.integers(0, 2, size=(2000, 400))
    blocks = [sequential_test(s).decision == "block" for s in streams]
    assert np.mean(blocks) <= 0.05
    # Same with a concentrated prior and the futility bound in play.
    blocks = [sequential_test(s, a=5, b=5, n_total=450).decision == "block" for s in streams]
    assert np.mean(blocks) <= 0.05


def test_sequential_detects_a_regression() -> None:
    rng = np.random.default_rng(14)
    streams = (rng.random((500, 300)) < 0.75).astype(int)  # 3 of 4 flips are regressions
    assert np.mean([sequential_test(s).decision == "block" for s in streams]) >= 0.95


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([1, 2],), {}, "0 \\(improvement\\) and 1"),
        (([1, 0],), {"alpha": 1.5}, "alpha must be in"),
        (([1, 0],), {"a": 0}, "a must be a positive"),
        (([1, 0],), {"n_total": 1}, "smaller than the stream"),
    ],
)
def test_sequential_invalid(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sequential_test(*args, **kwargs)
    with pytest.raises(ValueError, match="regressions must be"):
        sequential_evalue(-1, 0)


# ----------------------------------------------------------------------------- agreement


def test_choice_kl_hand_computed() -> None:
    # P_base = (1/2, 1/2), P_cand = (3/4, 1/4): KL = 0.5 ln(2/3) + 0.5 ln 2 = 0.5 ln(4/3).
    assert choice_kl([0.0, 0.0], [math.log(3), 0.0]) == pytest.approx(0.5 * math.log(4 / 3))
    # P_base = (0.7, 0.2, 0.1), P_cand = (0.5, 0.3, 0.2), from log-probabilities.
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.5, 0.3, 0.2])
    expected = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.3) + 0.1 * math.log(0.1 / 0.2)
    assert choice_kl(np.log(p), np.log(q)) == pytest.approx(expected)
    assert choice_kl(np.log(p) - 500, np.log(q) + 3) == pytest.approx(expected)  # shift invariant
    assert choice_kl([-1200.0, -1201.0], [-1200.0, -1201.0]) == 0.0  # no overflow
    assert choice_kl([-3.0], [-7.0]) == 0.0  # one choice: nothing to disagree on
    x = np.array([-1.0, -2.5, -0.3])
    assert choice_kl(x, x[::-1]) == pytest.approx(np.sum(np.exp(x - logsumexp(x)) * (x - x[::-1])))


def test_top1_agree() -> None:
    assert top1_agree([-1.0, -2.0, -3.0], [-1.1, -2.5, -9.0])
    assert not top1_agree([-1.0, -2.0, -3.0], [-1.5, -1.2, -3.0])
    assert top1_agree([-1.0, -1.0], [-2.0, -2.0])  # ties go to the first choice on both sides


@pytest.mark.parametrize(("x", "y"), [([], []), ([0.0, 1.0], [0.0]), ([0.0, float("-inf")], [0.0, 0.0])])
def test_agreement_invalid(x: list, y: list) -> None:
    for fn in (choice_kl, top1_agree):
        with pytest.raises(ValueError, match="logliks must"):
            fn(x, y)


# ----------------------------------------------------------------------------- margins, planning


def test_required_n_inverts_mde() -> None:
    for d, f, alt in [(0.02, 0.05, "two-sided"), (0.03, 0.15, "less"), (0.1, 0.0, "two-sided")]:
        n = stats.required_n(d, f, alpha=0.05 / 12, alternative=alt)
        assert (
            mde(n, f, alpha=0.05 / 12, alternative=alt) <= d < mde(n - 1, f, alpha=0.05 / 12, alternative=alt)
        )
    # Connor's n for delta 2 pt on top of 5 % flips (psi = .07), alpha 0.05 two-sided
    assert stats.required_n(0.02, 0.05) == math.ceil(
        (1.959964 * 0.07**0.5 + 0.841621 * 0.0696**0.5) ** 2 / 0.0004
    )


def test_tango_score_inverts_the_interval() -> None:
    ci = paired_diff_ci(40, 12, 3, 45, confidence=0.9)
    z = st.norm.ppf(0.95)
    assert float(stats.tango_score(ci.low, 12, 3, 100)) == pytest.approx(z, abs=1e-6)
    assert float(stats.tango_score(ci.high, 12, 3, 100)) == pytest.approx(-z, abs=1e-6)


def test_excess_test_known_values_and_level() -> None:
    # x alone 700, y alone 600 of 20,000: above 1,000 such items, the score test
    big = stats.excess_test(700, 600, 20000, margin=0.03)
    assert big.method == "score" and big.estimate == 0.005
    assert big.pvalue == pytest.approx(st.norm.sf(float(stats.tango_score(0.03, 600, 700, 20000))))
    # with no y-only items and y's rate pinned at 0, the exact p is at least the binomial tail
    small = stats.excess_test(5, 0, 50, margin=0.03)
    assert small.method == "exact" and small.pvalue >= st.binom.sf(4, 50, 0.03)
    assert stats.excess_test(0, 0, 50, margin=0.03).pvalue == 1.0
    with pytest.raises(ValueError, match="cannot exceed"):
        stats.excess_test(30, 30, 50, margin=0.03)
    # level at the boundary (x's rate = y's rate + margin), 50 and 300 items, independent indicators
    rng = np.random.default_rng(19)
    for n, q in ((50, 0.0), (50, 0.05), (300, 0.1)):
        x = rng.random((400, n)) < q + 0.03
        y = rng.random((400, n)) < q
        p = [
            stats.excess_test(int((a & ~b).sum()), int((b & ~a).sum()), n, margin=0.03).pvalue
            for a, b in zip(x, y, strict=True)
        ]
        assert np.mean(np.array(p) < 0.05) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_public_api() -> None:
    assert set(stats.__all__) <= set(dir(stats))
    for name in (
        "McNemarResult",
        "DiffCI",
        "BootstrapResult",
        "PermutationResult",
        "SequentialResult",
        "BinomTestResult",
    ):
        cls = getattr(stats, name)
        assert cls.__dataclass_params__.frozen


def test_sequential_regression_rule_counts_only_regressions_as_flips() -> None:
    from evalgate.stats.sequential import replay_stream

    improving = [0] * 40 + [-1] * 160  # 20 % of items improve, none regresses
    both = replay_stream(improving, n_total=200, chunk=50, alpha=0.025, flip_budget=0.05)
    assert both.decision == "block"  # counted both ways, the improvements are flips over the budget
    one = replay_stream(improving, n_total=200, chunk=50, alpha=0.025, one_sided=True, flip_budget=0.05)
    assert one.decision != "block"  # before #19 the regression rule still counted them as flips
