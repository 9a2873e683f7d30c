"""--require-power (#44): a PASS with an UNDERPOWERED blocking row is INCONCLUSIVE, exit 4; the
default behaviour is unchanged."""

from __future__ import annotations

from evalgate.gate import GatePolicy, decide
from tests.gate.test_drift import drift_pairs
from tests.gate.test_gate import pairs

SMALL = {"arc_easy": (("acc",), pairs(40, 3, 3, 4))}  # n = 50: UNDERPOWERED
LARGE = {"arc_easy": (("acc",), pairs(9000, 10, 10, 980))}  # n = 10,000 with 0.2 % flips: powered


def test_an_underpowered_pass_is_inconclusive_with_exit_4() -> None:
    v = decide(SMALL, policy=GatePolicy(require_power=True))
    assert v.verdict == "INCONCLUSIVE" and v.exit_code == 4
    assert v.reason.startswith("1 blocking row(s) UNDERPOWERED (arc_easy acc) and --require-power")
    assert "The PASS it would have been: no significant difference" in v.reason


def test_the_default_is_unchanged() -> None:
    v = decide(SMALL, policy=GatePolicy())
    assert v.verdict == "PASS" and v.exit_code == 0 and "UNDERPOWERED" in v.reason


def test_a_powered_pass_and_a_block_are_left_alone() -> None:
    powered = decide(LARGE, policy=GatePolicy(require_power=True))
    assert powered.suites[0].status == "pass" and powered.verdict == "PASS"
    blocked = decide({"arc_easy": (("acc",), pairs(10, 30, 0, 10))}, policy=GatePolicy(require_power=True))
    assert blocked.verdict == "BLOCK" and blocked.exit_code == 1


def test_an_underpowered_drift_row_counts_and_an_advisory_row_does_not() -> None:
    drift = {"drift": (("loglik", "tokens"), drift_pairs(3, noise=0.0))}  # identical: no upper bound
    v = decide({**LARGE, **drift}, policy=GatePolicy(require_power=True), kinds={"drift": "drift"})
    assert v.verdict == "INCONCLUSIVE" and "drift mean KL" in v.reason
    advisory = GatePolicy(require_power=True, advisory=("drift",))
    v = decide({**LARGE, **drift}, policy=advisory, kinds={"drift": "drift"})
    assert v.verdict == "PASS"
