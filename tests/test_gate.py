from __future__ import annotations

from scipy.stats import binom

from evalgate.gate import GatePolicy, decide
from evalgate.records import Pair, Record


def _rec(arm: str, i: int, acc: int) -> Record:
    return Record(
        run_id="r",
        arm=arm,
        variant=arm,
        suite="s",
        suite_version=1,
        item_id=str(i),
        repeat=0,
        prompt_hash="h",
        target=0,
        response=None,
        extracted=None,
        metrics={"acc": float(acc)},
    )


def pairs(n11: int, n10: int, n01: int, n00: int) -> list[Pair]:
    out, i = [], 0
    for (b, c), k in (((1, 1), n11), ((1, 0), n10), ((0, 1), n01), ((0, 0), n00)):
        for _ in range(k):
            out.append(Pair(str(i), 0, _rec("baseline", i, b), _rec("candidate", i, c)))
            i += 1
    return out


def midp_two_sided(n10: int, n01: int) -> float:
    """Independent reference: 2 * [P(X < k) + P(X = k)/2], X ~ Bin(nd, 1/2), k = min."""
    nd, k = n10 + n01, min(n10, n01)
    return min(1.0, 2 * (binom.cdf(k - 1, nd, 0.5) + 0.5 * binom.pmf(k, nd, 0.5)))


def test_counts_and_midp_against_scipy() -> None:
    v = decide({"s": (["acc"], pairs(40, 12, 3, 45))}, policy=GatePolicy())
    row = v.suites[0]
    assert (row.n, row.n10, row.n01, row.n11, row.n00) == (100, 12, 3, 40, 45)
    assert abs(row.baseline - 0.52) < 1e-12 and abs(row.candidate - 0.43) < 1e-12
    assert abs(row.delta - (-0.09)) < 1e-12
    assert abs(row.p_value - midp_two_sided(12, 3)) < 1e-12
    assert row.ci_low < row.delta < row.ci_high
    assert v.verdict == "BLOCK" and v.exit_code == 1


def test_identical_arms_pass() -> None:
    v = decide({"s": (["acc"], pairs(30, 0, 0, 20))}, policy=GatePolicy())
    assert v.verdict == "PASS" and v.exit_code == 0
    assert v.suites[0].p_value == 1.0 and v.suites[0].flips == 0.0


def test_holm_family_over_primary_metrics_only() -> None:
    per_suite = {
        "a": (["acc", "acc_norm"], pairs(40, 9, 1, 50)),
        "b": (["acc"], pairs(40, 2, 2, 56)),
    }
    v = decide(per_suite, policy=GatePolicy(agreement_gate=False))
    primary = [r for r in v.suites if r.primary]
    info = [r for r in v.suites if not r.primary]
    assert len(primary) == 2 and len(info) == 1 and info[0].p_adjusted is None
    pa, pb = sorted(r.p_value for r in primary)
    adjusted = sorted(r.p_adjusted for r in primary)
    assert abs(adjusted[0] - min(1, 2 * pa)) < 1e-12
    assert abs(adjusted[1] - max(min(1, 2 * pa), pb)) < 1e-12


def test_regression_policy_is_one_sided() -> None:
    improved = pairs(40, 1, 9, 50)
    assert decide({"s": (["acc"], improved)}, policy=GatePolicy(policy="regression")).verdict == "PASS"
    assert decide({"s": (["acc"], improved)}, policy=GatePolicy()).verdict == "BLOCK"


def test_tiny_runs_give_valid_json() -> None:
    v = decide({"s": (["acc"], pairs(1, 0, 0, 1))}, policy=GatePolicy())
    assert "Infinity" not in v.to_json() and v.suites[0].mde <= 1.0


def test_parse_margin_forms() -> None:
    from evalgate.gate import parse_margin

    assert parse_margin("2pt") == (0.02, False)
    assert parse_margin("0.02") == (0.02, False)
    assert parse_margin("1%rel") == (0.01, True)
    for bad in ("-1", "abc", "150pt"):
        try:
            parse_margin(bad)
        except Exception as exc:  # ConfigError
            assert "margin" in str(exc)
        else:
            raise AssertionError(bad)


