"""Non-inferiority on graded and --repeats suites (#29): a bound that keeps its level when the
changes sit on a few items, and no PASS when too few items differ to estimate it.

Through the gate (``decide``, agreement gate on, --repeats pairs as ``verdict_for`` passes them),
with the arithmetic checked against the binary suite's Tango bound on the same counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalgate import stats
from evalgate.gate import GatePolicy, decide
from evalgate.gate._repeats import item_means
from tests.helpers.modules import load_file

REPO = Path(__file__).resolve().parents[2]
NI = {"policy": "non-inferiority"}


# the benchmark's record builder, so this test and benchmarks/sim_noninferiority.py judge the same runs
repeat_pairs = load_file("sim_noninferiority", REPO / "benchmarks" / "sim_noninferiority.py").repeat_pairs


def _repeats(x: np.ndarray, y: np.ndarray, margin: str):  # type: ignore[no-untyped-def]
    """The gate as ``verdict_for`` calls it on a --repeats run: per-item means, graded."""
    pairs = repeat_pairs(x, y)
    return decide(
        {"s": (["m"], item_means(pairs, ["m"]))}, policy=GatePolicy(margin=margin, **NI),
        kinds={"s": "continuous"}, sampled={"s": pairs},
    )  # fmt: skip


def _graded(a: np.ndarray, b: np.ndarray, margin: str, **policy: object):  # type: ignore[no-untyped-def]
    pairs = repeat_pairs(a[:, None], b[:, None])
    return decide(
        {"s": (["m"], pairs)}, policy=GatePolicy(margin=margin, **{**NI, **policy}), kinds={"s": "continuous"}
    )  # fmt: skip


@pytest.mark.parametrize("margin", ["2pt", "10pt", "30pt", "5%rel"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identical_outcomes_on_five_items_never_pass_non_inferiority(margin: str, seed: int) -> None:
    """--repeats 4 on 5 items, the arms' outcomes identical: the bootstrap interval was [0, 0] and
    passed any margin; now the row counts changes as whole flips and gets the binary suite's
    Tango bound on 5 items (-35.1 pt at 90 %), so it blocks, as the same counts as a binary suite do."""
    x = (np.random.default_rng(seed).random((5, 4)) < 0.6).astype(float)
    v = _repeats(x, x.copy(), margin)
    row = v.suites[0]
    binary = stats.paired_diff_ci(5, 0, 0, 0, confidence=0.9)
    assert row.ci_low == pytest.approx(binary.low, abs=1e-9) and row.ci_low < -0.35
    assert v.verdict == "BLOCK" and row.status == "block" and row.significant, v.reason
    assert "whole flip" in row.reason and "too few to resample" in row.reason
    assert "not shown non-inferior" in v.reason
    as_binary = _graded(x[:, 0], x[:, 0], margin)  # the same 5 identical items as a 0/1 suite
    assert as_binary.verdict == "BLOCK" and as_binary.suites[0].ci_low == pytest.approx(row.ci_low, abs=1e-9)


def test_a_few_differing_items_use_the_binary_bound_on_their_summed_changes() -> None:
    """Fewer than 10 items differ: the losses and gains are summed as fractions of a flip and
    Tango's interval is taken of them; for 0/1 values that is exactly the binary suite's."""
    base = np.ones(40)
    cand = base.copy()
    cand[:3] = 0.0
    cand[3] = 0.0
    row = _graded(base, cand, "2pt").suites[0]
    binary = stats.paired_diff_ci(36, 4, 0, 0, confidence=0.9)
    assert (row.ci_low, row.ci_high) == pytest.approx((binary.low, binary.high), abs=1e-9)
    half = cand.copy()
    half[:4] = 0.5  # four items each lose half: two whole flips' worth
    graded = _graded(base, half, "2pt").suites[0]
    two = stats.paired_diff_ci(38, 2, 0, 0, confidence=0.9)
    assert graded.ci_low == pytest.approx(two.low, abs=1e-9)


def test_a_thousand_identical_items_pass_as_a_binary_suite_would() -> None:
    """Zero items differ but n is large: the same Tango bound (-0.27 pt at 1,000 items) clears a
    2 pt margin, as it does for a binary suite; a few identical items never do."""
    a = np.random.default_rng(3).uniform(0, 1, 1000)
    v = _graded(a, a.copy(), "2pt")
    binary = stats.paired_diff_ci(1000, 0, 0, 0, confidence=0.9)
    assert v.suites[0].ci_low == pytest.approx(binary.low, abs=1e-9) and -0.003 < binary.low < 0
    assert v.verdict == "PASS", v.reason


def test_sparse_graded_non_inferiority_holds_its_level_at_the_margin_through_the_gate() -> None:
    """10 % of items lose 0.2 (the truth sits at the 2 pt margin): the share of runs the gate
    calls non-inferior is the type I error; the percentile bound alone passed 0.10-0.175 of them.
    A small seeded draw (the benchmark has the large one: benchmarks/sim_noninferiority.py)."""
    gen = np.random.default_rng(29)
    for n, reps in ((50, 60), (200, 30)):
        passed = 0
        for _ in range(reps):
            a = gen.uniform(0.3, 1.0, n)
            b = a - 0.2 * (gen.random(n) < 0.1)
            passed += _graded(a, b, "2pt", agreement_gate=False).verdict == "PASS"
        assert passed / reps <= 0.055, (n, passed / reps)


def test_sparse_type_one_of_the_bound_itself_is_at_most_its_level() -> None:
    """The same at the level of ``stats.graded_diff_ci`` with more replicates (fewer resamples)."""
    gen = np.random.default_rng(290)
    for n in (50, 200):
        passed = 0
        for _ in range(400):
            a = gen.uniform(0.3, 1.0, n)
            b = a - 0.2 * (gen.random(n) < 0.1)
            ci = stats.graded_diff_ci(
                a, b, confidence=0.9, n_resamples=500, rng=np.random.default_rng(int(gen.integers(2**32)))
            )
            passed += ci.low > -0.02
        assert passed / 400 <= 0.055, (n, passed / 400)
