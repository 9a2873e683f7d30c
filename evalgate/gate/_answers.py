"""How each arm answered a generation suite: pass@1 (avg of k), pass@k, majority@k, and the
answers it did not give (verdict.json's ``answers``).

A quantized reasoning model can lose accuracy without getting a single answered item wrong: it
thinks longer, hits the token cap, or ends without an extractable answer. The gate tests those
rates (``agreement.unanswered_test``); this section shows them per arm beside the accuracy that
sgl-eval and NeMo Evaluator report (pass@1 averaged over k samples, majority@k), with the
reasoning length when the server separated it (``tokens["reasoning"]``) and how often the two
arms produced the very same text for the same (item, repeat), the measure of how far common seeds
couple the arms.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate.gate._agreement import no_answer as answered_nothing
from evalgate.gate._repeats import repeat_summary
from evalgate.store.records import Pair, Record

__all__ = ["ArmAnswers", "SuiteAnswers", "answers_for", "arm_answers", "suite_answers"]


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class ArmAnswers:
    """One arm's answers to one generation suite."""

    pass1: float
    """Mean over items of the primary metric's mean over the item's repeats (k = 1: accuracy)."""
    no_answer: float
    """Share of records without an answer: empty, or no extractable answer (``extra.no_answer``)."""
    truncated: float
    """Share of records cut at the token cap (``finish_reason`` "length")."""
    passk: float | None = None
    """k > 1: share of items right on at least one repeat."""
    majority: float | None = None
    """k > 1: the item's most frequent extracted answer (ties: the earliest repeat's) scored."""
    reasoning_mean: float | None = None
    """Mean reasoning tokens per record (``tokens.reasoning``), when any record has them."""
    reasoning_median: float | None = None


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class SuiteAnswers:
    """A generation suite's answers on both arms (verdict.json's ``answers``)."""

    suite: str
    metric: str
    """The primary metric pass@1, pass@k and majority@k are computed on."""
    k: int
    items: int
    identical: float
    """Share of (item, repeat) pairs whose responses are the same text on both arms."""
    baseline: ArmAnswers
    candidate: ArmAnswers


def _share(recs: Sequence[Record], hit: object) -> float:
    return sum(1 for r in recs if hit(r)) / len(recs) if recs else 0.0  # type: ignore[operator]


def arm_answers(
    recs: Sequence[Record], *, pass1: float, passk: float | None, majority: float | None
) -> ArmAnswers:
    """An arm's rates over its records; accuracy figures computed by the caller from the pairs."""
    reasoning = [int(r.tokens["reasoning"]) for r in recs if "reasoning" in r.tokens]
    return ArmAnswers(
        pass1=pass1,
        no_answer=_share(recs, answered_nothing),
        truncated=_share(recs, lambda r: r.extra.finish_reason == "length"),
        passk=passk,
        majority=majority,
        reasoning_mean=statistics.fmean(reasoning) if reasoning else None,
        reasoning_median=float(statistics.median(reasoning)) if reasoning else None,
    )


def suite_answers(suite: str, metric: str, pairs: Sequence[Pair], k: int) -> SuiteAnswers | None:
    """The section of one suite from its paired records (every repeat); None without pairs."""
    if not pairs:
        return None
    s = repeat_summary(pairs, metric, max(1, k))
    sampled = k > 1
    arms = {}
    for i, arm in enumerate(("baseline", "candidate")):
        arms[arm] = arm_answers(
            [getattr(p, arm) for p in pairs],
            pass1=s.pass1[i],
            passk=s.passk[i] if sampled else None,
            majority=s.majority[i] if sampled else None,
        )
    return SuiteAnswers(suite, metric, max(1, k), s.items, s.identical, arms["baseline"], arms["candidate"])


def answers_for(
    pairs: Mapping[str, Sequence[Pair]], metrics: Mapping[str, str], generation: Sequence[str], k: int
) -> list[SuiteAnswers]:
    """Every generation suite's section, in the run's suite order."""
    out = []
    for suite in generation:
        section = suite_answers(suite, metrics[suite], pairs.get(suite, ()), k)
        if section is not None:
            out.append(section)
    return out