def test_non_inferiority_blocks_unless_lower_bound_above_minus_margin() -> None:
    big = pairs(400, 10, 10, 580)  # n = 1000, delta 0, CI about +-1.3 pt
    ok = decide({"s": (["acc"], big)}, policy=GatePolicy(policy="non-inferiority", margin="3pt"))
    assert ok.verdict == "PASS" and "non-inferior" in ok.reason
    tight = decide({"s": (["acc"], big)}, policy=GatePolicy(policy="non-inferiority", margin="0.5pt"))
    assert tight.verdict == "BLOCK" and "lower confidence bound" in tight.reason
    rel = GatePolicy(policy="non-inferiority", margin="10%rel")
    assert abs(rel.margin_for(0.41) - 0.041) < 1e-12


def test_small_run_is_marked_underpowered() -> None:
    v = decide({"s": (["acc"], pairs(20, 1, 1, 28))}, policy=GatePolicy())
    assert v.verdict == "PASS" and v.suites[0].status == "underpowered"
    assert "UNDERPOWERED" in v.reason and "only means no difference" in v.reason


def test_missing_rows_are_not_called_pass() -> None:
    v = decide({"s": (["acc"], [])}, policy=GatePolicy())
    assert v.suites[0].status == "missing"


def test_balanced_flip_storm_blocks_on_agreement_not_accuracy() -> None:
    """The issue's CPU measurement: Q4_0 weights, 42 / 34 flips in 500, McNemar p = 0.36."""
    storm = pairs(210, 42, 34, 214)
    v = decide({"arc_easy": (["acc"], storm)}, policy=GatePolicy())
    acc, agree = v.suites[0], v.agreement[0]
    assert not acc.significant and acc.status != "block"
    assert agree.flips == 76 and abs(agree.flip_rate - 0.152) < 1e-12 and agree.significant
    assert v.verdict == "BLOCK"
    assert (
        v.reason.startswith("arc_easy: accuracy change not significant (delta -1.6 pt, p = 0.")
        and "15.2% of answers flipped" in v.reason
    )
    off = decide({"arc_easy": (["acc"], storm)}, policy=GatePolicy(agreement_gate=False))
    assert off.verdict == "PASS" and off.agreement == []


def test_budget_test_matches_scipy_binomtest() -> None:
    from scipy.stats import binomtest

    v = decide({"s": (["acc"], pairs(400, 20, 15, 565))}, policy=GatePolicy(flip_budget=0.03))
    a = v.agreement[0]
    assert abs(a.p_value - binomtest(35, 1000, 0.03, alternative="greater").pvalue) < 1e-12
    assert a.budget_source == "--flip-budget"


def test_aa_sets_the_budget_and_flags_an_unreliable_floor() -> None:
    storm = pairs(210, 42, 34, 214)
    noisy_aa = pairs(200, 45, 30, 225)  # 15 % A/A flips: a nondeterministic server
    v = decide({"arc_easy": (["acc"], storm)}, policy=GatePolicy(), aa_pairs={"arc_easy": noisy_aa})
    a = v.agreement[0]
    assert abs(a.budget - 0.18) < 1e-12 and a.budget_source == "A/A + 3%" and not a.significant
    assert v.verdict == "PASS" and v.reliable
    bad_aa = pairs(200, 60, 10, 230)  # the A/A pair itself would block
    v2 = decide({"arc_easy": (["acc"], storm)}, policy=GatePolicy(), aa_pairs={"arc_easy": bad_aa})
    assert not v2.reliable and any("UNRELIABLE" in n for n in v2.notes)


def test_flip_gate_false_block_rate_at_the_budget() -> None:
    """Seeded simulation: when the true flip rate equals the budget, block at most alpha + 0.01."""
    import numpy as np

    from evalgate import stats

    rng = np.random.default_rng(11)
    n, budget = 300, 0.05
    flips = rng.binomial(n, budget, size=2000)
    rate = np.mean([stats.flip_budget_test(int(f), n, budget=budget).pvalue < 0.05 for f in flips])
    assert rate <= 0.06
