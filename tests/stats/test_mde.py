"""The MDE for a change on top of the measured noise (#29): known answers, edges, power by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from evalgate import stats
from evalgate.stats import mcnemar, mde, mde_mean, required_n

Z975, Z80 = float(st.norm.ppf(0.975)), float(st.norm.ppf(0.8))


def _connor(d: float, psi: float, z_a: float = Z975, z_b: float = Z80) -> float:
    return (z_a * math.sqrt(psi) + z_b * math.sqrt(psi - d * d)) ** 2 / (d * d)


def _exact_power(n: int, p10: float, p01: float, level: float) -> float:
    """Power of the two-sided mid-p McNemar at ``level``, summed exactly over the discordant count
    (nd ~ Bin(n, p10 + p01), n10 | nd ~ Bin(nd, p10 / (p10 + p01))), regressions only."""
    psi = p10 + p01
    nds = np.arange(n + 1)
    weight = st.binom.pmf(nds, n, psi)
    total = 0.0
    for nd, w in zip(nds[weight > 1e-12], weight[weight > 1e-12], strict=True):
        k = np.arange(nd + 1)
        low = np.minimum(k, nd - k)
        p = np.where(2 * k == nd, 1.0, 2 * st.binom.cdf(low, nd, 0.5) - st.binom.pmf(low, nd, 0.5))
        total += w * st.binom.pmf(k, nd, p10 / psi)[(p < level) & (2 * k > nd)].sum()
    return float(total)


# ----------------------------------------------------------------------------- known answers


@pytest.mark.parametrize(("n", "f"), [(1000, 0.10), (500, 0.05), (2000, 0.15), (200, 0.3), (1172, 0.01)])
def test_mde_solves_connor_with_the_change_on_top(n: int, f: float) -> None:
    d = mde(n, f)
    assert _connor(d, f + d) == pytest.approx(n, rel=1e-8)
    d1 = mde(n, f, alternative="less", alpha=0.05, power=0.9)
    assert _connor(d1, f + d1, st.norm.ppf(0.95), st.norm.ppf(0.9)) == pytest.approx(n, rel=1e-8)
    assert mde(4 * n, f) < d < mde(n // 4, f)
    # above the old model's (psi = max(f, d)), which overstated the power at the printed MDE
    assert _connor(d, max(f, d)) < n


def test_the_issue_example_one_suite_of_1172_at_1pct() -> None:
    # #29: the old MDE printed 0.92 pt at 1 % noise (alpha 0.05/12) and had power 0.50 on top of it
    level = 0.05 / 12
    d = mde(1172, 0.01, alpha=level)
    assert 0.017 < d < 0.019
    assert _exact_power(1172, 0.005 + d, 0.005, level) >= 0.80
    assert _exact_power(1172, 0.005 + 0.0092, 0.005, level) < 0.6


@pytest.mark.parametrize(
    ("n", "f", "m"), [(200, 0.01, 12), (300, 0.05, 18), (2376, 0.03, 12), (14042, 0.05, 12)]
)
def test_exact_power_at_the_mde_on_top_of_the_noise(n: int, f: float, m: int) -> None:
    # an independent computation: the exact mid-p McNemar's power when d one-way flips come on top
    # of f symmetric ones, at the level Holm's first step demands over m tests
    d = mde(n, f, alpha=0.05 / m)
    assert 0.80 <= _exact_power(n, f / 2 + d, f / 2, 0.05 / m) <= 0.93


def test_required_n_is_connor_on_top_of_the_noise() -> None:
    assert required_n(0.02, 0.05) == math.ceil(_connor(0.02, 0.07))
    assert required_n(0.02, 0.0) == math.ceil(_connor(0.02, 0.02))
    for d, f in [(0.02, 0.05), (0.05, 0.01), (0.1, 0.0)]:
        n = required_n(d, f, alpha=0.05 / 12)
        assert mde(n, f, alpha=0.05 / 12) <= d < mde(n - 1, f, alpha=0.05 / 12)


def test_mde_mean_is_the_binary_mde_plus_a_continuity_correction() -> None:
    # span 1 and sd^2 the flip rate: the binary case, plus 1/n for a test that counts ties
    for n, f in [(200, 0.01), (1172, 0.05), (14042, 0.03)]:
        assert mde_mean(n, math.sqrt(f), alpha=0.004) == pytest.approx(
            mde(n, f, alpha=0.004) + 1 / n, rel=1e-9
        )
    # span 0, a shift of every item: the closed form (z_a + z_b) sd / sqrt(n)
    assert mde_mean(100, 0.2, span=0) == pytest.approx((Z975 + Z80) * 0.02)
    # a wider range: the loss solves Connor's n with sd^2 + d span, plus span / n
    d = mde_mean(500, 0.3, span=2.0)
    core = d - 2.0 / 500
    assert (
        Z975 * math.sqrt(0.09 + 2 * core) + Z80 * math.sqrt(0.09 + 2 * core - core**2)
    ) ** 2 / core**2 == (pytest.approx(500, rel=1e-8))


# ----------------------------------------------------------------------------- edges


def test_mde_edges() -> None:
    # flip_rate 0: all discordant pairs one way, psi = d, i.e. n d = (z_a + z_b sqrt(1 - d))^2
    d = mde(1000, 0.0)
    assert 1000 * d == pytest.approx((Z975 + Z80 * math.sqrt(1 - d)) ** 2, rel=1e-8)
    assert mde(1000, 0.001) > d  # any measured noise now raises the MDE: the change adds to it
    assert mde(0, 0.1) == math.inf and mde(3, 0.1) == math.inf and mde(5, 0.1) == math.inf
    assert mde(6, 0.1) <= 1.0 and mde(6, 1.0) == math.inf  # all flipping already: nothing to add
    with pytest.raises(ValueError, match="flip_rate must be in"):
        mde(100, 1.5)
    with pytest.raises(ValueError, match="power must be in"):
        mde(100, 0.1, power=1.0)


def test_mde_mean_edges() -> None:
    assert mde_mean(0, 0.2) == math.inf and mde_mean(0, 0.2, span=0) == math.inf
    assert mde_mean(100, 0.0, span=0) == 0.0
    assert mde_mean(5, 0.1) == math.inf  # no loss up to the whole range detectable
    assert mde_mean(10**6, 0.0) < mde_mean(10**6, 0.1) < mde_mean(10**6, 0.3)
    assert mde_mean(1000, 0.2, span=0) < mde_mean(1000, 0.2, span=1) < mde_mean(1000, 0.2, span=2)
    for bad in (float("nan"), -0.1, math.inf):
        with pytest.raises(ValueError, match="sd must be"):
            mde_mean(10, bad)
    with pytest.raises(ValueError, match="span must be"):
        mde_mean(10, 0.1, span=-1)


# ----------------------------------------------------------------------------- simulation


def test_binary_power_at_the_mde_by_simulation() -> None:
    # a regression of the printed MDE on top of 5 % symmetric flips, 1,000 items, alpha 0.05
    rng = np.random.default_rng(29)
    n, f = 1000, 0.05
    d = mde(n, f)
    counts = rng.multinomial(n, [f / 2 + d, f / 2, 1 - f - d], size=1000)
    power = np.mean([mcnemar(int(a), int(b)).pvalue < 0.05 for a, b, _ in counts])
    assert power >= 0.78  # Monte Carlo se 0.013 around the exact 0.82


def test_graded_power_at_the_mde_by_simulation() -> None:
    # a graded metric whose noise is N(0, 0.1) per item; a loss of the printed MDE concentrated
    # on a few items (each loses its whole value, the model's worst case) or spread over all
    rng = np.random.default_rng(2029)
    n, sd, reps = 300, 0.1, 200
    noise = rng.normal(0, sd, (reps, n))
    d = mde_mean(n, float(np.sqrt((noise**2).mean())))
    for shape in ("concentrated", "spread"):
        hit = 0
        for j in range(reps):
            base = rng.uniform(0.0, 1.0, n)
            loss = np.where(rng.random(n) < d, 1.0, 0.0) if shape == "concentrated" else np.full(n, d)
            cand = base + noise[j] - loss
            res = stats.sign_flip_test(base, cand, n_resamples=1000, rng=np.random.default_rng(j))
            hit += res.pvalue < 0.05
        assert hit / reps >= 0.74, shape  # Monte Carlo se 0.028 around >= 0.80
