from __future__ import annotations

from scipy.stats import binom

from evalgate.gate import GatePolicy, decide
from evalgate.store.records import Pair, Record
from tests.helpers.records import record


def _rec(arm: str, i: int, acc: int) -> Record:
    return record(arm, str(i), {"acc": float(acc)}, prompt_hash="h", target=0)


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
    assert v.suites[0].status == "error" and v.verdict == "ERROR" and v.exit_code == 3
    assert v.reason == "s: no paired items"


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
    assert abs(a.budget - 0.18) < 1e-12 and a.budget_source == "A/A + 3 pt" and not a.significant
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


# ----------------------------------------------------------------------------- #19: honest decisions


def _graded(arm: str, i: int, value: float | None, **extra: object) -> Record:
    metrics = {} if value is None else {"f1": value}
    return Record(
        run_id="r", arm=arm, variant=arm, suite="s", suite_version=1, item_id=str(i), repeat=0,
        prompt_hash="h", target=0, response=None, extracted=None, metrics=metrics, extra=dict(extra),
    )  # fmt: skip


def _pairs_of(base: list[float | None], cand: list[float | None], **extra: object) -> list[Pair]:
    return [
        Pair(str(i), 0, _graded("baseline", i, b, **extra), _graded("candidate", i, c, **extra))
        for i, (b, c) in enumerate(zip(base, cand, strict=True))
    ]


def test_nothing_to_judge_is_an_error_with_a_one_line_cause() -> None:
    assert decide({}, policy=GatePolicy()).exit_code == 3
    cases = {
        "renamed": _pairs_of([1.0] * 20, [1.0] * 20),  # the metric key the suite declares is absent
        "nan": _pairs_of([1.0] * 19 + [float("nan")], [1.0] * 20),
        "graded": _pairs_of([0.5] * 20, [1.0] * 20),  # declared binary, but not 0/1
    }
    metric = {"renamed": "acc", "nan": "f1", "graded": "f1"}
    for name, given in cases.items():
        v = decide({name: ([metric[name]], given)}, policy=GatePolicy())
        assert v.verdict == "ERROR" and v.exit_code == 3, name
        assert "\n" not in v.reason and v.reason.startswith(f"{name}: the primary metric"), v.reason
    assert (
        "is missing on 40 record(s)" in decide({"s": (["acc"], cases["renamed"])}, policy=GatePolicy()).reason
    )
    failed = _pairs_of([0.0] * 30, [0.0] * 30, error="HTTP 500")  # --errors-as-wrong: every item failed
    v = decide({"s": (["f1"], failed)}, policy=GatePolicy(errors_as_wrong=True))
    assert v.exit_code == 3 and v.reason == "s: every item failed on the baseline (30 of 30; first: HTTP 500)"
    cand_only = [Pair(p.item_id, 0, _graded("baseline", i, 1.0), p.candidate) for i, p in enumerate(failed)]
    v = decide({"s": (["f1"], cand_only)}, policy=GatePolicy(errors_as_wrong=True))  # wrong answers: judged
    assert v.verdict == "BLOCK"
    ok = decide({"s": (["acc"], pairs(30, 0, 0, 20)), "t": (["acc"], [])}, policy=GatePolicy())
    assert ok.verdict == "ERROR" and [r.status for r in ok.suites] == ["underpowered", "error"]


def test_run_folder_with_a_renamed_metric_exits_3(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from evalgate.cli import main
    from tests.helpers.runs import SynthSuite, build_run

    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (20, 0, 0, 10))])
    doc = json.loads((run / "manifest.json").read_text())
    doc["suites"]["gsm8k"]["metrics"] = ["exact_match,renamed"]
    (run / "manifest.json").write_text(json.dumps(doc))
    assert main(["report", str(run)]) == 3
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["verdict"] == "ERROR" and "'exact_match,renamed' is missing" in verdict["reason"]


