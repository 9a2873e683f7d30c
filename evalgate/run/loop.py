"""The compare loop: launch the arms, preflight, run items, record every item.

The one loop for every mode. The plan (``evalgate.run.plan``) is settled before any server starts;
a schedule (``evalgate.run.schedule``) says which arms are up together and which block of items
comes next: every missing item at once, or ``--sequential``'s chunks until each suite decides.
Each item's record is appended and flushed as soon as it is scored, so an interrupted run
resumes where it stopped and never loses a completed item.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import Progress

from evalgate.engines import Scorer
from evalgate.engines.api import LaunchSlot
from evalgate.engines.attach import preflight_all
from evalgate.engines.client import ROUTED_TO, RequestFailed
from evalgate.errors import ConfigError, EvalgateError, InfraError, InvalidResponse, PreflightError
from evalgate.redact import env_secrets, redact
from evalgate.run.order import ServiceOrder
from evalgate.run.plan import RunPlan, check_resumed_server, check_resumed_tokenizer
from evalgate.run.progress import LiveAccuracy, progress_bars
from evalgate.run.reads import run_reads, waiting
from evalgate.run.schedule import FullSchedule, Records, Schedule, SequentialSchedule, missing
from evalgate.store.drift_records import record_check
from evalgate.store.facts import Served
from evalgate.store.provenance import Provenance, expectation_errors
from evalgate.store.records import Record, RecordStore
from evalgate.suites import Item, ItemResult, Suite, SuiteOptions, SuitePreflight
from evalgate.throughput import finish_compare, measure_handle

__all__ = ["ITEM_TRIES", "run_arms"]

ITEM_TRIES = 3
"""Tries of an item whose answer cannot be scored (InvalidResponse) before it is recorded as an error."""


def run_arms(plan: RunPlan, console: Console) -> None:
    """Run every item the schedule asks for, arm group by arm group; raises EvalgateError on failure."""
    schedule: Schedule = SequentialSchedule(plan) if plan.request.sequential else FullSchedule(plan)
    try:
        _run(plan, schedule, console)
    except EvalgateError as exc:
        exc.fix = exc.fix.replace("RUN_DIR", str(plan.run_dir))
        private = [t for s in plan.suites if s.private for it in plan.items[s.name] for t in it.secrets]
        secrets = run_secrets(plan)
        exc.cause = redact(exc.cause, secrets=secrets, private=private)
        exc.detail = redact(exc.detail, secrets=secrets, private=private)
        exc.args = (exc.cause,)
        raise


def run_secrets(plan: RunPlan) -> list[str]:
    """What no stored or printed error may hold: both arms' API keys (attach mode's from the
    environment, launched servers' from their handles)."""
    return [*env_secrets(), *plan.secrets]


def _deadline_passed(plan: RunPlan) -> InfraError:
    return InfraError(
        f"the run reached its deadline of {plan.deadline_s:g} s ([client] deadline_s, --deadline); every "
        "item finished so far is recorded",
        fix="continue with: evalgate compare --resume RUN_DIR (a resume may pass a later --deadline)",
    )


