"""The sampled agreement test (#20, ``stats.sampled_excess_test``): known answers by brute force on
tiny cases, edge cases, its error rate by seeded simulation, and the gate's row built on it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalgate import stats
from evalgate.cli import main
from evalgate.gate import GatePolicy, decide, unanswered, unanswered_test
from evalgate.gate._repeats import item_means, outcome_matrix, sampled_agreement_row
from evalgate.store.records import Pair, Record, RecordStore
from tests.helpers.background import serving
from tests.helpers.hostile_server import Hostile, hostile_app


def _brute(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Mean D, S, C over items by counting every ordered repeat pair r != s."""
    k = x.shape[1]
    pairs = [(r, s) for r in range(k) for s in range(k) if r != s]

    def share(u: np.ndarray, v: np.ndarray) -> float:
        return float(np.mean([np.mean([u[i, r] != v[i, s] for r, s in pairs]) for i in range(len(u))]))

    return share(x, y), share(x, x), share(y, y)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_disagreement_shares_and_excess_match_a_count_of_repeat_pairs() -> None:
    gen = _rng(3)
    for _ in range(50):
        n, k = int(gen.integers(1, 5)), int(gen.integers(2, 6))
        x, y = (gen.integers(0, 2, (n, k)).astype(float) for _ in range(2))
        res = stats.sampled_excess_test(x, y, margin=0.03, n_resamples=64, rng=_rng())
        cross, sx, sy = _brute(x, y)
        assert (res.cross, res.within_x, res.within_y) == pytest.approx((cross, sx, sy))
        assert res.estimate == pytest.approx(cross - (sx + sy) / 2)


@pytest.mark.parametrize(("pb", "pc", "k"), [(0.5, 0.5, 2), (0.9, 0.6, 3), (0.2, 0.7, 4), (1.0, 0.0, 2)])
def test_the_excess_is_unbiased_for_the_squared_difference_of_per_item_chances(
    pb: float, pc: float, k: int
) -> None:
    """Exact expectation over every outcome of k independent repeats per arm: (pb - pc)^2."""
    expected = 0.0
    for outcome in itertools.product((0.0, 1.0), repeat=2 * k):
        b, c = np.array([outcome[:k]]), np.array([outcome[k:]])
        weight = np.prod([pb if v else 1 - pb for v in b[0]]) * np.prod([pc if v else 1 - pc for v in c[0]])
        cross, sx, sy = _brute(b, c)
        expected += weight * (cross - (sx + sy) / 2)
    assert expected == pytest.approx((pb - pc) ** 2)


def _excess(x: np.ndarray, y: np.ndarray) -> float:
    """D - (S + C) / 2 by brute force."""
    cross, sx, sy = _brute(x, y)
    return cross - (sx + sy) / 2


def _swap_hits(
    x: np.ndarray, y: np.ndarray, statistic: Callable[[np.ndarray, np.ndarray], float]
) -> tuple[float, int, int]:
    """The observed statistic, how many of the arm swaps of each differing (item, repeat) reach it,
    and how many differ: the exact exchange p-value is hits / 2 ** differ."""
    stat = statistic(x, y)
    differ = [(i, r) for i in range(x.shape[0]) for r in range(x.shape[1]) if x[i, r] != y[i, r]]
    hits = 0
    for swap in itertools.product((False, True), repeat=len(differ)):
        u, v = x.copy(), y.copy()
        for (i, r), s in zip(differ, swap, strict=True):
            if s:
                u[i, r], v[i, r] = y[i, r], x[i, r]
        hits += statistic(u, v) >= stat - 1e-12
    return stat, hits, len(differ)


