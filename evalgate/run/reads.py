"""The drift suite's second pass: each arm reads the other arm's greedy texts (docs/statistics.md,
"Past the first parting").

Two greedy generations are comparable position by position only up to where they part; after it
the arms condition on different text, and what stays comparable is how each text reads to the
other arm. An arm can read a text only once the other arm has written it, so this pass runs after
a group's suites, for every arm whose partners' records exist, and once more at the end of the run
on the arms launched again for what is left (the baseline, when the arms run one after the other:
one more launch, no more than one read per document). Each document's reads go into a new record
of the item, which supersedes the old one (the file stays append-only), so a resumed run reads only
what is still missing, and a read that failed is left missing: the gate names it (an ERROR row),
never a pass, and ``--resume`` reads it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.progress import Progress

from evalgate.arms import READS
from evalgate.engines import Scorer
from evalgate.engines.client import RequestFailed
from evalgate.errors import InvalidResponse
from evalgate.run.plan import RunPlan
from evalgate.store.drift_records import needed_texts, record_check
from evalgate.store.records import Record, RecordStore
from evalgate.suites import Suite

__all__ = ["TRIES", "pending", "run_reads", "waiting"]

TRIES = 3
"""Tries of one document's reads whose answer cannot be used, as an item gets (``ITEM_TRIES``)."""

Todo = list[tuple[Record, list[tuple[list[int], bool]]]]


def pending(plan: RunPlan, store: RecordStore, arm: str) -> dict[str, Todo]:
    """Per drift suite, the arm's records that still lack a read of some text, with those texts."""
    out: dict[str, Todo] = {}
    partners = [p for p in READS.get(arm, ()) if p in plan.specs]
    for suite in plan.suites:
        if suite.metric_kind != "drift":
            continue
        check = record_check(plan.manifest.suites[suite.name])
        own = store.load(suite.name, arm, check=check)
        theirs = [store.load(suite.name, p, check=check) for p in partners]
        todo = [
            (record, texts)
            for key, record in own.items()
            if (texts := needed_texts(record, [t[key] for t in theirs if key in t]))
        ]
        if todo:
            out[suite.name] = todo
    return out


def waiting(plan: RunPlan, store: RecordStore) -> list[str]:
    """The arms with texts still to read once every group has run: launched again for them."""
    return [arm for arm in plan.specs if pending(plan, store, arm)]


async def run_reads(
    plan: RunPlan, scorers: Mapping[str, Scorer], store: RecordStore, progress: Progress
) -> None:
    """Every read the arms in ``scorers`` can make now, one progress bar per arm and suite."""
    by_name = {s.name: s for s in plan.suites}
    for arm, scorer in scorers.items():
        for suite_name, todo in pending(plan, store, arm).items():
            variant = plan.manifest.variants[arm].name
            bar = progress.add_task(
                f"{arm:9} {variant:10} {suite_name} reads", total=len(todo), completed=0, state="", acc=""
            )
            failed = await _read_all(plan, by_name[suite_name], todo, scorer, store, progress, bar)
            if failed:
                progress.update(bar, state=f"{failed} not read (the gate names them; --resume reads them)")


async def _read_all(
    plan: RunPlan,
    suite: Suite,
    todo: Todo,
    scorer: Scorer,
    store: RecordStore,
    progress: Progress,
    bar: Any,
) -> int:
    items = {(it.item_id, it.repeat): it for it in plan.items[suite.name]}
    sem = asyncio.Semaphore(max(1, scorer.concurrency))
    failed = 0

    async def one(record: Record, texts: Sequence[tuple[list[int], bool]]) -> None:
        nonlocal failed
        async with sem:
            t0 = time.perf_counter()
            item = items.get((record.item_id, record.repeat))
            response = None if item is None else await _tried(suite, item, record, texts, scorer)
            if response is None:
                failed += 1
            else:
                latency = round(record.latency_s + time.perf_counter() - t0, 4)
                store.append(dataclasses.replace(record, response=response, latency_s=latency))
            progress.update(bar, advance=1)

    await asyncio.gather(*(one(record, texts) for record, texts in todo))
    return failed


async def _tried(
    suite: Suite, item: Any, record: Record, texts: Sequence[tuple[list[int], bool]], scorer: Scorer
) -> Any:
    """The record's response with its reads, or None when the server failed or answered what
    cannot be used on every try (the read stays missing)."""
    for attempt in range(TRIES):
        if attempt:
            await asyncio.sleep(0.1 * attempt)
        try:
            return await suite.read_texts(item, record.response, texts, scorer)
        except RequestFailed:
            return None
        except InvalidResponse:
            continue
    return None
