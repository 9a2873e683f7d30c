"""--sequential: the chunked replay, the futility rule, and the gate's always-valid p-value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalgate.gate import GatePolicy, decide
from evalgate.stats import flip_evalue, flip_futile, sequential_evalue, sequential_futile
from evalgate.stats.sequential import SequentialRule, replay, replay_stream, rule_for, shuffled
from evalgate.store.records import Pair
from evalgate.suites import Item
from tests.gate.test_gate import _rec


def _stream(codes: list[int]) -> tuple[list[str], dict[str, Pair]]:
    """codes: 1 regression (1 -> 0), 0 improvement (0 -> 1), -1 both right."""
    order, pairs = [], {}
    for i, code in enumerate(codes):
        b, c = {1: (1, 0), 0: (0, 1), -1: (1, 1)}[code]
        order.append(f"q{i}")
        pairs[f"q{i}"] = Pair(f"q{i}", 0, _rec("baseline", i, b), _rec("candidate", i, c))
    return order, pairs


def test_replay_blocks_at_the_first_look_past_the_threshold() -> None:
    # 8 regressions in a row give E = 2^8 / 9 = 28.4 >= 20, but the look comes at a chunk's end
    order, pairs = _stream([1] * 8 + [-1] * 92)
    out = replay(order, pairs, metric="acc", rule=SequentialRule(10, 0.05))
    assert (out.decision, out.used, out.looks, out.regressions, out.improvements) == ("block", 10, 1, 8, 0)
    assert out.evalue == pytest.approx(256 / 9)
    assert out.pvalue == pytest.approx(9 / 256)
    assert out.saved == pytest.approx(0.9)


def test_replay_stops_as_futile_when_nothing_flips() -> None:
    order, pairs = _stream([-1] * 100)
    out = replay(order, pairs, metric="acc", rule=SequentialRule(10, 0.05))
    # exact bound: E(0 + 80, 0) is huge, so not exact-futile at 20 items; the projection is
    assert out.decision == "futile" and out.used == 20 and out.pvalue == 1.0


def test_replay_stops_where_a_pair_is_missing() -> None:
    order, pairs = _stream([1, -1] * 15)
    del pairs["q14"]
    out = replay(order, pairs, metric="acc", rule=SequentialRule(5, 0.05))
    assert (out.decision, out.used, out.looks) == ("running", 10, 2)


def test_replay_completes_and_keeps_the_running_maximum() -> None:
    codes = [1] * 6 + [0] * 6 + [-1] * 8
    order, pairs = _stream(codes)
    out = replay(order, pairs, metric="acc", rule=SequentialRule(6, 0.001))
    assert out.decision in ("complete", "futile")
    assert out.evalue_max == pytest.approx(sequential_evalue(6, 0))  # the peak after the first look
    assert out.evalue_max > out.evalue


def test_one_sided_replay_ignores_improvements() -> None:
    order, pairs = _stream([0] * 10 + [-1] * 90)
    assert replay(order, pairs, metric="acc", rule=SequentialRule(10, 0.05)).decision == "block"
    one = replay(order, pairs, metric="acc", rule=SequentialRule(10, 0.05, one_sided=True))
    assert one.decision != "block" and one.pvalue == 1.0


def test_futility_exact_and_projected() -> None:
    # exact: 3 items left cannot lift E(0, 0) = 1 to 20 (max 2^3 / 4 = 2)
    assert sequential_futile(0, 0, items_seen=7, items_total=10, min_fraction=0.9)
    # before min_fraction only the exact bound counts
    assert not sequential_futile(0, 0, items_seen=10, items_total=1000)
    # a strong trend continues; a balanced stream does not
    assert not sequential_futile(30, 5, items_seen=200, items_total=1000)
    assert sequential_futile(5, 5, items_seen=200, items_total=1000)
    with pytest.raises(ValueError):
        sequential_futile(5, 6, items_seen=10, items_total=5)


def test_gate_uses_the_always_valid_pvalue() -> None:
    order, pairs = _stream([1] * 8 + [-1] * 92)
    out = replay(order, pairs, metric="acc", rule=SequentialRule(10, 0.05))
    used = [pairs[i] for i in order[: out.used]]
    v = decide({"s": (["acc"], used)}, policy=GatePolicy(agreement_gate=False), sequential={"s": out})
    row = v.suites[0]
    assert row.p_value == pytest.approx(9 / 256) and row.sequential["decision"] == "block"
    assert v.verdict == "BLOCK" and "sequential: stopped after 10/100 items (block on accuracy)" in row.reason


def test_shuffled_order_is_seeded_and_complete() -> None:
    items = [Item(f"i{k}", "h", None, None) for k in range(30)]
    a = [it.item_id for it in shuffled(items, seed=7, suite="arc_easy")]
    assert a == [it.item_id for it in shuffled(items, seed=7, suite="arc_easy")]
    assert sorted(a) == sorted(it.item_id for it in items) and a != [it.item_id for it in items]
    assert a != [it.item_id for it in shuffled(items, seed=7, suite="mmlu")]


def test_chunked_sequential_false_block_rate_under_h0() -> None:
    """H0 with a 10 % flip rate, n = 300, looks every 25: blocks at most alpha of the time."""
    rng = np.random.default_rng(11)
    reps, n, alpha = 400, 300, 0.05
    blocks = 0
    for _ in range(reps):
        u = rng.random(n)
        codes = np.where(u < 0.05, 1, np.where(u < 0.10, 0, -1)).tolist()
        order, pairs = _stream(codes)
        blocks += replay(order, pairs, metric="acc", rule=SequentialRule(25, alpha)).decision == "block"
    rate = blocks / reps
    # Ville bounds the rate by alpha; 3 binomial standard errors of slack for the simulation
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)


def test_arms_run_together_only_on_separate_gpus() -> None:
    from types import SimpleNamespace

    from evalgate.run.schedule import arm_groups

    specs = {"baseline": 0, "candidate": 0, "aa": 0}
    req = SimpleNamespace(with_throughput=False)
    one_gpu = SimpleNamespace(specs=specs, request=req, engine=SimpleNamespace(concurrent_arms=False))
    assert arm_groups(one_gpu) == [["baseline"], ["candidate"], ["aa"]]
    two = SimpleNamespace(specs=specs, request=req, engine=SimpleNamespace(concurrent_arms=True))
    assert arm_groups(two) == [["baseline", "candidate"], ["aa"]]
    sweep = SimpleNamespace(specs=specs, request=SimpleNamespace(with_throughput=True), engine=two.engine)
    assert arm_groups(sweep) == [["baseline"], ["candidate"], ["aa"]]


def test_flip_evalue_against_numerical_integration() -> None:
    from scipy import integrate

    def lr(q: float, flips: int, n: int, b: float) -> float:
        return (q / b) ** flips * ((1 - q) / (1 - b)) ** (n - flips) / (1 - b)

    for flips, n, b in ((7, 50, 0.05), (0, 30, 0.1), (48, 300, 0.05), (3, 10, 0.2)):
        ref = integrate.quad(lr, b, 1, args=(flips, n, b))[0]
        assert flip_evalue(flips, n, budget=b) == pytest.approx(ref, rel=1e-6)
    assert flip_evalue(0, 0, budget=0.05) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        flip_evalue(5, 4, budget=0.05)


def test_flip_evalue_false_block_rate_at_the_budget() -> None:
    """True flip rate equal to the budget, looks every 25 of 400 items: blocks at most alpha."""
    rng = np.random.default_rng(5)
    reps, n, budget, alpha = 1000, 400, 0.05, 0.05
    flips = np.cumsum(rng.random((reps, n)) < budget, axis=1)
    blocked = 0
    for row in flips:
        blocked += any(
            flip_evalue(int(row[k - 1]), k, budget=budget) >= 1 / alpha for k in range(25, n + 1, 25)
        )
    assert blocked / reps <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)


def test_balanced_flip_storm_blocks_on_agreement() -> None:
    codes = [1, 0, -1, -1, -1] * 40  # 40 % flips that cancel: accuracy cannot block, agreement does
    out = replay_stream(codes, n_total=200, chunk=20, alpha=0.025, flip_budget=0.05)
    assert (out.decision, out.blocked_by, out.used) == ("block", "agreement", 20)
    assert out.flip_pvalue <= 0.025 and out.pvalue > 0.5
    # a clean candidate stops as futile on both tests
    clean = replay_stream([-1] * 200, n_total=200, chunk=20, alpha=0.025, flip_budget=0.05)
    assert clean.decision == "futile" and clean.used < 200
    assert flip_futile(0, items_seen=60, items_total=200, budget=0.05, alpha=0.025)


@pytest.mark.parametrize(
    "options", [{"alpha": 0.0}, {"alpha": 1.0}, {"confidence": 0.5}, {"confidence": 1.0}]
)
def test_both_futility_checks_reject_the_same_options(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="alpha must be in"):
        sequential_futile(0, 0, items_seen=60, items_total=200, **options)
    with pytest.raises(ValueError, match="alpha must be in"):
        flip_futile(0, items_seen=60, items_total=200, budget=0.05, **options)


def test_rule_splits_alpha_over_every_test() -> None:
    rule = rule_for(
        chunk=50, alpha=0.05, n_suites=2, policy="regression", agreement_gate=True, flip_budget=None
    )
    assert rule == SequentialRule(50, 0.0125, True, 0.05)
    off = rule_for(
        chunk=50, alpha=0.05, n_suites=2, policy="difference", agreement_gate=False, flip_budget=0.1
    )
    assert off == SequentialRule(50, 0.025, False, None)