def test_the_exchange_p_value_enumerates_every_arm_swap_on_a_tiny_case() -> None:
    """Two items, three repeats, three differing repeat pairs: 8 swap patterns, each swapped data
    set's D - (S + C) / 2 counted by brute force."""
    x = np.array([[1, 1, 0], [1, 0, 1]], dtype=float)
    y = np.array([[0, 0, 0], [1, 1, 1]], dtype=float)
    observed = stats.sampled_excess_test(x, y, margin=0.0, rng=_rng())
    stat, hits, differ = _swap_hits(x, y, _excess)
    assert differ == 3 and observed.method == "exact"
    assert observed.p_exchange == pytest.approx(hits / 8) and 0 < hits < 8
    assert observed.estimate == pytest.approx(stat)


def test_edge_cases() -> None:
    same = np.array([[1, 0, 1, 1]] * 5, dtype=float)
    res = stats.sampled_excess_test(same, same, margin=0.03, rng=_rng())
    assert (res.estimate, res.pvalue, res.p_exchange, res.p_margin) == (0.0, 1.0, 1.0, 1.0)
    assert res.within_x == pytest.approx(0.5)  # one 0 among four: 6 of 12 ordered pairs differ
    flipped = stats.sampled_excess_test(
        np.ones((30, 4)), np.zeros((30, 4)), margin=0.03, n_resamples=999, rng=_rng()
    )
    assert flipped.estimate == 1.0 and flipped.pvalue == pytest.approx(1 / 1000)
    # under the regression policy an improvement never counts
    better = stats.sampled_excess_test(
        np.zeros((30, 4)), np.ones((30, 4)), margin=0.03, n_resamples=999, regressions=True, rng=_rng()
    )
    assert better.estimate == 0.0 and better.pvalue == 1.0
    for bad, words in (
        ((np.ones((3, 1)), np.ones((3, 1))), "two repeats"),
        ((np.ones((3, 2)), np.ones((2, 2))), "one shape"),
        ((np.full((3, 2), 0.5), np.ones((3, 2))), "0/1"),
    ):
        with pytest.raises(ValueError, match=words):
            stats.sampled_excess_test(*bad, margin=0.03, rng=_rng())
    with pytest.raises(ValueError, match="margin"):
        stats.sampled_excess_test(same, same, margin=1.5, rng=_rng())


def _split_brute(x: np.ndarray, y: np.ndarray) -> float:
    """The regression row's estimate by counting: per item, the mean over ordered repeat pairs
    r != s of [repeat r regressed] times d_s (+1 regressed, -1 improved, 0 the same)."""
    k = x.shape[1]
    d = x - y
    return float(np.mean([
        np.mean([float(d[i, r] == 1) * d[i, s] for r in range(k) for s in range(k) if r != s])
        for i in range(len(d))
    ]))  # fmt: skip


def _split_expectation(pb: float, pc: float, k: int, share: float, regressions: bool) -> float:
    """Exact E mean e over every outcome of k repeats, each repeat's pair sharing one uniform with
    probability ``share`` (then d = 1 iff pc <= u < pb) and drawing two otherwise."""
    a = share * max(pb - pc, 0) + (1 - share) * pb * (1 - pc)  # P(d_r = +1)
    b = share * max(pc - pb, 0) + (1 - share) * pc * (1 - pb)  # P(d_r = -1)
    law = {1.0: a, -1.0: b, 0.0: 1 - a - b}
    total = 0.0
    for d in itertools.product(law, repeat=k):
        x = np.array([[1.0 if v == 1 else 0.0 for v in d]])
        y = np.array([[1.0 if v == -1 else 0.0 for v in d]])  # (x, y) realise d: only d enters e
        est = stats.sampled_excess_test(x, y, margin=0.0, n_resamples=1, regressions=regressions, rng=_rng())
        total += float(np.prod([law[v] for v in d])) * est.estimate
    return total


def test_the_regression_excess_is_a_split_count_of_repeat_pairs() -> None:
    gen = _rng(4)
    for _ in range(50):
        n, k = int(gen.integers(1, 5)), int(gen.integers(2, 6))
        x, y = (gen.integers(0, 2, (n, k)).astype(float) for _ in range(2))
        res = stats.sampled_excess_test(x, y, margin=0.03, n_resamples=64, regressions=True, rng=_rng())
        assert res.estimate == pytest.approx(_split_brute(x, y))


