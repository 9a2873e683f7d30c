"""Sampled runs (``--repeats k``): what the gate tests, and what a reviewer reads per arm.

Reasoning models are evaluated sampled, k times per item, and scored as pass@1 averaged over the
k samples. Repeat r of an item carries the same seed on both arms (common random numbers), so the
pair shares the sampling noise as far as the engine allows. An item's k outcomes are not k
independent items: the gate tests the per-item mean, a number in [0, 1], with the paired
sign-flip test for a graded metric (``gate/_rows.py``); k = 1 stays McNemar.

The agreement row of a sampled run cannot hold a fixed flip budget: two samples of one model
disagree by chance. ``sampled_agreement_row`` tests instead whether the arms disagree with each
other, repeat to repeat, more than each disagrees with itself (``stats.sampled_excess_test``).
Under the regression policy a regression found on one repeat is measured on the item's other
repeats (a split estimate): keeping the items where the baseline is ahead on the same draws that
measure them would count an A/A's favourable noise as regression (+6.25 pt at k = 2 on an item
right half the time, unshared draws).

A sampled run without repeats (k = 1) has no repeat-to-repeat disagreement to compare with: its
agreement row is the A/A arm's flips as the reference (``--aa``, ``agreement_row``'s paired excess
test), and ``run/settle.py`` refuses it before launch otherwise (the fixed flip budget would count
sampling disagreement as change).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from evalgate import stats
from evalgate.gate._agreement import AgreementRow, SampledAgreement, agreement_row
from evalgate.store.records import Pair, Record

__all__ = [
    "RESAMPLES",
    "RepeatSummary",
    "item_means",
    "outcome_matrix",
    "repeat_summary",
    "sampled_agreement_row",
]

RESAMPLES = 10_000
"""Arm swaps and bootstrap resamples of the sampled agreement test (as the graded rows use)."""


def _mean_record(recs: Sequence[Record], metrics: Sequence[str]) -> Record:
    means = {}
    for m in metrics:
        values = [r.metrics[m] for r in recs if m in r.metrics]
        if values:
            means[m] = sum(values) / len(values)
    first = min(recs, key=lambda r: r.repeat)
    return replace(first, repeat=0, metrics=means)


def _by_item(pairs: Sequence[Pair]) -> dict[str, list[Pair]]:
    """An item's paired repeats, items in first-seen order."""
    by_item: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by_item[p.item_id].append(p)
    return by_item


def item_means(pairs: Sequence[Pair], metrics: Sequence[str]) -> list[Pair]:
    """One pair per item: each arm's metrics averaged over the repeats both arms have."""
    out = []
    for item_id, group in _by_item(pairs).items():
        base = _mean_record([p.baseline for p in group], metrics)
        cand = _mean_record([p.candidate for p in group], metrics)
        out.append(Pair(item_id, 0, base, cand))
    return out


@dataclass(frozen=True)
class RepeatSummary:
    """Per arm pass@1 (mean of k), pass@k and majority@k, and how often the arms answered identically."""

    k: int
    items: int
    pass1: tuple[float, float]
    passk: tuple[float, float]
    majority: tuple[float, float]
    """majority@k: the item's most frequent extracted answer (ties: the earliest repeat's) scored."""
    identical: float
    """Share of (item, repeat) pairs whose responses are the same text on both arms."""

    def note(self, suite: str, metric: str) -> str:
        (b1, c1) = self.pass1
        return (
            f"{suite} sampled {self.k}x per item ({self.items} items, same seed per repeat on both arms, "
            f"identical responses {self.identical:.0%} of item-repeats): {metric} pass@1 (avg of {self.k}) "
            f"{b1:.3f} -> {c1:.3f}, tested on per-item means (sign-flip); the agreement row tests the arms' "
            f"disagreement beyond their own, repeat to repeat; pass@{self.k}, majority@{self.k} and answer "
            "rates per arm under Answers"
        )


def repeat_summary(pairs: Sequence[Pair], metric: str, k: int) -> RepeatSummary:
    by_item = _by_item(pairs)
    n = len(by_item) or 1

    def pass1(arm: str) -> float:
        return (
            sum(sum(getattr(p, arm).metrics.get(metric, 0.0) for p in g) / len(g) for g in by_item.values())
            / n
        )

    def passk(arm: str) -> float:
        return (
            sum(any(getattr(p, arm).metrics.get(metric, 0.0) >= 1 for p in g) for g in by_item.values()) / n
        )

    def majority(arm: str) -> float:
        won = 0.0
        for g in by_item.values():
            recs = sorted((getattr(p, arm) for p in g), key=lambda r: r.repeat)
            votes = Counter(json.dumps(r.extracted, sort_keys=True, default=str) for r in recs)
            top = max(votes.values())
            winner = next(
                r for r in recs if votes[json.dumps(r.extracted, sort_keys=True, default=str)] == top
            )
            won += winner.metrics.get(metric, 0.0)
        return won / n

    same = [p.baseline.response == p.candidate.response for p in pairs]
    return RepeatSummary(
        k=k,
        items=len(by_item),
        pass1=(pass1("baseline"), pass1("candidate")),
        passk=(passk("baseline"), passk("candidate")),
        majority=(majority("baseline"), majority("candidate")),
        identical=sum(same) / len(same) if same else 0.0,
    )


def outcome_matrix(pairs: Sequence[Pair], metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(items, k) arrays of each arm's 0/1 outcome, repeat r in column r, over the items that have
    the most repeats; None when that is fewer than 2 or an outcome is not 0 or 1 (a graded metric)."""
    groups = _by_item(pairs).values()
    k = max((len(g) for g in groups), default=0)
    full = [sorted(g, key=lambda p: p.repeat) for g in groups if len(g) == k]
    if k < 2:
        return None
    x = np.array([[p.baseline.metrics.get(metric, np.nan) for p in g] for g in full], dtype=float)
    y = np.array([[p.candidate.metrics.get(metric, np.nan) for p in g] for g in full], dtype=float)
    if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
        return None
    return x, y


def sampled_agreement_row(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    margin: float,
    budget_source: str,
    counts: str = "flips",
    errors_as_wrong: bool = False,
) -> AgreementRow:
    """The agreement row of a sampled suite from its per-repeat pairs: the descriptive measures
    and the unanswered test as for any run (per-item shares under repeats), and the sampled
    excess test against ``margin`` in place of the flip budget; ``sampled`` stays None (the row
    is then shown, not gated) when the metric is graded or there are fewer than 2 repeats."""
    row = agreement_row(
        suite, metric, pairs, budget=margin, budget_source=budget_source, counts=counts,
        errors_as_wrong=errors_as_wrong,
    )  # fmt: skip
    outcomes = outcome_matrix(pairs, metric)
    if outcomes is None:
        return row
    rng = np.random.default_rng(stats.stable_seed("sampled-agreement", suite, metric))
    res = stats.sampled_excess_test(
        *outcomes, margin=margin, n_resamples=RESAMPLES, regressions=counts == "regressions", rng=rng
    )
    row.p_value, row.test = res.pvalue, f"sampled excess over repeat-to-repeat ({res.method})"
    row.sampled = SampledAgreement(
        k=res.k, items=res.items, cross=res.cross, baseline_within=res.within_x,
        candidate_within=res.within_y, excess=res.estimate, margin=margin, p_exchange=res.p_exchange,
        p_margin=res.p_margin,
    )  # fmt: skip
    return row
