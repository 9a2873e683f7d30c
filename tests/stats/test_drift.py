"""The drift rows' statistics (#30): bucketed per-position KLD from two top-k lists, top-1
agreement, and the paired bootstrap test of a ratio over documents against a budget. Known
answers (scipy's entropy and bootstrap, lm-eval's weighted perplexity) and a seeded coverage
check; the larger simulation is benchmarks/sim_drift.py."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from scipy import special as sp
from scipy import stats as st

from evalgate import stats
from evalgate.stats._drift import REMAINDER_FLOOR
from evalgate.stats._ratio_budget import EXACT_METHOD, IDENTICAL_METHOD, NO_INTERVAL_METHOD


def _top(p: np.ndarray, k: int | None = None) -> list[tuple[int, float]]:
    """The top-k (id, logprob) list of a distribution, best first."""
    order = np.argsort(-p, kind="stable")[: k or p.size]
    with np.errstate(divide="ignore"):  # a Dirichlet draw can hold exact zeros: logprob -inf
        return [(int(i), float(np.log(p[i]))) for i in order]


def _pair(gen: np.random.Generator, v: int, conc: float) -> tuple[np.ndarray, np.ndarray]:
    p = gen.dirichlet(np.full(v, conc))
    q = np.exp(np.log(p + 1e-300) + gen.normal(0, 0.5, v))
    return p, q / q.sum()


def test_full_distributions_give_scipy_entropy() -> None:
    gen = np.random.default_rng(0)
    for v in (2, 5, 17, 40):
        p, q = _pair(gen, v, 1.0)
        shuffled = _top(q)
        gen.shuffle(shuffled)  # order within a list does not matter to the KLD
        assert stats.position_kld(_top(p), shuffled) == pytest.approx(
            float(st.entropy(p, q)), rel=1e-9, abs=1e-12
        )


def _shared_only(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """The ids-blind bound: the tokens in both top-k lists, plus one remainder."""
    both = np.intersect1d(np.argsort(-p, kind="stable")[:k], np.argsort(-q, kind="stable")[:k])
    ps, qs = p[both], q[both]
    rest, rest_q = 1 - ps.sum(), max(1 - qs.sum(), REMAINDER_FLOOR)
    tail = rest * math.log(rest / rest_q) if rest > 1e-12 else 0.0
    return float(sp.rel_entr(ps, np.maximum(qs, np.finfo(np.float32).tiny)).sum()) + tail


def test_truncated_lists_give_a_lower_bound_at_least_the_ids_blind_one() -> None:
    """By token identity the value is at least the tokens-in-both-lists-plus-a-remainder bound,
    which grows with k (finer buckets); the identity one need not, by a little (one draw in 200)."""
    gen = np.random.default_rng(1)
    for _ in range(200):
        p, q = _pair(gen, 60, float(gen.choice([0.05, 0.3, 1.0])))
        true = float(st.entropy(p, q))
        ks = (1, 3, 5, 10, 20, 60)
        values = [stats.position_kld(_top(p, k), _top(q, k)) for k in ks]
        blind = [_shared_only(p, q, k) for k in ks]
        assert all(0.0 <= x <= true + 1e-9 for x in values)
        assert all(x >= b - 1e-9 for x, b in zip(values, blind, strict=True))
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(blind))  # finer buckets
        assert values[-1] == pytest.approx(true, rel=1e-9, abs=1e-12)


def test_identical_lists_give_exactly_zero() -> None:
    gen = np.random.default_rng(2)
    docs = []
    for _ in range(50):
        p, _ = _pair(gen, 200, float(gen.choice([0.01, 0.2, 1.0])))
        top = _top(p, int(gen.integers(1, 21)))
        assert stats.position_kld(top, list(top)) == 0.0
        docs.append(top)
    drift = stats.document_drift(docs, [list(t) for t in docs])  # ragged: k varies by position
    assert drift == stats.DocDrift(0.0, 50, 50)
    assert stats.document_drift([], []) == stats.DocDrift(0.0, 0, 0)


def test_a_token_in_one_list_only_is_capped_by_the_other_lists_smallest() -> None:
    """Token 2 is in P's list only: Q holds at most 0.1 on it (1 - its listed 0.9); token 3 is
    in Q's only, P at most 0.1. The least KL that allows, attained by P = (.6, .3, 3: .1) and
    Q = (.6, 2: .1, 3: .3); a remainder shared by both sides would hide the swap (KL 0)."""
    p = [(1, math.log(0.6)), (2, math.log(0.3))]
    q = [(1, math.log(0.6)), (3, math.log(0.3))]
    assert stats.position_kld(p, q) == pytest.approx(0.3 * math.log(3) + 0.1 * math.log(1 / 3), rel=1e-12)
    q2 = [(1, math.log(0.5)), (3, math.log(0.3))]  # Q(2) <= 0.2, P(3) <= 0.1
    want = 0.6 * math.log(0.6 / 0.5) + 0.3 * math.log(0.3 / 0.2) + 0.1 * math.log(0.1 / 0.3)
    assert stats.position_kld(p, q2) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(float(st.entropy([0.6, 0.3, 0.1], [0.5, 0.2, 0.3])))


def test_unmeasured_candidate_mass_is_floored_so_the_value_stays_finite() -> None:
    p = [(0, math.log(0.5))]
    q = [(0, 1e-9)]  # the candidate's top token carries all its mass (a hair over 1 from rounding)
    want = 0.5 * (math.log(0.5) - 1e-9) + 0.5 * math.log(0.5 / REMAINDER_FLOOR)
    assert stats.position_kld(p, q) == pytest.approx(want, rel=1e-9)
    for gone in (-math.inf, -3.4028234663852886e38):  # an underflowed probability, as servers write it
        value = stats.position_kld([(0, math.log(0.9)), (1, math.log(0.1))], [(0, 0.0), (1, gone)])
        assert math.isfinite(value) and 0.1 * 80 < value < 0.1 * 90  # log(0.1) - LOGPROB_FLOOR ~ 85
    assert stats.position_kld([(0, 0.0), (1, -math.inf)], [(0, 0.0), (1, -math.inf)]) == 0.0


def test_top1_same_compares_the_most_likely_token_first_entry_on_ties() -> None:
    a = [(5, math.log(0.4)), (7, math.log(0.4))]
    assert stats.top1_same(a, [(5, math.log(0.6)), (7, math.log(0.2))])
    assert not stats.top1_same(a, [(7, math.log(0.4)), (5, math.log(0.4))])
    assert stats.top1_same([(3, -2.0), (9, -0.1)], [(9, -0.2)])  # the max, even if not listed first
    drift = stats.document_drift([a, a], [a, [(7, -0.1), (5, -3.0)]])
    assert (drift.top1_same, drift.n) == (1, 2) and drift.kld_sum > 0


def test_bad_top_lists_are_refused_naming_the_position() -> None:
    ok = [(1, -0.1), (2, -3.0)]
    with pytest.raises(ValueError, match=r"cand_positions\[1\]: a token id is listed twice"):
        stats.document_drift([ok, ok], [ok, [(4, -0.1), (4, -3.0)]])
    with pytest.raises(ValueError, match=r"base_positions\[0\]\[1\]"):
        stats.document_drift([[(1, -0.1), (2, math.nan)]], [ok])
    with pytest.raises(ValueError, match=r"q_top\[0\]: empty"):
        stats.position_kld(ok, [])
    with pytest.raises(ValueError, match="different numbers of positions"):
        stats.document_drift([ok], [ok, ok])


def test_document_drift_is_fast_enough_for_every_report() -> None:
    gen = np.random.default_rng(3)
    base, cand = [], []
    for _ in range(100):
        p, q = _pair(gen, 2000, 0.1)
        base.append([[i, lp] for i, lp in _top(p, 20)])  # as records hold them (JSON lists)
        cand.append([[i, lp] for i, lp in _top(q, 20)])
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        drift = stats.document_drift(base, cand)
        best = min(best, time.perf_counter() - t0)
    assert drift.n == 100 and best < 0.05
    klds = stats.position_klds(base, cand)
    assert float(klds.sum()) == pytest.approx(drift.kld_sum)
    assert klds[7] == stats.position_kld(base[7], cand[7])


def _ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.sum(axis=axis) / y.sum(axis=axis)


def _skewed(gen: np.random.Generator, n: int, sigma: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    tokens = gen.integers(32, 257, n).astype(float)
    return gen.lognormal(math.log(0.01), sigma, n) * tokens, tokens


def test_percentile_part_matches_scipy_bootstrap_on_the_same_resamples() -> None:
    x, y = _skewed(np.random.default_rng(4), 40)
    b, alpha = 2000, 0.1
    res = stats.ratio_budget_test(x, y, budget=0.012, alpha=alpha, n_resamples=b, method="percentile", seed=9)
    kw = {
        "paired": True,
        "vectorized": True,
        "n_resamples": b,
        "method": "percentile",
        "confidence_level": 1 - alpha,
    }
    up = st.bootstrap((x, y), _ratio, alternative="less", rng=np.random.default_rng(9), **kw)  # type: ignore[arg-type]
    low = st.bootstrap((x, y), _ratio, alternative="greater", rng=np.random.default_rng(9), **kw)  # type: ignore[arg-type]
    assert res.upper == pytest.approx(up.confidence_interval.high, rel=1e-12)
    assert res.lower == pytest.approx(low.confidence_interval.low, rel=1e-12)
    hits = int(np.count_nonzero(up.bootstrap_distribution <= 0.012))
    assert res.p_value == pytest.approx((1 + hits) / (1 + up.bootstrap_distribution.size), abs=1e-12)
    assert res.estimate == pytest.approx(x.sum() / y.sum()) and res.n == 40 and res.method == "percentile"


def test_studentized_and_union_match_a_computation_by_hand() -> None:
    x, y = _skewed(np.random.default_rng(5), 30, sigma=1.2)
    n, b, alpha, budget = 30, 1000, 0.05, 0.015
    idx = np.random.default_rng(11).integers(0, n, size=(b, n))
    xs, ys = x[idx], y[idx]
    th_b = xs.sum(1) / ys.sum(1)
    se_b = np.sqrt(((xs - th_b[:, None] * ys) ** 2).sum(1) / (n * (n - 1))) / ys.mean(1)
    th = x.sum() / y.sum()
    se = math.sqrt(((x - th * y) ** 2).sum() / (n * (n - 1))) / y.mean()
    t = np.sort((th_b - th) / se_b)
    t_lo, t_hi = t[math.ceil(alpha * b) - 1], t[math.ceil((1 - alpha) * b) - 1]
    kw = {"budget": budget, "alpha": alpha, "n_resamples": b, "seed": 11}
    stu = stats.ratio_budget_test(x, y, method="studentized", **kw)  # type: ignore[arg-type]
    pct = stats.ratio_budget_test(x, y, method="percentile", **kw)  # type: ignore[arg-type]
    uni = stats.ratio_budget_test(x, y, **kw)  # type: ignore[arg-type]
    assert (stu.lower, stu.upper) == pytest.approx((th - t_hi * se, th - t_lo * se), rel=1e-12)
    assert stu.p_value == pytest.approx(
        (1 + int(np.count_nonzero(t >= (th - budget) / se))) / (1 + t.size), abs=1e-12
    )
    assert uni.method == "union"
    assert (uni.lower, uni.upper, uni.p_value) == (
        min(pct.lower, stu.lower),
        max(pct.upper, stu.upper),
        max(pct.p_value, stu.p_value),
    )
    assert stu.upper > pct.upper  # right skew: the studentized bound reaches further up


def test_upper_alpha_moves_only_the_upper_bound_where_every_document_differs() -> None:
    """The gate's "within budget" bound at alpha / 2: the upper bound is the alpha / 2 call's, the
    lower bound, p-value and reported alpha stay the alpha call's, on the same resamples."""
    x, y = _skewed(np.random.default_rng(5), 30, sigma=1.2)
    kw = {"budget": 0.015, "n_resamples": 2000, "seed": 3}
    at, half = (stats.ratio_budget_test(x, y, alpha=a, **kw) for a in (0.05, 0.025))  # type: ignore[arg-type]
    mixed = stats.ratio_budget_test(x, y, alpha=0.05, upper_alpha=0.025, **kw)  # type: ignore[arg-type]
    assert mixed.upper == half.upper > at.upper
    assert (mixed.lower, mixed.p_value, mixed.alpha) == (at.lower, at.p_value, 0.05)
    x0 = np.where(
        np.arange(30) % 3 == 0, 0.0, x
    )  # some identical: the zero-inflated path keeps its own levels
    zi = [stats.ratio_budget_test(x0, y, alpha=0.05, upper_alpha=u, **kw) for u in (None, 0.025)]  # type: ignore[arg-type]
    assert zi[0] == zi[1]