@pytest.mark.parametrize(
    ("pb", "pc", "k", "share"),
    [(0.5, 0.5, 2, 0.0), (0.8, 0.8, 4, 0.85), (0.7, 0.4, 2, 0.0), (0.4, 0.7, 3, 0.5), (0.9, 0.2, 4, 0.85)],
)
def test_the_regression_excess_is_unbiased_and_zero_at_an_a_a(
    pb: float, pc: float, k: int, share: float
) -> None:
    """E e = P(same-seed regression) x (pb - pc) exactly: 0 at an A/A whatever the sharing (the
    old same-draw selection kept +6.25 pt at pb = pc = 0.5, k = 2, nothing shared), never positive
    for a gain, and (pb - pc)^2 on a loss when every draw is shared."""
    a = share * max(pb - pc, 0) + (1 - share) * pb * (1 - pc)
    assert _split_expectation(pb, pc, k, share, regressions=True) == pytest.approx(a * (pb - pc), abs=1e-12)
    if pb == pc:
        old = 0.0  # the same-draw selection: items whose repeats favour the baseline, two-sided excess
        for outcome in itertools.product((0.0, 1.0), repeat=2 * k):
            b, c = np.array(outcome[:k]), np.array(outcome[k:])
            w = np.prod([pb if v else 1 - pb for v in outcome])
            s = float((b - c).sum())
            old += w * (s * s - float(((b - c) ** 2).sum())) / (k * (k - 1)) * (s > 0)
        assert share > 0 or old > 0.04  # the bias this replaces (6.25 pt at k = 2, 1.95 pt at k = 4)
    assert _split_expectation(1.0, 0.0, k, share, regressions=True) == pytest.approx(1.0)  # deterministic
    all_shared = _split_expectation(0.9, 0.2, k, 1.0, regressions=True)
    assert all_shared == pytest.approx(0.49)  # every draw shared: delta^2


def test_the_regression_exchange_p_value_enumerates_every_arm_swap() -> None:
    x = np.array([[1, 1, 0], [1, 0, 1]], dtype=float)
    y = np.array([[0, 0, 1], [1, 1, 1]], dtype=float)
    observed = stats.sampled_excess_test(x, y, margin=0.0, regressions=True, rng=_rng())
    stat, hits, differ = _swap_hits(x, y, _split_brute)
    assert differ == 4 and observed.method == "exact" and observed.estimate == pytest.approx(stat)
    assert observed.p_exchange == pytest.approx(hits / 16) and 0 < hits < 16


def _coupled(
    gen: np.random.Generator, p: np.ndarray, q: np.ndarray, k: int, share: float = 0.85
) -> tuple[np.ndarray, np.ndarray]:
    """Common random numbers as far as an engine allows: repeat r of both arms thresholds one
    uniform draw on ``share`` of the (item, repeat) pairs and its own draws on the rest."""
    u = gen.random((p.size, k))
    v = np.where(gen.random((p.size, k)) < share, u, gen.random((p.size, k)))
    return (u < p[:, None]).astype(float), (v < q[:, None]).astype(float)


def test_false_block_rate_of_identical_sampled_arms_is_at_most_alpha() -> None:
    """A/A under sampling (heterogeneous per-item chances, common seeds), 200 seeded replicates at
    a plain alpha of 0.05: the margin is never the issue, the test must not call noise a change."""
    gen, alpha, blocks = _rng(11), 0.05, 0
    for _ in range(200):
        p = gen.beta(0.6, 0.6, 60)
        x, y = _coupled(gen, p, p, 4)
        blocks += stats.sampled_excess_test(x, y, margin=0.0, n_resamples=199, rng=gen).pvalue < alpha
    assert blocks / 200 <= alpha + 2 * np.sqrt(alpha * (1 - alpha) / 200)


