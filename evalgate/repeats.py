"""Sampled runs (``--repeats k``): what the gate tests, and what a reviewer reads per arm.

Reasoning models are evaluated sampled, k times per item, and scored as pass@1 averaged over the
k samples. Repeat r of an item carries the same seed on both arms (common random numbers), so the
pair shares the sampling noise as far as the engine allows. An item's k outcomes are not k
independent items: the gate tests the per-item mean, a number in [0, 1], with the paired
sign-flip test for a graded metric (``gate/_rows.py``); k = 1 stays McNemar.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from evalgate.records import Pair, Record

__all__ = ["RepeatSummary", "item_means", "repeat_summary"]


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
        (b1, c1), (bk, ck), (bm, cm) = self.pass1, self.passk, self.majority
        return (
            f"{suite} sampled {self.k}x per item ({self.items} items, same seed per repeat on both arms): "
            f"{metric} pass@1 (avg of {self.k}) {b1:.3f} -> {c1:.3f}, pass@{self.k} {bk:.3f} -> {ck:.3f}, "
            f"majority@{self.k} {bm:.3f} -> {cm:.3f}; "
            f"identical responses {self.identical:.0%} of item-repeats; tested on per-item means "
            "(sign-flip); the flip row is shown, not gated"
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
