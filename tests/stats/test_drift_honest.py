"""A drift that cannot be fooled: the KL by token identity and the budget test where most
documents are exactly 0. Each of the three failures that prompted it has a test here that the
ids-blind KL and the plain bootstrap fail: renamed alternatives scored KL 0; 12 documents all
identical gave [0, 0], "within budget, powered"; 48 identical A/A documents and 2 at 1e-4 gave an
upper bound of +inf. Known answers (by hand, scipy's Clopper-Pearson and optimizer), the lower
bound against full-vocabulary KL, and a seeded simulation of passing above the budget."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as st

from evalgate import stats
from evalgate.stats._binomial import cp_upper
from evalgate.stats._ratio_budget import IDENTICAL_METHOD, ZERO_INFLATED_METHOD


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max()
    return x - math.log(float(np.exp(x).sum()))


def _top(lp: np.ndarray, k: int) -> list[tuple[int, float]]:
    order = np.argsort(-lp, kind="stable")[:k]
    return [(int(i), float(lp[i])) for i in order]


def _kl(lp: np.ndarray, lq: np.ndarray) -> float:
    return float((np.exp(lp) * (lp - lq)).sum())


# ----------------------------------------------------------------------- the KL, by token identity


def test_renamed_alternatives_are_a_change() -> None:
    """The candidate keeps every probability, and the forced token, but renames every other
    alternative: the ids-blind bound put all of them in one remainder on both sides (KL 0)."""
    gen = np.random.default_rng(0)
    base, cand, forced, true = [], [], [], []
    for _ in range(50):
        lp = _log_softmax(gen.normal(0.0, 3.0, 200))
        token = int(np.argmax(lp + gen.gumbel(size=lp.size)))  # drawn from P
        lq = lp.copy()
        others = np.setdiff1d(np.arange(200), [token])
        lq[others] = lp[gen.permutation(others)]  # every other id's probability moves elsewhere
        base.append(_top(lp, 20))
        cand.append(_top(lq, 20))
        forced.append((token, float(lp[token]), float(lq[token])))
        true.append(_kl(lp, lq))
    p = [(1, math.log(0.6)), (2, math.log(0.3))]
    q = [(1, math.log(0.6)), (3, math.log(0.3))]
    assert stats.position_kld(p, q) > 0.2  # the ids-blind bound: 0.0
    lists = stats.document_drift(base, cand)
    assert lists.kld_sum / lists.n > 0.5  # nats per token: far above any budget
    drift = stats.document_drift(base, cand, forced=forced)
    assert lists.kld_sum <= drift.kld_sum <= sum(true) + 1e-9


def test_a_renamed_alternative_costs_what_the_lists_allow() -> None:
    """By hand: P lists (1: .5, 2: .3), Q lists (1: .5, 9: .3). Q can hold at most c = .2 on token
    2 and P at most d = .2 on token 9, so KL >= .3 log(.3/.2) + .2 log(.2/.3) = .1 log 1.5, which
    P = (.5, .3, 9: .2), Q = (.5, 2: .2, 9: .3) attains: the bound is tight."""
    p = [(1, math.log(0.5)), (2, math.log(0.3))]
    q = [(1, math.log(0.5)), (9, math.log(0.3))]
    assert stats.position_kld(p, q) == pytest.approx(0.1 * math.log(1.5), rel=1e-12)
    assert float(st.entropy([0.5, 0.3, 0.2], [0.5, 0.2, 0.3])) == pytest.approx(0.1 * math.log(1.5))


def _reference(p_top: list, q_top: list, forced: tuple | None) -> tuple[float, float]:
    """(the box minimum by scipy's optimizer, the free minimum), from the lists token by token."""
    p, q = dict(p_top), dict(q_top)
    p_min, q_min = math.exp(min(p.values())), math.exp(min(q.values()))
    if forced is not None:
        p.setdefault(forced[0], forced[1])
        q.setdefault(forced[0], forced[2])
    shared = [t for t in p if t in q]
    s = sum(math.exp(p[t]) * (p[t] - q[t]) for t in shared)
    p_s, q_s = sum(math.exp(p[t]) for t in shared), sum(math.exp(q[t]) for t in shared)
    only_p = [t for t in p if t not in q]
    only_q = [t for t in q if t not in p]
    p_a, q_b = sum(math.exp(p[t]) for t in only_p), sum(math.exp(q[t]) for t in only_q)
    c, d = max(0.0, 1 - q_s - q_b), max(0.0, 1 - p_s - p_a)
    cap_a, cap_b = min(len(only_p) * q_min, c), min(len(only_q) * p_min, d)

    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = s + (p_a * np.log(p_a / a) if p_a > 0 else 0.0)
            out = out + np.where(b > 0, b * np.log(b / q_b), 0.0)
            out = out + np.where(d - b > 0, (d - b) * np.log((d - b) / (c - a)), 0.0)
        return np.where(np.isfinite(out), out, 1e6)  # 1e6: outside F's domain

    box = [(min(1e-12, cap_a), cap_a), (0.0, cap_b)]
    starts = [(box[0][1] * t, box[1][1] * u) for t, u in ((0.5, 0.5), (0.99, 0.99))]
    fit = [optimize.minimize(lambda v: float(f(*v)), x0, bounds=box, method="L-BFGS-B") for x0 in starts]
    ga, gb = np.meshgrid(np.linspace(*box[0], 201), np.linspace(*box[1], 201))
    best = min(float(f(ga, gb).min()), *(float(r.fun) for r in fit))
    free = s + (1 - p_s) * math.log((1 - p_s) / (1 - q_s)) if p_s < 1 else s
    return best, free


def test_the_value_is_the_box_minimum_by_scipys_optimizer() -> None:
    gen = np.random.default_rng(1)
    checked = 0
    for _ in range(30):
        lp = _log_softmax(gen.normal(0.0, float(gen.choice([1.0, 3.0])), 60))
        lq = lp + gen.normal(0.0, float(gen.choice([0.3, 1.0, 3.0])), 60)
        lq = _log_softmax(np.where(gen.random(60) < 0.3, lq[gen.permutation(60)], lq))
        k = int(gen.choice([3, 5, 10]))
        p_top, q_top = _top(lp, k), _top(lq, k)
        token = int(gen.integers(60))
        for forced in (None, (token, float(lp[token]), float(lq[token]))):
            want, free = _reference(p_top, q_top, forced)
            got = stats.position_kld(p_top, q_top, forced=forced)
            assert got == pytest.approx(max(0.0, want), rel=1e-6, abs=1e-9)
            assert got >= free - 1e-12  # never looser than the ids-blind value
            assert got <= _kl(lp, lq) + 1e-9
            checked += got > free + 1e-6  # the caps bind
    assert checked > 10


@pytest.mark.parametrize("k", [1, 5, 20])
def test_the_value_never_exceeds_the_full_vocabulary_kl(k: int) -> None:
    gen = np.random.default_rng(2 + k)
    ratios = []
    for i in range(300):
        lp = _log_softmax(gen.normal(0.0, float(gen.choice([0.5, 2.0, 5.0])), 200))
        noise = gen.normal(0.0, float(gen.choice([0.05, 0.5, 2.0])), 200)
        lq = lp + noise
        if i % 3 == 0:  # some ids renamed: a few top tokens swap places with others
            swap = gen.choice(200, 10, replace=False)
            lq[swap] = lq[gen.permutation(swap)]
        lq = _log_softmax(lq)
        true = _kl(lp, lq)
        token = int(np.argmax(lp + gen.gumbel(size=200)))
        forced = (token, float(lp[token]), float(lq[token]))
        plain = stats.position_kld(_top(lp, k), _top(lq, k))
        fine = stats.position_kld(_top(lp, k), _top(lq, k), forced=forced)
        assert 0.0 <= plain <= true + 1e-9 and 0.0 <= fine <= true + 1e-9
        ratios.append(plain / true)
    if k == 20:
        assert float(np.median(ratios)) > 0.5  # tight-ish: half the KL or more at the median


def test_a_swapped_boundary_token_changes_the_value_a_little() -> None:
    """Ranks 20 and 21 trade places on the candidate (a near tie): each list holds a token the
    other does not, yet the value stays at most the true KL, which is tiny."""
    gen = np.random.default_rng(4)
    for _ in range(100):
        lp = _log_softmax(gen.normal(0.0, 3.0, 200))
        order = np.argsort(-lp)
        t20, t21 = order[19], order[20]
        lq = lp.copy()
        lq[t20], lq[t21] = lp[t21], lp[t20]
        p_top, q_top = _top(lp, 20), _top(lq, 20)
        assert {t for t, _ in p_top} ^ {t for t, _ in q_top} == {t20, t21}
        value = stats.position_kld(p_top, q_top)
        assert 0.0 <= value <= _kl(lp, lq) + 1e-12
        assert value <= math.exp(lp[t20]) * (lp[t20] - lp[t21]) + 1e-12
    tie = [(i, math.log(0.04)) for i in range(20)]  # 20 x .04, and token 20 at .04 too
    other = [*tie[:19], (20, math.log(0.04))]
    assert stats.position_kld(tie, other) == pytest.approx(0.0, abs=1e-12)


def test_the_forced_token_joins_the_shared_buckets() -> None:
    p = [(1, math.log(0.5)), (2, math.log(0.3))]
    q = [(1, math.log(0.5)), (9, math.log(0.3))]
    assert stats.position_kld(p, q, forced=(2, math.log(0.3), math.log(0.01))) > stats.position_kld(p, q)
    same = stats.position_kld(p, list(p), forced=(7, math.log(0.01), math.log(0.01)))
    assert same == 0.0
    docs = [_top(_log_softmax(np.random.default_rng(i).normal(0, 3, 100)), 20) for i in range(5)]
    forced = [(99, -9.0, -9.0)] * 5
    assert stats.document_drift(docs, [list(d) for d in docs], forced=forced) == stats.DocDrift(0.0, 5, 5)
    assert stats.position_klds(docs, docs, forced=forced).tolist() == [0.0] * 5
    with pytest.raises(ValueError, match="forced"):
        stats.document_drift(docs, docs, forced=forced[:4])
    with pytest.raises(ValueError, match=r"forced\[1\]"):
        stats.document_drift(docs, docs, forced=[(1, -1.0, -1.0), (1.5, -1.0, -1.0), *forced[2:]])


# --------------------------------------------------------------- the budget test, documents at 0


def test_all_identical_documents_bound_the_share_not_the_drift() -> None:
    """12 identical documents: the plain bootstrap said [0, 0], within any budget, powered."""
    res = stats.ratio_budget_test(np.zeros(12), np.full(12, 32.0), budget=0.01, seed=0)
    assert (res.estimate, res.lower, res.upper, res.p_value) == (0.0, 0.0, math.inf, 1.0)
    assert res.method == IDENTICAL_METHOD and res.nonzero == 0
    assert res.share_upper == pytest.approx(1 - 0.05 ** (1 / 12), rel=1e-9)
    fifty = stats.ratio_budget_test(np.zeros(50), np.arange(10, 60.0), budget=0.01, seed=0)
    assert fifty.share_upper == pytest.approx(0.0582, abs=5e-5)  # "at most 5.8 % could differ"


def test_share_upper_is_scipys_clopper_pearson() -> None:
    for k, n, alpha in [(0, 50, 0.05), (2, 50, 0.05), (7, 12, 0.1), (1, 3, 0.025), (49, 50, 0.05)]:
        ci = st.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
        assert cp_upper(k, n, alpha) == pytest.approx(ci.high, rel=1e-9)
    x = np.r_[np.zeros(45), np.full(5, 0.3)]
    res = stats.ratio_budget_test(x, np.full(50, 30.0), budget=0.01, n_resamples=200, seed=0)
    ci = st.binomtest(5, 50).proportion_ci(confidence_level=0.9, method="exact")
    assert res.nonzero == 5 and res.share_upper == pytest.approx(ci.high, rel=1e-9)


def test_an_aa_run_with_two_differing_documents_has_a_finite_upper_bound() -> None:
    """48 documents identical, 2 at ~1e-4 nats per token (a real vLLM A/A run): the studentized
    part was +inf (a resample of zeros has se* = 0). Now: share x size, the size of 2 documents
    their larger ratio (a resample of the larger one alone is 1/4 of the resamples)."""
    x, y = np.zeros(50), np.full(50, 32.0)
    x[[3, 17]] = [1.0e-4 * 32, 1.3e-4 * 32]
    res = stats.ratio_budget_test(x, y, budget=0.01, seed=0)
    assert math.isfinite(res.upper) and res.method.startswith(ZERO_INFLATED_METHOD)
    assert "2 differing documents" in res.method and "assumed" in res.method
    share = float(st.beta.ppf(0.975, 3, 48))
    assert res.upper == pytest.approx(share * 1.3e-4, rel=1e-9)
    assert res.lower == 0.0 and res.nonzero == 2 and res.upper < res.budget


def test_share_times_size_matches_a_computation_by_hand() -> None:
    """Some documents 0: lower and p from the percentile bootstrap of all; upper the larger of
    its upper and CP(alpha / 2) x the union bound (alpha / 2) of the differing documents x their
    mean length over everyone's, on the same stream of resamples."""
    gen = np.random.default_rng(5)
    n, b, alpha, budget = 40, 1000, 0.05, 0.004
    y = gen.integers(32, 257, n).astype(float)
    x = np.where(gen.random(n) < 0.6, 0.0, gen.lognormal(math.log(0.01), 1.0, n) * y)
    nz = x != 0
    g = np.random.default_rng(7)
    idx = g.integers(0, n, size=(b, n))
    thetas = x[idx].sum(1) / y[idx].sum(1)
    inner = stats.ratio_budget_test(x[nz], y[nz], budget=0.0, alpha=alpha / 2, n_resamples=b, seed=g)
    share = float(st.beta.ppf(1 - alpha / 2, nz.sum() + 1, n - nz.sum()))
    mixed = share * inner.upper * y[nz].mean() / y.mean()
    res = stats.ratio_budget_test(x, y, budget=budget, alpha=alpha, n_resamples=b, seed=7)
    assert res.lower == pytest.approx(float(np.quantile(thetas, alpha)), rel=1e-12)
    assert res.upper == pytest.approx(max(float(np.quantile(thetas, 1 - alpha)), mixed), rel=1e-12)
    assert res.p_value == pytest.approx((1 + np.count_nonzero(thetas <= budget)) / (1 + b), abs=1e-12)
    assert res.method == (
        f"{ZERO_INFLATED_METHOD}: percentile, and Clopper-Pearson share x union size of the "
        f"{int(nz.sum())} differing documents"
    )
    one = stats.ratio_budget_test(np.r_[np.zeros(9), 2.0], np.full(10, 20.0), budget=0.01, seed=0)
    assert one.upper == pytest.approx(float(st.beta.ppf(0.975, 2, 9)) * 0.1, rel=1e-9)
    assert "1 differing document's ratio (assumed" in one.method


def test_documents_all_nonzero_keep_the_plain_bootstrap() -> None:
    gen = np.random.default_rng(6)
    y = np.full(30, 64.0)
    x = gen.lognormal(math.log(0.01), 1.0, 30) * y
    res = stats.ratio_budget_test(x, y, budget=0.01, seed=3)
    assert res.method == "union" and res.nonzero == 30 and res.share_upper is None
    better = np.r_[np.zeros(8), -np.full(4, 0.5)]  # log-likelihood gains: the candidate is better
    neg = stats.ratio_budget_test(better, np.full(12, 10.0), budget=0.01, seed=0)
    assert neg.upper <= 0.0 and neg.nonzero == 4  # the share's lower bound x a negative size


def test_mostly_identical_documents_rarely_pass_above_the_budget() -> None:
    """n = 12, 90 % of documents identical, the rest at 10x the budget per token (lognormal
    sizes, sigma 0.5): theta = the budget, so every "upper < budget" is a false pass. The plain
    bootstrap passed every sample of 12 zeros (0.9**12 = 28 %)."""
    gen = np.random.default_rng(8)
    reps, alpha, budget = 300, 0.05, 0.01
    passed = 0
    for _ in range(reps):
        y = np.full(12, 32.0)
        size = gen.lognormal(math.log(10 * budget) - 0.125, 0.5, 12)
        x = np.where(gen.random(12) < 0.9, 0.0, size * y)
        res = stats.ratio_budget_test(x, y, budget=budget, alpha=alpha, n_resamples=500, seed=gen)
        passed += res.upper < budget
    assert passed / reps <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / reps), passed / reps