@pytest.mark.parametrize("k", [2, 4])
def test_the_regression_row_holds_its_level_at_an_a_a_and_at_a_small_true_loss(k: int) -> None:
    """Unshared draws (an engine without common seeds), 300 items: at an exact A/A the mean
    estimate is 0 within its error and the strictest test (margin 0: the arm-swap test alone)
    rejects at most alpha; with every item 7 pt worse (mean (p - p')^2 = 0.5 pt, the row's estimand
    about 1.3 pt) the 3 pt margin holds (the same-draw selection rejected 8-11 % here)."""
    gen, alpha, reps = _rng(20 + k), 0.05, 60
    p = gen.beta(0.7, 0.5, 300)
    worse = p - np.minimum(p, 0.073)
    tol = alpha + 2 * np.sqrt(alpha * (1 - alpha) / reps)
    for q, margin in ((p, 0.0), (worse, 0.03)):
        rejects, estimates = 0, []
        for _ in range(reps):
            x, y = _coupled(gen, p, q, k, share=0.0)
            res = stats.sampled_excess_test(x, y, margin=margin, n_resamples=199, regressions=True, rng=gen)
            rejects += res.pvalue < alpha
            estimates.append(res.estimate)
        assert rejects / reps <= tol, (margin, rejects)
        if margin == 0.0:
            assert abs(np.mean(estimates)) < 3 * np.std(estimates) / np.sqrt(reps)


def test_a_candidate_whose_per_item_chances_moved_blocks_and_one_at_the_margin_rarely_does() -> None:
    gen = _rng(5)
    p = gen.beta(0.6, 0.6, 200)
    moved = np.clip(p + np.where(gen.random(200) < 0.5, 0.4, -0.4), 0, 1)  # mean excess about 0.13
    x, y = _coupled(gen, p, moved, 4)
    assert stats.sampled_excess_test(x, y, margin=0.03, n_resamples=999, rng=gen).pvalue <= 1 / 1000
    at_margin, blocks = np.sqrt(0.03), 0  # every item's chance moved by sqrt(margin): excess = margin
    for _ in range(100):
        p = gen.uniform(0.3, 0.7, 100)
        x, y = _coupled(gen, p, p - at_margin, 4)
        blocks += stats.sampled_excess_test(x, y, margin=0.03, n_resamples=199, rng=gen).pvalue < 0.05
    assert blocks / 100 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 100)


# -- the gate's row --------------------------------------------------------------------------------


def _rec(arm: str, item: str, r: int, right: float, **extra: object) -> Record:
    return Record(
        run_id="x", arm=arm, variant=arm, suite="s", suite_version=1, item_id=item, repeat=r, prompt_hash="h",
        target="7", response=f"{item}{r}{right}", extracted=None, metrics={"em": right}, extra=dict(extra),
    )  # fmt: skip


def _pairs(x: np.ndarray, y: np.ndarray, **extra: object) -> list[Pair]:
    return [
        Pair(
            f"i{i}",
            r,
            _rec("baseline", f"i{i}", r, x[i, r], **extra),
            _rec("candidate", f"i{i}", r, y[i, r], **extra),
        )
        for i in range(x.shape[0])
        for r in range(x.shape[1])
    ]


def _decide(pairs: list[Pair], **policy: object):  # type: ignore[no-untyped-def]
    return decide(
        {"s": (["em"], item_means(pairs, ["em"]))}, policy=GatePolicy(**policy), kinds={"s": "continuous"},
        sampled={"s": pairs},
    )  # fmt: skip