def test_every_document_at_the_same_ratio_is_exact() -> None:
    y = np.arange(10, 60, dtype=float)
    aa = stats.ratio_budget_test(np.zeros(50), y, budget=0.001, seed=0)  # an A/A run, deterministic servers
    # every document identical sizes no drift: the share that could differ is bounded instead
    assert (aa.estimate, aa.lower, aa.upper, aa.p_value) == (0.0, 0.0, math.inf, 1.0)
    assert aa.method == IDENTICAL_METHOD
    over = stats.ratio_budget_test(0.02 * y, y, budget=0.01, seed=0)
    assert over.lower == over.upper == over.estimate == pytest.approx(0.02) and over.p_value == 0.0
    assert over.method == EXACT_METHOD


def test_fewer_than_two_documents_give_no_interval() -> None:
    one = stats.ratio_budget_test([5.0], [100.0], budget=0.01, seed=0)
    assert (one.estimate, one.lower, one.upper, one.p_value) == (0.05, -math.inf, math.inf, 1.0)
    assert one.method == NO_INTERVAL_METHOD
    none = stats.ratio_budget_test([], [], budget=0.01, seed=0)
    assert none.n == 0 and math.isnan(none.estimate) and none.p_value == 1.0


def test_bad_ratio_input_is_refused_naming_the_index() -> None:
    with pytest.raises(ValueError, match=r"numer\[2\] is not finite"):
        stats.ratio_budget_test([1, 2, math.nan], [1, 1, 1], budget=0.1, seed=0)
    with pytest.raises(ValueError, match=r"denom\[1\] must be > 0"):
        stats.ratio_budget_test([1, 2, 3], [1, 0, 1], budget=0.1, seed=0)
    with pytest.raises(ValueError, match=r"denom\[0\] is not finite"):
        stats.ratio_budget_test([1, 2], [math.inf, 1], budget=0.1, seed=0)
    with pytest.raises(ValueError, match="budget"):
        stats.ratio_budget_test([1, 2], [1, 1], budget=math.nan, seed=0)


