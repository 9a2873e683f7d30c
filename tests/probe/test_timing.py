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


def test_a_small_leak_blocks_even_when_it_is_below_the_margin() -> None:
    rng = np.random.default_rng(7)
    r = cache_timing_test(lat(rng, 0.1, sd=0.01), lat(rng, 0.9, sd=0.01), lat(rng, 1.0, sd=0.01), rng=rng)
    assert r.status == "block", r


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
    [{"share": 0.0}, {"share": 1.0}, {"alpha": 0.5}],
)
def test_bad_options_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        cache_timing_test([1, 1], [1, 1], [1, 1], rng=np.random.default_rng(0), **kwargs)


def test_bad_latencies_are_refused() -> None:
    with pytest.raises(ValueError):
        cache_timing_test([1, 0], [1, 1], [1, 1], rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        cache_timing_test([1], [1], [1], rng=np.random.default_rng(0))
