"""The BLOCK line names every blocking row, not the first (#44), and a row means what the policy
says: under --policy difference a perplexity ratio shown well below the baseline's blocks too."""

from __future__ import annotations

from evalgate.gate import GatePolicy, decide
from tests.gate.test_drift import _imported, drift_pairs
from tests.gate.test_gate import pairs


def test_the_block_line_names_every_blocking_row() -> None:
    """A real vLLM pair's final line named only the drift KL while gsm8k's unanswered share and
    arc_easy's flips blocked too, visible only in the tables: now each blocking row is named."""
    v = decide(
        {
            "gsm8k": (("acc",), pairs(150, 40, 2, 8)),  # accuracy: 40 lost, 2 gained
            "arc_easy": (("acc",), pairs(150, 25, 25, 0)),  # equal accuracy, 25 % of answers flipped
            "drift": (("loglik", "tokens"), drift_pairs(50, noise=1.0)),
        },
        policy=GatePolicy(),
        kinds={"drift": "drift"},
    )
    assert v.verdict == "BLOCK"
    assert v.reason.startswith("5 rows block: (1) gsm8k acc changed by -19.0 pt")
    assert "(2) drift mean KL" in v.reason and "(3) drift perplexity ratio" in v.reason
    assert (
        "(4) arc_easy: accuracy change not significant (delta +0.0 pt, p = 1) but 25.0% of answers flipped"
        in v.reason
    )
    assert "(5) gsm8k: 21.0% of answers flipped" in v.reason  # its accuracy row blocks: not "not significant"
    assert v.reason.count("the budget counts the server's own nondeterminism") == 1


def test_a_single_blocking_row_keeps_its_one_line() -> None:
    v = decide({"gsm8k": (("acc",), pairs(2000, 60, 10, 0))}, policy=GatePolicy())
    assert v.verdict == "BLOCK" and v.reason.startswith("gsm8k acc changed by -2.4 pt")
    assert "rows block" not in v.reason


def _ppl(v):  # type: ignore[no-untyped-def]
    return next(r for d in v.drift for r in d.rows if r.measure == "ppl_ratio" and r.gated)


def test_a_much_lower_perplexity_blocks_under_difference_as_a_change() -> None:
    """A 3x lower perplexity passed "within budget" under the default policy, whose rows are
    two-sided everywhere else: now it is a change, shown below 1 / (1 + margin)."""
    three_times_lower = _imported(60, worse=-1.0986)
    v = decide(
        {"wikitext": (("loglik", "words", "bytes"), three_times_lower)},
        policy=GatePolicy(),
        kinds={"wikitext": "drift"},
    )
    row = _ppl(v)
    assert row.estimate < 0.5 and row.budget_low is not None and row.upper < row.budget_low
    assert row.status == "block" and v.verdict == "BLOCK"
    assert "lower than the baseline's by more than the budget, a change, not a regression" in row.reason
    assert "two-sided" in row.test


def test_regression_keeps_the_perplexity_row_one_sided() -> None:
    better = _imported(60, worse=-1.0986)
    v = decide(
        {"wikitext": (("loglik", "words", "bytes"), better)},
        policy=GatePolicy(policy="regression"),
        kinds={"wikitext": "drift"},
    )
    row = _ppl(v)
    assert row.budget_low is None and row.status == "pass" and v.verdict == "PASS"


def test_difference_passes_a_perplexity_ratio_inside_both_edges() -> None:
    same = _imported(60, worse=0.001)
    v = decide(
        {"wikitext": (("loglik", "words", "bytes"), same)}, policy=GatePolicy(), kinds={"wikitext": "drift"}
    )
    row = _ppl(v)
    assert row.status == "pass" and "both sides under difference" in row.reason