def test_the_gate_blocks_an_excess_over_repeat_noise_and_passes_noise_alone() -> None:
    gen = _rng(2)
    p = gen.beta(0.6, 0.6, 150)
    x, y = _coupled(gen, p, p, 4)
    v = _decide(_pairs(x, y))
    a = v.agreement[0]
    assert v.verdict == "PASS" and a.status == "pass" and a.sampled is not None, a.reason
    assert a.sampled.baseline_within > 0.1 and "repeat to repeat" in a.reason
    assert "no more than each with itself" in v.reason and "flips within budget" not in v.reason
    flips = np.where(gen.random((150, 1)) < 0.25, 1 - x, x)  # a quarter of the items answered the other way
    v = _decide(_pairs(x, flips.astype(float)))
    a = v.agreement[0]
    assert a.status == "block" and a.significant and v.verdict == "BLOCK", a.reason
    assert a.test.startswith("sampled excess") and "more over the arms' own disagreement" in a.reason
    assert "of repeat pairs against" in v.reason and "within each arm" in v.reason


def test_the_regression_row_says_its_split_figure_and_blocks_a_real_loss() -> None:
    """--policy regression: an A/A's row prints an excess near 0 (the same-draw selection printed
    about +5 pt), and a candidate that lost a third of the items blocks with the split figure."""
    gen = _rng(9)
    p = gen.beta(0.7, 0.5, 200)
    x, y = _coupled(gen, p, p, 2, share=0.0)
    v = _decide(_pairs(x, y), policy="regression")
    a = v.agreement[0]
    assert a.counts == "regressions" and a.sampled is not None and abs(a.sampled.excess) < 0.03, a.reason
    assert "measured on the item's other repeats" in a.reason and "split estimate" in a.reason
    lost = np.where(np.arange(200)[:, None] < 70, 0.0, x)
    v = _decide(_pairs(x, lost), policy="regression")
    a = v.agreement[0]
    assert a.significant and a.status == "block" and v.verdict == "BLOCK", a.reason
    assert f"excess {a.sampled.excess * 100:+.1f} pt" in a.reason and a.sampled.excess > 0.1
    flat = lost.copy()
    flat[100:] = 1.0  # as many gains elsewhere: the accuracy row sees no loss, the agreement row blocks
    v = _decide(_pairs(x, flat), policy="regression")
    assert v.suites[0].status != "block" and v.agreement[0].significant and v.verdict == "BLOCK", v.reason
    assert "accuracy change not significant" in v.reason
    assert "measured on the item's other repeats" in v.reason


def test_a_graded_metric_under_repeats_is_shown_not_gated() -> None:
    x = np.full((10, 3), 0.5)
    pairs = _pairs(x, x)
    assert outcome_matrix(pairs, "em") is None
    row = sampled_agreement_row("s", "em", pairs, margin=0.03, budget_source="t")
    assert row.sampled is None


def test_no_answer_counts_as_unanswered_and_repeats_are_tested_per_item() -> None:
    assert unanswered(_rec("baseline", "a", 0, 0.0, empty=False, no_answer=True)) is True
    assert unanswered(_rec("baseline", "a", 0, 0.0, no_answer=False)) is False
    assert unanswered(_rec("baseline", "a", 0, 1.0, empty=False, finish_reason="length")) is True
    ones = np.ones((40, 4))
    pairs = [
        Pair(p.item_id, p.repeat, p.baseline, _rec("candidate", p.item_id, p.repeat, 1.0, empty=False,
             finish_reason="length" if p.repeat < 2 else "stop"))
        for p in _pairs(ones, ones, empty=False, finish_reason="stop")
    ]  # fmt: skip
    u = unanswered_test(pairs)
    assert u is not None and u.test == "sign-flip"
    assert (u.baseline_rate, u.candidate_rate, u.n10, u.n01) == (0.0, 0.5, 40, 0)
    v = _decide(pairs)  # every answer right, but the candidate hits the cap on half its repeats
    assert v.suites[0].status != "block" and v.verdict == "BLOCK", v.reason
    assert "left 40 item(s) unanswered" in v.reason and "sign-flip on per-item shares" in v.reason
    assert v.agreement[0].unanswered.significant and "per-item shares" in v.agreement[0].reason


# -- against a real HTTP stub (tests/helpers/hostile_server.py) in attach mode --------------------------------