def test_perplexity_ratio_is_lm_evals_weighted_perplexities_divided() -> None:
    metrics = pytest.importorskip("lm_eval.api.metrics")
    gen = np.random.default_rng(6)
    words = gen.integers(50, 400, 20).astype(float)
    base = -words * gen.uniform(2.0, 4.0, 20)
    cand = base - words * gen.uniform(0.0, 0.1, 20)
    want = metrics.weighted_perplexity(list(zip(cand, words, strict=True))) / metrics.weighted_perplexity(
        list(zip(base, words, strict=True))
    )
    assert stats.perplexity_ratio(base, cand, words) == pytest.approx(want, rel=1e-12)
    assert stats.perplexity_ratio(base, cand, words) > 1  # the candidate is worse
    diff = stats.ratio_budget_test(base - cand, words, budget=math.log1p(0.01), seed=0)
    assert math.exp(diff.estimate) == pytest.approx(want, rel=1e-12)


def test_kld_quantiles() -> None:
    v = np.random.default_rng(7).gamma(0.5, 0.02, 1000)
    q = stats.kld_quantiles(v)
    assert list(q) == ["p50", "p90", "p99", "p99.9"]
    assert list(q.values()) == pytest.approx(list(np.quantile(v, [0.5, 0.9, 0.99, 0.999])))
    assert all(math.isnan(x) for x in stats.kld_quantiles([]).values())


def test_bounds_cover_a_skewed_ratio_at_50_documents() -> None:
    """Lognormal per-document mean KLD (sigma 0.75, skewness 3.3) and token counts 32..256: each
    one-sided 0.95 bound of the union covers the true ratio E[KLD] in >= 0.95 - 3 MC SE of 400
    seeded replicates. Heavier tails cover less (sigma 1: about 0.91): benchmarks/sim_drift.py."""
    reps, alpha, truth = 400, 0.05, 0.01 * math.exp(0.75**2 / 2)
    gen = np.random.default_rng(3000)
    upper = lower = 0
    for _ in range(reps):
        x, y = _skewed(gen, 50)
        res = stats.ratio_budget_test(x, y, budget=truth, alpha=alpha, n_resamples=1000, seed=gen)
        upper += res.upper >= truth
        lower += res.lower <= truth
    floor = 1 - alpha - 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert upper / reps >= floor and lower / reps >= floor, (upper / reps, lower / reps)