async def _within(deadline: float | None, plan: RunPlan, work: Awaitable[None]) -> None:
    """``work``, cancelled with an InfraError (exit 3) when the run's deadline passes."""
    if deadline is None:
        await work
        return
    try:
        await asyncio.wait_for(work, timeout=max(0.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        if time.monotonic() < deadline:
            raise
        raise _deadline_passed(plan) from None


def _run(plan: RunPlan, schedule: Schedule, console: Console) -> None:
    store = RecordStore(plan.run_dir, run_id=plan.run_id)
    deadline = None if plan.deadline_s is None else time.monotonic() + plan.deadline_s
    for group in schedule.groups():
        _run_arms(plan, schedule, store, group, deadline, console)
    late = waiting(plan, store)  # texts left to read (the baseline, when the arms ran in turn)
    if late:
        _run_arms(plan, schedule, store, late, deadline, console, reads_only=True)
    if plan.request.with_throughput:
        finish_compare(plan.run_dir, plan.manifest)  # -> manifest.throughput and throughput.json
    plan.manifest.run_finished()
    plan.save()


def _run_arms(
    plan: RunPlan,
    schedule: Schedule,
    store: RecordStore,
    group: list[str],
    deadline: float | None,
    console: Console,
    *,
    reads_only: bool = False,
) -> None:
    """Launch one group of arms, run what it lacks (or, ``reads_only``, only its reads), stop it."""
    for arm in group:
        plan.manifest.arm_scheduled(arm)
    check = {s.name: record_check(plan.manifest.suites[s.name]) for s in plan.suites}
    recs = {arm: {s.name: store.load(s.name, arm, check=check[s.name]) for s in plan.suites} for arm in group}
    busy = group if reads_only else schedule.live(group, recs)
    sweep = [arm for arm in group if _needs_sweep(plan, arm) and not reads_only]
    live = [arm for arm in group if arm in busy or arm in sweep]
    if not live:
        return
    if deadline is not None and time.monotonic() >= deadline:
        raise _deadline_passed(plan)
    with contextlib.ExitStack() as stack:
        handles = launch_arms(plan, stack, live)
        asyncio.run(_within(deadline, plan, _run_group(plan, schedule, handles, recs, store, console)))
        for arm in live:
            plan.manifest.arm_stopped(arm)
            if arm in sweep:  # after the suites, on the same server: tok/s, TTFT, ITL, KV capacity
                _sweep(plan, arm, handles[arm], console)
        plan.save()


def launch_arms(plan: RunPlan, stack: contextlib.ExitStack, arms: Sequence[str]) -> dict[str, Any]:
    """Launch ``arms`` inside ``stack`` (all stop when it closes) and record each in the manifest."""
    handles = {}
    for arm in arms:
        handle = stack.enter_context(
            plan.engine.launch(plan.specs[arm], LaunchSlot(arm, plan.run_dir / "logs"))
        )
        handles[arm] = handle
        handle.retry = plan.retry  # the run's request timeout and tries, for the scorer's client
        if handle.api_key:
            plan.secrets.append(handle.api_key)
        check_resumed_server(plan, arm, dict(handle.info))  # --resume: what the records came from
        provenance = plan.engine.provenance(handle)  # what the server reports it runs, not its flags
        plan.manifest.arm_launched(
            arm,
            command=handle.command,
            server={**handle.info, "provenance": provenance},
            pid=handle.process.pid if handle.process else None,
        )
        if plan.request.expect.get(arm):
            plan.save()  # what the server reported, on disk before a refusal
            require_expected(arm, plan.request.expect[arm], provenance)
    plan.save()
    return handles


def require_expected(arm: str, expected: dict[str, str], provenance: Provenance) -> None:
    """--expect: what the user declared must run, against what the arm's server reports; exit 2
    before the arm's first item, the manifest already holding what it reported."""
    problems = expectation_errors(arm, expected, provenance)
    if problems:
        raise ConfigError(
            "; ".join(problems),
            fix="launch the arm with settings that run what --expect names (the report's "
            '"what ran" table shows what its server reported), or drop that --expect',
        )


def require_one_tokenizer(fingerprints: dict[str, str]) -> None:
    if len(set(fingerprints.values())) > 1:
        raise PreflightError(
            f"the arms tokenize differently ({fingerprints}), so their prompts are not the same",
            fix="a quantized checkpoint must keep the baseline's tokenizer; check the model files",
        )


def _needs_sweep(plan: RunPlan, arm: str) -> bool:
    done = (plan.manifest.throughput or {}).get("arms") or {}
    swept = {a for a, d in done.items() if d.get("levels")}
    return plan.request.with_throughput and arm in ("baseline", "candidate") and arm not in swept


def _sweep(plan: RunPlan, arm: str, handle: Any, console: Console) -> None:
    variant = plan.manifest.variants[arm].name
    try:
        sweep = measure_handle(handle, name=arm, variant=variant, capacity=plan.engine.capacity(handle))
    except EvalgateError as exc:  # the sweep is extra: it must not cost the verdict
        console.print(f"[yellow]throughput sweep of the {arm} failed:[/] {exc}")
        sweep = {"error": exc.render()}
    plan.manifest.arm_swept(arm, sweep)


async def _each(plan: RunPlan, arms: Sequence[str], job: Callable[[str], Awaitable[Any]]) -> None:
    """``job`` on every arm: at the same time when the engine gives each arm its own GPUs, else
    one busy server at a time (one device, or two CPU cores)."""
    if plan.engine.concurrent_arms:
        await asyncio.gather(*(job(arm) for arm in arms))
    else:
        for arm in arms:
            await job(arm)


async def _run_group(
    plan: RunPlan,
    schedule: Schedule,
    handles: dict[str, Any],
    recs: Records,
    store: RecordStore,
    console: Console,
) -> None:
    """Preflight the group's servers, then each suite's blocks on them, under one progress display."""
    async with contextlib.AsyncExitStack() as stack:
        scorers: dict[str, Scorer] = {}
        for arm, handle in handles.items():
            scorers[arm] = plan.engine.scorer(handle, seed=plan.request.seed)
            stack.push_async_callback(scorers[arm].aclose)

        async def check(arm: str) -> None:
            report = await preflight_all(scorers[arm], server=arm)  # every URL of an attached arm
            check_resumed_tokenizer(plan, arm, report.tokenizer_fingerprint)
            plan.manifest.arm_preflighted(
                arm, tokenizer_fingerprint=report.tokenizer_fingerprint, checks=report.checks
            )

        await _each(plan, list(scorers), check)
        prints = {arm: info.tokenizer_fingerprint for arm, info in plan.manifest.arms.items()}
        require_one_tokenizer({arm: fp for arm, fp in prints.items() if fp})  # this group's and earlier arms'
        plan.save()  # the tokenizers the records are made with, on disk before the first record
        order = ServiceOrder()  # this launch's order of service, per arm
        with progress_bars(console) as progress:
            for suite in plan.suites:
                await _run_blocks(plan, schedule, suite, scorers, recs, store, progress, order)
            await run_reads(plan, scorers, store, progress)  # the drift suite's second pass
        for arm, scorer in scorers.items():
            _gateway_facts(plan, arm, scorer)
            pressure = plan.engine.pressure(handles[arm])
            if pressure is not None:  # the pool as the arm's log saw it while it served
                plan.manifest.arm_pressure(arm, launch=order.launch, pressure=pressure)


def _gateway_facts(plan: RunPlan, arm: str, scorer: Scorer) -> None:
    """An arm behind smg: each worker's answer to the fixed probe, and answers per worker."""
    facts = scorer.gateway_facts()
    if facts is not None:
        probe, routed = facts
        plan.manifest.arm_routed(arm, probe=probe, routed=routed)


async def _run_blocks(
    plan: RunPlan,
    schedule: Schedule,
    suite: Suite,
    scorers: dict[str, Scorer],
    recs: Records,
    store: RecordStore,
    progress: Progress,
    order: ServiceOrder | None = None,
) -> None:
    """Each block of the suite on every arm that lacks some of its items; ``recs`` gains the new
    records (so no look re-reads the files) and each arm's time on the suite is recorded."""
    bars: dict[str, Any] = {}
    live: dict[str, LiveAccuracy] = {}
    spent: dict[str, float] = {}

    async def run(arm: str, block: list[Item]) -> None:
        done = recs[arm][suite.name]
        todo = missing(done, suite.name, plan.arm_items(arm, suite.name, block))
        variant = plan.manifest.variants[arm].name
        if arm not in bars:  # the arm's first items of this suite
            flushed = await scorers[arm].flush_cache()  # no suite starts with another's prefix cache
            if flushed is not None:  # "flushed", or why not: recorded with the arm's server facts
                plan.manifest.suite_flushed(arm, suite.name, flushed)
            if isinstance(suite, SuitePreflight):  # e.g. tool_calls: one call comes back parsed
                check = await suite.preflight(scorers[arm], plan.options, server=arm)
                if check is not None:
                    plan.manifest.suite_preflighted(arm, suite.name, check)
            mine = plan.arm_items(arm, suite.name)  # --aa both: the candidate's repeat runs a subset
            left = len(missing(done, suite.name, mine))
            live[arm] = LiveAccuracy(suite.metrics[0], done.values())  # resumed items count too
            bars[arm] = progress.add_task(
                f"{arm:9} {variant:10} {suite.name}",
                total=len(mine),
                completed=len(mine) - left,
                state="",
                acc=live[arm].text,
            )
        t0 = time.perf_counter()
        written = await run_suite(
            plan, suite, todo, scorers[arm], store, arm, variant, progress, bars[arm], live=live[arm],
            order=order,
        )  # fmt: skip
        spent[arm] = spent.get(arm, 0.0) + time.perf_counter() - t0
        done.update((r.key, r) for r in written)

    def show() -> None:
        for bar in bars.values():
            progress.update(bar, state=schedule.notes.get(suite.name, ""))

    for block in schedule.blocks(suite, recs):
        show()
        arms = [
            arm
            for arm in scorers
            if missing(recs[arm][suite.name], suite.name, plan.arm_items(arm, suite.name, block))
        ]
        await _each(plan, arms, functools.partial(run, block=block))
    show()
    for arm, seconds in spent.items():
        plan.manifest.suite_timed(arm, suite.name, seconds)


async def run_suite(
    plan: RunPlan,
    suite: Suite,
    items: list[Item],
    scorer: Scorer,
    store: RecordStore,
    arm: str,
    variant: str,
    progress: Progress,
    bar: Any,
    *,
    live: LiveAccuracy | None = None,
    order: ServiceOrder | None = None,
) -> list[Record]:
    """Run ``items`` on one arm, appending each record as it is scored; returns the records.
    ``live``: the arm's running accuracy on the suite, shown on its progress bar; ``order``: the
    launch's order of service, recorded on each record (``extra.served``; a new one if None)."""
    order = order if order is not None else ServiceOrder()
    sem = asyncio.Semaphore(max(1, scorer.concurrency))
    hide = suite.private and not plan.options.reveal_private
    written: list[Record] = []
    secrets = run_secrets(plan)

    async def one(item: Item) -> None:
        async with sem:
            t0 = time.perf_counter()
            routes: list[str] = []  # an arm behind smg: the workers that served this item
            ROUTED_TO.set(routes)  # this item's own task: no other item sees it
            with order.serve(arm) as served:
                res, error = await _answer(suite, item, scorer, plan.options)
            if error is not None:  # kept as an excerpt, without keys or private text
                error = redact(error, secrets=secrets, private=item.secrets, limit=400)
            record = Record(
                run_id=plan.run_id,
                arm=arm,
                variant=variant,
                suite=suite.name,
                suite_version=suite.version,
                item_id=item.item_id,
                repeat=item.repeat,
                prompt_hash=item.prompt_hash,
                target=None if hide else item.target,
                response=None if (hide or res is None) else res.response,
                extracted=None if (hide or res is None) else res.extracted,
                metrics=res.metrics if res else {},
                tokens=res.tokens if res else {},
                latency_s=round(time.perf_counter() - t0, 4),
                error=error,
                extra=item.extra.updated(
                    res.extra if res else None,
                    workers=sorted(set(routes)) or None,
                    served=Served.model_validate(served),
                ),
            )
            store.append(record)
            written.append(record)
            progress.update(bar, advance=1, acc=live.add(record) if live else "")

    tasks = [asyncio.ensure_future(one(it)) for it in items]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return written


async def _answer(
    suite: Suite, item: Item, scorer: Scorer, options: SuiteOptions
) -> tuple[ItemResult | None, str | None]:
    """The item's result, or why it has none: a request that failed after the client's retries, or
    an answer that could not be scored (InvalidResponse) on each of ITEM_TRIES tries. Never a
    score from an invalid answer."""
    error = ""
    for attempt in range(ITEM_TRIES):
        if attempt:
            await asyncio.sleep(0.1 * attempt)
        try:
            return await suite.run(item, scorer, options), None
        except RequestFailed as exc:
            return None, str(exc)
        except InvalidResponse as exc:
            error = f"{exc} (tried {ITEM_TRIES} times)"
    return None, error
