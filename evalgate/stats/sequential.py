"""The ``--sequential`` rule: after each chunk of items, look at two always-valid e-values, and
stop a suite as soon as it can.

Items run in a seeded shuffled order (``shuffled``, recorded as the manifest's ``item_ids``).
After each chunk has run on both arms, two e-values are updated: one on the discordant pairs in
that order (``sequential_evalue``: did accuracy change?) and, with the agreement gate, one on
the flip count (``flip_evalue``: do more answers flip than the budget?). Each test gets alpha
over the number of tests in the family (Bonferroni, so one suite's stop never depends on
another). A suite stops with BLOCK once either e-value reaches that bound, and as futile once
neither can (``sequential_futile``, ``flip_futile``). The compare loop (``evalgate.run.schedule``)
and a re-render from the files (``outcomes``) both call ``replay``, so a report or a resumed run
reaches exactly the decisions the live run did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from evalgate.errors import ConfigError
from evalgate.stats._agreement import DEFAULT_FLIP_BUDGET
from evalgate.stats._evalues import flip_evalue, flip_futile, sequential_evalue, sequential_futile
from evalgate.stats._seeds import stable_seed

__all__ = [
    "DEFAULT_CHUNK",
    "ScoredPair",
    "SequentialOutcome",
    "SequentialRule",
    "outcomes",
    "replay",
    "replay_stream",
    "rule_for",
    "shuffled",
    "summary_note",
]

DEFAULT_CHUNK = 50
T = TypeVar("T")


class _Scored(Protocol):
    @property
    def metrics(self) -> Mapping[str, float]: ...


class ScoredPair(Protocol):
    """One item on both arms, as ``replay`` reads it: each arm's metrics (``evalgate.store.records.Pair``
    is one; named by its shape so the statistics import nothing of the run folder)."""

    @property
    def baseline(self) -> _Scored: ...

    @property
    def candidate(self) -> _Scored: ...


@dataclass(frozen=True)
class SequentialOutcome:
    """Where one suite's sequential tests stand after the looks its records allow."""

    decision: str  # "block", "futile", "complete" (all items, no crossing) or "running"
    used: int  # items consumed when the decision was made
    planned: int
    looks: int
    evalue: float  # accuracy E at the decision
    evalue_max: float  # its running maximum over looks: 1 / evalue_max is an always-valid p
    regressions: int
    improvements: int
    flip_evalue_max: float = 1.0  # the flip-budget e-value's running maximum (agreement gate)
    blocked_by: str = ""  # "accuracy" or "agreement" when decision is "block"

    @property
    def pvalue(self) -> float:
        """Anytime-valid p-value: P(sup E >= 1/p) <= p under H0 (Ville)."""
        return min(1.0, 1.0 / self.evalue_max) if self.evalue_max > 0 else 1.0

    @property
    def flip_pvalue(self) -> float:
        return min(1.0, 1.0 / self.flip_evalue_max) if self.flip_evalue_max > 0 else 1.0

    @property
    def saved(self) -> float:
        return 1.0 - self.used / self.planned if self.planned else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "pvalue": self.pvalue, "saved": round(self.saved, 4)}
        return {**out, "flip_pvalue": self.flip_pvalue}


@dataclass(frozen=True)
class SequentialRule:
    """The settings every look of a run uses; built once from the run's request
    (``evalgate.gate.sequential_rule``), so the live loop and a re-render apply the same rule."""

    chunk: int
    alpha: float  # per test: the family's alpha over the number of tests
    one_sided: bool = False
    flip_budget: float | None = None  # None: no agreement gate
    """With the agreement gate, each suite has two tests in the family, so each gets alpha / 2K."""


def rule_for(*, chunk: int, alpha: float, n_suites: int, policy: str, agreement_gate: bool,
             flip_budget: float | None) -> SequentialRule:  # fmt: skip
    tests = max(1, n_suites) * (2 if agreement_gate else 1)
    budget = (flip_budget if flip_budget is not None else DEFAULT_FLIP_BUDGET) if agreement_gate else None
    return SequentialRule(int(chunk), alpha / tests, policy == "regression", budget)


def shuffled(items: Sequence[T], *, seed: int, suite: str) -> list[T]:
    """The suite's items in the seeded order the sequential test consumes them."""
    order = np.random.default_rng(stable_seed(seed, suite, "sequential")).permutation(len(items))
    return [items[i] for i in order]


def _binary(pair: ScoredPair, metric: str) -> tuple[int, int]:
    return (
        int(pair.baseline.metrics.get(metric, 0.0) >= 0.5),
        int(pair.candidate.metrics.get(metric, 0.0) >= 0.5),
    )


