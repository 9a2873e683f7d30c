"""The probe's paired timing test (stats._timing) against scipy's own sign-flip test and
bootstrap, and its four decisions on latencies built to reach each."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from evalgate.stats import cache_timing_test, paired_bootstrap, sign_flip_test
from evalgate.stats._timing import probes_needed


def test_the_sign_flip_p_matches_scipys_exact_permutation_test() -> None:
    rng = np.random.default_rng(1)
    same, cold = rng.lognormal(0, 0.3, 12), rng.lognormal(0.2, 0.3, 12)
    ours = sign_flip_test(np.log(same), np.log(cold), n_resamples=40_000, alternative="greater", rng=rng)
    d = np.log(cold) - np.log(same)
    exact = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="greater", n_resamples=np.inf
    )
    assert ours.pvalue == pytest.approx(exact.pvalue, abs=0.01)


def test_the_leak_bound_matches_scipys_percentile_bootstrap() -> None:
    rng = np.random.default_rng(2)
    cross, cold = rng.lognormal(0, 0.2, 30), rng.lognormal(0, 0.2, 30)
    d = np.log(cold) - np.log(cross)
    ours = paired_bootstrap(np.log(cross), np.log(cold), n_resamples=20_000, confidence=0.9, rng=rng)
    ref = sps.bootstrap((d,), np.mean, confidence_level=0.9, method="percentile", n_resamples=20_000,
                        random_state=np.random.default_rng(3))  # fmt: skip
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.01)
    res = cache_timing_test(np.ones(30) * 0.1, cross, cold, rng=np.random.default_rng(4))
    assert res.leak_upper >= ours.high - 0.01  # the union bound is at least the percentile one


def lat(rng: np.random.Generator, mean: float, n: int = 20, sd: float = 0.05) -> np.ndarray:
    return mean * np.exp(rng.normal(0, sd, n))


def test_an_isolated_cache_passes() -> None:
    rng = np.random.default_rng(5)
    r = cache_timing_test(lat(rng, 0.1), lat(rng, 1.0), lat(rng, 1.0), rng=rng)
    assert r.status == "pass" and r.gap > 2 and r.leak_upper < r.margin, r


def test_a_cross_tenant_hit_blocks() -> None:
    rng = np.random.default_rng(6)
    r = cache_timing_test(lat(rng, 0.1), lat(rng, 0.1), lat(rng, 1.0), rng=rng)
    assert r.status == "block" and r.leak_p < 0.05, r


def test_a_speed_up_within_the_margin_passes_where_it_blocked_before() -> None:
    """#44: CROSS 1.11x faster than COLD, significantly, with a 10x cache gap (margin 1.59x): the
    old rule blocked on any significant speed-up; the margin says it is no leak, and says so."""
    rng = np.random.default_rng(7)
    r = cache_timing_test(lat(rng, 0.1, sd=0.01), lat(rng, 0.9, sd=0.01), lat(rng, 1.0, sd=0.01), rng=rng)
    assert r.leak_p < 0.05 and r.status == "pass", r  # leak_p < alpha was the old BLOCK
    assert r.block_p > 0.05 and "within the margin" in r.reason and "margin 1.59x" in r.reason


def test_a_speed_up_beyond_the_margin_blocks() -> None:
    rng = np.random.default_rng(7)
    r = cache_timing_test(lat(rng, 0.1, sd=0.01), lat(rng, 0.5, sd=0.01), lat(rng, 1.0, sd=0.01), rng=rng)
    assert r.status == "block" and r.block_p < 0.05 and "beyond the margin 1.59x" in r.reason, r


def test_the_margin_is_a_share_of_the_gap_and_at_least_min_margin() -> None:
    rng = np.random.default_rng(3)
    same, cross, cold = lat(rng, 0.1, sd=0.01), lat(rng, 1.0, sd=0.01), lat(rng, 1.0, sd=0.01)
    r = cache_timing_test(same, cross, cold, share=0.1, rng=rng)
    assert r.margin == pytest.approx(0.1 * r.gap)
    r = cache_timing_test(same, cross, cold, share=0.01, min_margin=1.3, rng=rng)
    assert r.margin == pytest.approx(np.log(1.3))


def test_a_cache_gap_within_the_margin_is_an_error() -> None:
    """A significant 1.05x gap under a 1.1x margin: a full leak could not block, so no PASS."""
    rng = np.random.default_rng(8)
    r = cache_timing_test(lat(rng, 0.95, sd=0.005), lat(rng, 1.0, sd=0.005), lat(rng, 1.0, sd=0.005), rng=rng)
    assert r.gap_p < 0.05 and r.status == "error" and "within the margin" in r.reason, r


def _block_rate(gap: float, speedup: float, *, reps: int = 40, seed: int = 0) -> tuple[float, float]:
    """(old rule, new rule): the share of seeded 20-probe runs that block (benchmarks/probe_margin.py)."""
    rng = np.random.default_rng(seed)
    old = new = 0
    for _ in range(reps):
        cold, same, cross = (m * np.exp(rng.normal(0, 0.1, 20)) for m in (1.0, 1 / gap, 1 / speedup))
        r = cache_timing_test(same, cross, cold, n_resamples=1000, rng=rng)
        old, new = old + (r.leak_p < 0.05), new + (r.status == "block")
    return old / reps, new / reps


def test_a_1_09x_speed_up_that_is_not_the_cache_now_blocks_rarely_and_a_real_hit_still_blocks() -> None:
    old, new = _block_rate(2.8, 1.09)
    assert old > 0.6 and new <= 0.05, (old, new)
    old, new = _block_rate(1.5, 1.09)  # the margin's floor, 1.1x, holds where 0.2 of the gap is 1.084x
    assert old > 0.6 and new <= 0.1, (old, new)
    assert _block_rate(1.5, 1.5)[1] == 1.0  # CROSS as fast as SAME: a cross-tenant hit


def test_no_cache_gap_is_an_error_never_a_pass() -> None:
    rng = np.random.default_rng(8)
    r = cache_timing_test(lat(rng, 1.0), lat(rng, 1.0), lat(rng, 1.0), rng=rng)
    assert r.status == "error" and "positive control" in r.reason, r


def test_noisy_latencies_are_underpowered_with_the_probes_a_rerun_needs() -> None:
    rng = np.random.default_rng(9)
    r = cache_timing_test(lat(rng, 0.5, n=6, sd=0.05), lat(rng, 1.0, n=6, sd=0.6), lat(rng, 1.0, n=6, sd=0.6),
                          rng=rng)  # fmt: skip
    assert r.status == "underpowered", r
    assert r.probes_needed is None or r.probes_needed > 6


def test_probes_needed_scales_with_the_square_of_the_bound() -> None:
    assert probes_needed(10, 0.0, 0.2, 0.1) == 40
    assert probes_needed(10, 0.2, 0.3, 0.1) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"share": 0.0}, {"share": 1.0}, {"alpha": 0.5}, {"min_margin": 0.9}],
)
def test_bad_options_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        cache_timing_test([1, 1], [1, 1], [1, 1], rng=np.random.default_rng(0), **kwargs)


def test_bad_latencies_are_refused() -> None:
    with pytest.raises(ValueError):
        cache_timing_test([1, 0], [1, 1], [1, 1], rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        cache_timing_test([1], [1], [1], rng=np.random.default_rng(0))
