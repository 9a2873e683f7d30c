"""A token cap that cut more than a small share of either arm's answers is said next to the verdict
(#42): FP8 KV failures grow with output length and live past a short cap."""

from __future__ import annotations

from evalgate.gate import ArmAnswers, SuiteAnswers, Verdict
from evalgate.gate._verdict import TRUNCATION_NOTE, _cut_by_the_cap


def _verdict(base: float, cand: float) -> Verdict:
    v = Verdict("PASS", 0.05, "difference", "ok")
    arm = lambda cut: ArmAnswers(pass1=0.5, no_answer=0.0, truncated=cut)  # noqa: E731
    v.answers = [SuiteAnswers("gsm8k", "exact_match", 1, 50, 0.8, arm(base), arm(cand))]
    return v


def test_a_cap_that_cut_many_answers_is_said_with_the_fix() -> None:
    (note,) = _cut_by_the_cap(_verdict(0.08, 0.10), 256)
    assert note.startswith("gsm8k: the cap of 256 tokens cut 8% of the baseline's and 10% of the candidate's")
    assert "raise --max-gen-tokens" in note


def test_no_note_under_the_share_and_the_task_limit_named_without_a_cap() -> None:
    assert _cut_by_the_cap(_verdict(TRUNCATION_NOTE, 0.0), 256) == []
    (note,) = _cut_by_the_cap(_verdict(0.0, 0.2), None)
    assert "the task's own token limit" in note