@pytest.fixture
def stub() -> Iterator[Callable[..., Hostile]]:
    with serving(Hostile, hostile_app) as start:
        yield start


def _attach(base: Hostile, cand: Hostile, out: Path, *flags: str) -> int:
    return main(
        ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check", "--baseline-url",
         base.url, "--candidate-url", cand.url, "--out", str(out), "--repeats", "3", "--temperature", "0.7",
         *flags]
    )  # fmt: skip


def test_each_item_repeat_is_sent_with_one_seed_to_both_servers(
    stub: Callable[..., Hostile],
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What the servers were sent, from their request logs: per prompt, repeat r carries the same
    seed on both arms, the three repeats three different seeds, and both arms the same sampling."""
    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)
    base, cand = stub("good"), stub("good")
    code = _attach(
        base, cand, tmp_path / "run", "--suites", "gsm8k", "--limit", "4", "--data-dir", str(data_dir)
    )
    printed = capsys.readouterr().out
    assert code == 0 and "excess +0.0 / 3.0 pt" in printed  # the terminal's agreement table
    sent: dict[str, dict[str, list[Any]]] = {}
    for arm, h in (("baseline", base), ("candidate", cand)):
        for body in h.sent("/v1/completions"):
            if "grammar" not in body and body.get("temperature") == 0.7:
                sent.setdefault(arm, {}).setdefault(body["prompt"], []).append(body["seed"])
    assert len(sent["baseline"]) == 4 and sent["baseline"].keys() == sent["candidate"].keys()
    for prompt, seeds in sent["baseline"].items():
        assert len(set(seeds)) == 3 and sorted(seeds) == sorted(sent["candidate"][prompt])
    recs = RecordStore(tmp_path / "run").load("gsm8k", "candidate")
    assert sorted(r.repeat for r in recs.values()) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    v = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert v["agreement"][0]["sampled"]["k"] == 3 and v["answers"][0]["identical"] == 1.0


def test_a_candidate_cut_at_the_cap_blocks_under_repeats_though_its_answers_are_right(
    stub: Callable[..., Hostile], data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both servers give each GSM8K question its right answer; the candidate's come back with
    finish_reason "length" (cut at the cap). Accuracy and agreement see nothing; the unanswered
    test on per-item shares blocks."""
    from evalgate.suites import SuiteOptions, default_registry

    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)
    right = {}
    for it in default_registry().get("gsm8k").load(SuiteOptions(data_dir=data_dir), 12):
        question = it.payload[3][0][0]
        answer = str(it.target).split("####")[-1].strip().replace(",", "")
        right[question[-80:]] = f" The answer is {answer}.\n#### {answer}"
    base, cand = stub("good", answer_for=right), stub("truncated", answer_for=right)
    code = _attach(
        base, cand, tmp_path / "run", "--suites", "gsm8k", "--limit", "12", "--data-dir", str(data_dir)
    )
    v = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert code == 1, v["reason"]
    row, acc = v["agreement"][0], v["suites"][0]
    assert acc["baseline"] == acc["candidate"] == 1.0 and acc["status"] != "block"
    assert row["sampled"]["excess"] == 0.0 and row["unanswered"]["test"] == "sign-flip"
    assert row["unanswered"]["candidate_rate"] == 1.0 and row["status"] == "block"
    answers = v["answers"][0]
    assert answers["candidate"]["truncated"] == 1.0 and answers["baseline"]["truncated"] == 0.0
    assert answers["candidate"]["pass1"] == answers["candidate"]["passk"] == 1.0