def test_mde_is_computed_at_the_level_holm_demands() -> None:
    from evalgate import stats

    six = {f"s{i}": (["acc"], pairs(800, 20, 20, 1160)) for i in range(6)}
    v = decide(six, policy=GatePolicy())
    assert len(v.agreement) == 6  # 12 tests: 6 accuracy rows + 6 agreement rows
    row = v.suites[0]
    assert row.mde_alpha == 0.05 / 12
    assert row.mde == stats.mde(2000, 0.02, alpha=0.05 / 12)
    assert row.mde > stats.mde(2000, 0.02, alpha=0.05)  # the plain-alpha MDE overstated power
    assert row.status == "pass" and v.verdict == "PASS"
    small = decide({"s": (["acc"], pairs(100, 3, 3, 94))}, policy=GatePolicy())
    r = small.suites[0]
    assert r.mde_alpha == 0.025 and r.status == "underpowered"
    assert "alpha 0.05/2 = 0.025, the level Holm's first step demands over 2 tests" in r.reason
    assert "80 % power at alpha 0.025" in small.reason


def test_non_inferiority_is_an_intersection_union_test_at_one_minus_two_alpha() -> None:
    from evalgate import stats

    policy = GatePolicy(policy="non-inferiority", margin="2pt")
    big = pairs(4000, 100, 100, 5800)  # n = 10,000, delta 0
    six = {f"s{i}": (["acc"], big) for i in range(6)}
    v = decide(six, policy=policy)
    assert v.verdict == "PASS" and "intersection-union" in v.reason
    row = v.suites[0]
    ci = stats.paired_diff_ci(4000, 100, 100, 5800, confidence=0.90)  # 1 - 2 alpha, no division by k
    assert (row.ci_low, row.p_adjusted, row.mde_alpha) == (ci.low, None, 0.05)
    # 50 items: blocks exactly when its own 90 % bound crosses -2 pt, and says why in its own terms
    tiny = pairs(25, 0, 0, 25)
    bound = stats.paired_diff_ci(25, 0, 0, 25, confidence=0.90).low
    t = decide({**six, "tiny": (["acc"], tiny)}, policy=policy)
    assert (bound <= -0.02) == (t.verdict == "BLOCK")
    r = next(x for x in t.suites if x.suite == "tiny")
    assert r.status == "block" and "not shown non-inferior" in r.reason and "Holm" not in r.reason
    assert f"{bound * 100:+.1f} pt" in r.reason and "is not above -2.0 pt" in r.reason
    loose = decide({"tiny": (["acc"], tiny)}, policy=GatePolicy(policy="non-inferiority", margin="15pt"))
    assert loose.verdict == "PASS"


def test_regression_policy_counts_only_regressions_against_the_budget() -> None:
    better = pairs(400, 20, 80, 400)  # 100 flips of 900 (11 %), +6.7 pt: an improvement
    assert decide({"s": (["acc"], better)}, policy=GatePolicy()).verdict == "BLOCK"
    v = decide({"s": (["acc"], better)}, policy=GatePolicy(policy="regression"))
    assert v.verdict == "PASS" and v.agreement[0].counts == "regressions" and v.agreement[0].flips == 20


def test_an_agreement_block_without_aa_says_the_budget_includes_noise() -> None:
    noisy = pairs(460, 40, 40, 460)  # 8 % flips, accuracy unchanged: could be the server's own noise
    v = decide({"s": (["acc"], noisy)}, policy=GatePolicy())
    assert v.verdict == "BLOCK" and "--aa" in v.reason and "--deterministic" in v.reason
    assert "--aa" in v.agreement[0].reason


def test_aa_tests_the_excess_flip_rate_paired_on_the_same_items() -> None:
    from evalgate import stats

    cand = pairs(450, 45, 45, 460)  # 9 % flips
    aa = pairs(470, 30, 30, 470)  # 6 % A/A flips: the budget would be 9 %
    v = decide({"s": (["acc"], cand)}, policy=GatePolicy(), aa_pairs={"s": aa})
    a = v.agreement[0]
    assert a.aa_flip_rate == 0.06 and abs(a.aa_excess - 0.03) < 1e-12 and a.test.startswith("paired excess")
    flip_c = [p.baseline.metrics["acc"] != p.candidate.metrics["acc"] for p in cand]
    flip_a = [p.baseline.metrics["acc"] != p.candidate.metrics["acc"] for p in aa]
    only_c = sum(x and not y for x, y in zip(flip_c, flip_a, strict=True))
    only_a = sum(y and not x for x, y in zip(flip_c, flip_a, strict=True))
    assert a.p_value == stats.excess_test(only_c, only_a, 1000, margin=0.03).pvalue
    assert not a.significant and v.verdict == "PASS"
    worse = pairs(400, 80, 80, 440)  # 16 % flips against 6 %: 10 pt over the A/A rate
    w = decide({"s": (["acc"], worse)}, policy=GatePolicy(), aa_pairs={"s": aa})
    assert w.verdict == "BLOCK" and "excess +10.0 pt" in w.reason and "--deterministic" not in w.reason