def replay(
    order: Sequence[str], pairs: Mapping[str, ScoredPair], *, metric: str, rule: SequentialRule
) -> SequentialOutcome:
    """Walk ``order`` in chunks, looking after each chunk whose items all have pairs.

    The walk stops at the first chunk with a missing pair ("running"): that is where a live
    or resumed run continues. See ``replay_stream`` for the rule itself.
    """
    n = len(order)
    ready = 0
    while ready < n and order[ready] in pairs:
        ready += 1
    codes = [_code(*_binary(pairs[i], metric)) for i in order[:ready]]
    return replay_stream(
        codes,
        n_total=n,
        chunk=rule.chunk,
        alpha=rule.alpha,
        one_sided=rule.one_sided,
        flip_budget=rule.flip_budget,
    )


def _code(baseline: int, candidate: int) -> int:
    return 1 if baseline > candidate else 0 if candidate > baseline else -1


def replay_stream(
    codes: Sequence[int],
    *,
    n_total: int,
    chunk: int,
    alpha: float,
    one_sided: bool = False,
    flip_budget: float | None = None,
) -> SequentialOutcome:
    """The sequential rule on per-item codes (1 regression, 0 improvement, -1 same) seen so far.

    ``alpha`` is each test's share of the family-wise rate. ``one_sided`` (the regression
    policy) counts the accuracy e-value only while regressions outnumber improvements, and the
    flip e-value only on regressions. With ``flip_budget`` the agreement gate runs as its own
    e-value on the flip count. A look happens
    after every full chunk (and after the last, shorter one). A suite stops with BLOCK when
    either e-value reaches 1/alpha, and as futile when neither can any more.
    """
    if chunk < 1:
        raise ConfigError(f"--chunk must be at least 1, got {chunk}", fix="the default is 50")
    r = s = looks = 0
    e = e_max = f_max = 1.0
    threshold = 1.0 / alpha

    def outcome(decision: str, used: int, by: str = "") -> SequentialOutcome:
        return SequentialOutcome(decision, used, n_total, looks, e, e_max, r, s, f_max, by)

    for start in range(0, n_total, chunk):
        end = min(start + chunk, n_total)
        if end > len(codes):
            return outcome("running", start)
        for code in codes[start:end]:
            r += code == 1
            s += code == 0
        looks += 1
        e = sequential_evalue(r, s)
        if not one_sided or r > s:
            e_max = max(e_max, e)
        if flip_budget is not None:  # the regression policy counts only regressions, as the fixed-n gate does
            f_max = max(f_max, flip_evalue(r if one_sided else r + s, end, budget=flip_budget))
        if e_max >= threshold or f_max >= threshold:
            return outcome("block", end, "accuracy" if e_max >= threshold else "agreement")
        if end < n_total and sequential_futile(r, s, items_seen=end, items_total=n_total, alpha=alpha):
            if flip_budget is None or flip_futile(
                r + s, items_seen=end, items_total=n_total, budget=flip_budget, alpha=alpha
            ):
                return outcome("futile", end)
    return outcome("complete", n_total)


def outcomes(run: Any, rule: SequentialRule) -> dict[str, SequentialOutcome]:
    """Each suite's outcome, from a RunData's manifest and records alone (``rule``:
    ``evalgate.gate.sequential_rule``, from the same manifest)."""
    out = {}
    for suite, meta in run.manifest.suites.items():
        if meta.metric_kind != "binary":
            raise ConfigError(
                f"--sequential needs a metric that is 0 or 1 per item; {suite}'s is graded",
                fix="run this suite without --sequential",
            )
        by_id = {p.item_id: p for p in run.pairs[suite] if p.repeat == 0}
        out[suite] = replay(meta.item_ids, by_id, metric=meta.metrics[0], rule=rule)
    return out


def summary_note(outs: Mapping[str, SequentialOutcome]) -> str:
    """One line for the verdict notes: what each suite used and why it stopped."""
    used = sum(o.used for o in outs.values())
    planned = sum(o.planned for o in outs.values()) or 1
    parts = [
        f"{s} {o.used}/{o.planned} ({o.decision}{' on ' + o.blocked_by if o.blocked_by else ''}, "
        f"E = {o.evalue_max:.3g}, flip E = {o.flip_evalue_max:.3g})"
        for s, o in outs.items()
    ]
    return f"sequential: {', '.join(parts)}; used {used / planned:.0%} of the items, saved {1 - used / planned:.0%}"
