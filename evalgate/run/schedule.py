"""What the compare loop (``evalgate.run.loop``) runs next: which arms are up together, and which
block of a suite's items comes next.

``FullSchedule`` runs every missing item of a suite in one block. Its arms run one after the
other (one engine at a time fits on one GPU and on two CPU cores), or baseline and candidate
together when the engine gives each arm its own GPUs. ``SequentialSchedule`` (``--sequential``)
keeps both arms up and runs a suite in chunks of its recorded shuffled order; before each chunk
it looks with the pure rule (``evalgate.stats.sequential.replay``) and stops the suite once the
rule decides. Neither runs anything itself: the loop runs each block on every arm that lacks
some of its items, and updates the records a schedule looks at.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from evalgate.engines.client import RequestFailed
from evalgate.gate import sequential_rule
from evalgate.run.plan import RunPlan
from evalgate.stats.sequential import SequentialOutcome, replay
from evalgate.store.records import Record, errors_as_wrong, pair_records
from evalgate.suites import Item, Suite

__all__ = ["FullSchedule", "Records", "Schedule", "SequentialSchedule", "arm_groups", "missing"]

Records = Mapping[str, Mapping[str, dict[Any, Record]]]
"""arm -> suite -> the latest record per item key, as ``RecordStore.load`` returns them."""
ARMS = ("baseline", "candidate")


def missing(done: Mapping[Any, Record], suite: str, items: Sequence[Item]) -> list[Item]:
    """``items`` with no record in ``done``, or whose record is an error (a resumed run retries it)."""
    return [
        it for it in items if (r := done.get((suite, it.item_id, it.repeat))) is None or r.error is not None
    ]


class Schedule(Protocol):
    notes: dict[str, str]
    """Per suite, a short state for the progress display (empty when there is nothing to say)."""

    def groups(self) -> list[list[str]]:
        """The arms, in groups that are up at the same time."""
        ...

    def live(self, group: Sequence[str], recs: Records) -> list[str]:
        """The arms of ``group`` that have items to run."""
        ...

    def blocks(self, suite: Suite, recs: Records) -> Iterator[list[Item]]:
        """The suite's blocks of items, in order; ``recs`` holds every record written so far."""
        ...


def arm_groups(plan: Any) -> list[list[str]]:
    """Arms that run at the same time. One after the other by default (one GPU, or two CPU
    cores); baseline and candidate together when the engine has a GPU set for each arm, and then
    their repeats (--aa both) together on the same GPUs, except with --with-throughput, whose
    sweep must not share the machine with the other arm."""
    arms = list(plan.specs)
    if plan.engine.concurrent_arms and not plan.request.with_throughput:
        pair = [a for a in arms if a in ARMS]
        repeats = [a for a in arms if a not in pair]
        return [pair] + ([repeats] if repeats else [])
    return [[a] for a in arms]


class FullSchedule:
    """Every item: each suite's missing items in one block."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.notes: dict[str, str] = {}

    def groups(self) -> list[list[str]]:
        return arm_groups(self.plan)

    def live(self, group: Sequence[str], recs: Records) -> list[str]:
        suites = self.plan.suites
        return [
            arm
            for arm in group
            if any(missing(recs[arm][s.name], s.name, self.plan.arm_items(arm, s.name)) for s in suites)
        ]

    def blocks(self, suite: Suite, recs: Records) -> Iterator[list[Item]]:
        yield self.plan.items[suite.name]


class SequentialSchedule:
    """``--sequential``: both arms up at once; each suite in chunks until the rule decides."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.rule = sequential_rule(plan.manifest)
        self.notes: dict[str, str] = {}

    def groups(self) -> list[list[str]]:
        return [list(ARMS)]

    def live(self, group: Sequence[str], recs: Records) -> list[str]:
        undecided = [s for s in self.plan.suites if self.look(s, recs).decision == "running"]
        return list(group) if undecided else []

    def blocks(self, suite: Suite, recs: Records) -> Iterator[list[Item]]:
        items = self.plan.items[suite.name]
        while (state := self.look(suite, recs)).decision == "running":
            block = items[state.used : state.used + self.rule.chunk]
            yield block
            self._require_scored(suite, block, recs)

    def look(self, suite: Suite, recs: Records) -> SequentialOutcome:
        """The rule on the pairs so far; a decision is recorded in the manifest."""
        arms = {arm: recs[arm][suite.name] for arm in ARMS}
        if self.plan.request.errors_as_wrong:  # a failed item scores 0, as in the verdict
            arms = {arm: errors_as_wrong(done, suite.metrics) for arm, done in arms.items()}
        paired = pair_records(arms["baseline"].values(), arms["candidate"].values(), suite=suite.name)
        pairs = {p.item_id: p for p in paired if p.repeat == 0}
        order = [it.item_id for it in self.plan.items[suite.name]]
        state = replay(order, pairs, metric=suite.metrics[0], rule=self.rule)
        self.notes[suite.name] = f"E = {state.evalue:.3g} ({state.decision})"
        if state.decision != "running":
            self.plan.manifest.sequential_decided(suite.name, state.to_dict())
        return state

    def _require_scored(self, suite: Suite, block: Sequence[Item], recs: Records) -> None:
        """A failed item leaves a gap no look can pass, so the run ends (--errors-as-wrong scores it 0)."""
        if self.plan.request.errors_as_wrong:
            return
        for arm in ARMS:
            done = recs[arm][suite.name]
            errors = [r for it in block if (r := done.get((suite.name, it.item_id, 0))) and r.error]
            if errors:
                raise RequestFailed(
                    f"{len(errors)} {suite.name} item(s) failed on the {arm} after retries; "
                    f"first: {errors[0].error}",
                    fix="fix the server and continue with --resume RUN_DIR (or pass --errors-as-wrong)",
                )