def test_aa_rows_use_the_runs_alpha_and_policy() -> None:
    aa = pairs(400, 12, 3, 85)  # two-sided mid-p about 0.02
    base = pairs(400, 5, 5, 90)
    loose = decide({"s": (["acc"], base)}, policy=GatePolicy(agreement_gate=False), aa_pairs={"s": aa})
    strict = decide(
        {"s": (["acc"], base)}, policy=GatePolicy(alpha=0.01, agreement_gate=False), aa_pairs={"s": aa}
    )
    assert loose.aa is not None and strict.aa is not None
    assert loose.aa[0].significant and not loose.reliable
    assert not strict.aa[0].significant and strict.reliable
    improved = pairs(400, 3, 12, 85)  # the A/A "improves": not a regression
    reg = decide({"s": (["acc"], base)}, policy=GatePolicy(policy="regression"), aa_pairs={"s": improved})
    assert reg.reliable


def test_a_graded_metric_uses_the_sign_flip_test_not_a_threshold() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    base = list(np.clip(rng.normal(0.8, 0.05, 200), 0, 1))
    drop = [b - 0.2 for b in base]  # F1 0.8 -> 0.6 on every item: both sides of 0.5
    v = decide({"s": (["f1"], _pairs_of(base, drop))}, policy=GatePolicy(), kinds={"s": "continuous"})
    row = v.suites[0]
    assert v.verdict == "BLOCK" and row.test == "sign-flip" and abs(row.delta + 0.2) < 1e-9
    assert row.p_value == 1 / 10_001 and row.ci_high < -0.19
    again = decide({"s": (["f1"], _pairs_of(base, drop))}, policy=GatePolicy(), kinds={"s": "continuous"})
    assert again.suites[0] == row  # seeded: a re-render reproduces p and CI exactly
    noise = [b + e for b, e in zip(base, rng.normal(0, 0.01, 200), strict=True)]
    quiet = decide({"s": (["f1"], _pairs_of(base, noise))}, policy=GatePolicy(), kinds={"s": "continuous"})
    assert quiet.verdict == "PASS" and quiet.suites[0].test == "sign-flip"
    a = quiet.agreement[0]  # every value moved: no flip budget applies to a graded metric
    assert (
        a.status == "info"
        and a.p_adjusted is None
        and "not gated" in a.reason
        and "flips" not in quiet.reason
    )


def test_non_finite_choice_logliks_are_counted_and_shown() -> None:
    def mc(arm: str, i: int, logliks: list[float]) -> Record:
        return Record(
            run_id="r", arm=arm, variant=arm, suite="s", suite_version=1, item_id=str(i), repeat=0,
            prompt_hash="h", target=0, response=[[x, False] for x in logliks], extracted=None,
            metrics={"acc": 1.0},
        )  # fmt: skip

    good = [
        Pair(str(i), 0, mc("baseline", i, [-1.0, -2.0]), mc("candidate", i, [-1.0, -2.0])) for i in range(8)
    ]
    bad = [Pair(str(8 + i), 0, mc("baseline", 8 + i, [-1.0, -2.0]), mc("candidate", 8 + i, [float("nan"), -2.0]))
           for i in range(2)]  # fmt: skip
    a = decide({"s": (["acc"], good + bad)}, policy=GatePolicy()).agreement[0]
    assert a.nonfinite == 2 and a.kl_mean == 0.0 and a.top1_agree == 0.8
    assert "2 item(s) with non-finite choice log-likelihoods" in a.reason