def test_a_graded_mde_from_too_few_differing_items_is_not_estimable() -> None:
    """Per-item means of a suite both arms almost always fail: 3 of 200 items differ. The spread
    of the differences is tiny, so the normal-approximation MDE would claim a 0.6 pt resolution;
    the row says it cannot tell instead (and is UNDERPOWERED), and says a number again once
    enough items differ."""
    from evalgate.report._view import _row

    zeros = np.zeros((200, 4))
    few = zeros.copy()
    few[:3, 0] = 1.0  # three items right once in four, on the candidate only
    v = _decide(_pairs(zeros, few))
    row = v.suites[0]
    assert (
        row.mde == 1.0 and row.status == "underpowered" and "MDE not estimable: only 3 of 200" in row.reason
    )
    assert _row(row, "", None).mde == "not estimable"
    assert "MDE not estimable" in v.reason and "100.0 pt" not in v.reason
    many = zeros.copy()
    many[:40, 0] = 1.0
    many[40:80, 0], zeros[40:80, 0] = 0.0, 1.0  # 80 items differ, half each way
    row = _decide(_pairs(zeros, many)).suites[0]
    assert "not estimable" not in row.reason and 0 < row.mde < 0.2
    assert _row(row, "", None).mde == f"{row.mde * 100:.1f} pt"


def test_answer_rates_per_arm_on_known_records() -> None:
    """Two items x 2 repeats. Baseline: right 3 of 4, one empty answer, reasoning 10/20/30/40
    tokens. Candidate: right 1 of 4, one cut at the cap and one without an extractable answer,
    no reasoning recorded. The table leaves out reasoning only when no arm has it."""
    from evalgate.gate import suite_answers
    from evalgate.report.answers import answers_table

    def rec(arm: str, item: str, r: int, right: float, reasoning: int | None, **extra: object) -> Record:
        tokens = {"completion": 5} | ({"reasoning": reasoning} if reasoning is not None else {})
        return Record(run_id="x", arm=arm, variant=arm, suite="s", suite_version=1, item_id=item, repeat=r,
                      prompt_hash="h", target="7", response=f"{arm}{item}{r}", extracted=str(right),
                      metrics={"em": right}, tokens=tokens, extra={"empty": False, "finish_reason": "stop"} | extra)  # fmt: skip

    base = [rec("baseline", "a", 0, 1.0, 10), rec("baseline", "a", 1, 1.0, 20),
            rec("baseline", "b", 0, 1.0, 30), rec("baseline", "b", 1, 0.0, 40, empty=True)]  # fmt: skip
    cand = [rec("candidate", "a", 0, 1.0, None), rec("candidate", "a", 1, 0.0, None, finish_reason="length"),
            rec("candidate", "b", 0, 0.0, None, no_answer=True), rec("candidate", "b", 1, 0.0, None)]  # fmt: skip
    pairs = [Pair(b.item_id, b.repeat, b, c) for b, c in zip(base, cand, strict=True)]
    s = suite_answers("s", "em", pairs, 2)
    assert s is not None and (s.k, s.items, s.identical) == (2, 2, 0.0)
    assert (s.baseline.pass1, s.baseline.passk, s.baseline.no_answer, s.baseline.truncated) == (
        0.75,
        1.0,
        0.25,
        0.0,
    )
    assert (s.candidate.pass1, s.candidate.passk, s.candidate.no_answer, s.candidate.truncated) == (
        0.25,
        0.5,
        0.25,
        0.25,
    )
    assert (s.baseline.reasoning_mean, s.baseline.reasoning_median) == (25.0, 25.0)
    assert s.candidate.reasoning_mean is None
    assert (
        s.baseline.majority == 1.0 and s.candidate.majority == 0.5
    )  # ties (two answers once each) go to repeat 0
    from dataclasses import asdict

    headers, rows = answers_table([asdict(s)])
    assert "reasoning tokens (mean / median)" in headers and "majority@k" in headers
    assert rows[0][headers.index("reasoning tokens (mean / median)")] == "25 / 25"
    assert rows[1][headers.index("truncated")] == "25.0%" and rows[1][headers.index("pass@k")] == "0.500"
    greedy = suite_answers("s", "em", [p for p in pairs if p.repeat == 0], 1)
    assert greedy is not None
    headers, _ = answers_table([asdict(greedy)])
    assert "pass@k" not in headers and greedy.baseline.passk is None
