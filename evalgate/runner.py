"""The compare loop: launch each arm, preflight, run suites, record every item (the plan,
settled before any server starts, is ``evalgate.plan``).

Arms run one after the other (one engine at a time fits on one GPU and on two CPU cores), or
together when the engine gives each arm its own GPUs; each item's record is appended and
flushed as soon as it is scored, so an interrupted run resumes where it stopped and never
loses a completed item.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evalgate.client import RequestFailed
from evalgate.engines.external import preflight_all
from evalgate.errors import EvalgateError, PreflightError
from evalgate.manifest import (
    utc_now,
    write_manifest,
)
from evalgate.plan import SMOKE_CPU_GEN_CAP, CompareRequest, RunPlan, plan_compare
from evalgate.records import Record, RecordStore
from evalgate.suites import Item, Suite

__all__ = ["SMOKE_CPU_GEN_CAP", "CompareRequest", "RunPlan", "plan_compare", "run_arms"]


def run_arms(plan: RunPlan, console: Console) -> None:
    """Launch each arm in turn and run every missing item; raises EvalgateError on failure."""
    try:
        if plan.request.sequential:
            from evalgate.sequential import run_sequential

            run_sequential(plan, console)
        else:
            _run_arms(plan, console)
    except EvalgateError as exc:
        exc.fix = exc.fix.replace("RUN_DIR", str(plan.run_dir))
        raise


def _run_arms(plan: RunPlan, console: Console) -> None:
    store = RecordStore(plan.run_dir)
    fingerprints: dict[str, str] = {}
    for group in _arm_groups(plan):
        todo = {
            arm: {s.name: _missing(store, s, plan.items[s.name], arm) for s in plan.suites} for arm in group
        }
        bench = {arm: _needs_sweep(plan, arm) for arm in group}
        live = [arm for arm in group if any(todo[arm].values()) or bench[arm]]
        for arm in group:
            info = plan.manifest["arms"].setdefault(arm, {})
            if arm not in live and "tokenizer_fingerprint" in info:
                fingerprints[arm] = info["tokenizer_fingerprint"]
        if not live:
            continue
        with contextlib.ExitStack() as stack:
            handles = launch_arms(plan, stack, live)
            results = asyncio.run(_run_group(plan, handles, todo, store, console))
            for arm, timings in results.items():
                info = plan.manifest["arms"][arm]
                info.update(
                    {
                        "tokenizer_fingerprint": timings.pop("_fingerprint"),
                        "preflight": timings.pop("_preflight"),
                        "ended_utc": utc_now(),
                    }
                )
                info.setdefault("durations_s", {}).update(timings)
                if bench[arm]:  # after the suites, on the same server: tok/s, TTFT, ITL, KV capacity
                    _sweep(plan, arm, handles[arm], console)
                fingerprints[arm] = info["tokenizer_fingerprint"]
            write_manifest(plan.run_dir, plan.manifest)
    require_one_tokenizer(fingerprints)
    if plan.request.with_throughput:
        from evalgate.throughput import finish_compare

        finish_compare(plan.run_dir, plan.manifest)  # -> manifest["throughput"] and throughput.json
    plan.manifest["finished_utc"] = utc_now()
    write_manifest(plan.run_dir, plan.manifest)


def launch_arms(plan: RunPlan, stack: contextlib.ExitStack, arms: Sequence[str]) -> dict[str, Any]:
    """Launch ``arms`` inside ``stack`` (all stop when it closes) and record each in the manifest."""
    handles = {}
    for arm in arms:
        handle = stack.enter_context(
            plan.engine.launch(plan.specs[arm], name=arm, log_dir=plan.run_dir / "logs")
        )
        handles[arm] = handle
        plan.manifest["arms"].setdefault(arm, {}).update(
            {
                "command": handle.command,
                "started_utc": utc_now(),
                "server": handle.info,
                "pid": handle.process.pid if handle.process else None,
            }
        )
    write_manifest(plan.run_dir, plan.manifest)
    return handles


def require_one_tokenizer(fingerprints: dict[str, str]) -> None:
    if len(set(fingerprints.values())) > 1:
        raise PreflightError(
            f"the arms tokenize differently ({fingerprints}), so their prompts are not the same",
            fix="a quantized checkpoint must keep the baseline's tokenizer; check the model files",
        )


async def flush_cache(scorer: Any) -> None:
    """SGLang: no suite starts with another's radix cache (other engines have nothing to flush)."""
    flush = getattr(scorer, "flush_cache", None)
    if flush is not None:
        await flush()


def _arm_groups(plan: RunPlan) -> list[list[str]]:
    """Arms that run at the same time. One after the other by default (one GPU, or two CPU
    cores); baseline and candidate together when the engine has a GPU set for each arm, except
    with --with-throughput, whose sweep must not share the machine with the other arm."""
    arms = list(plan.specs)
    if getattr(plan.engine, "concurrent_arms", False) and not plan.request.with_throughput:
        pair = [a for a in arms if a in ("baseline", "candidate")]
        return [pair] + [[a] for a in arms if a not in pair]
    return [[a] for a in arms]


def _needs_sweep(plan: RunPlan, arm: str) -> bool:
    swept = {
        a for a, d in ((plan.manifest.get("throughput") or {}).get("arms") or {}).items() if d.get("levels")
    }
    return plan.request.with_throughput and arm in ("baseline", "candidate") and arm not in swept


def _sweep(plan: RunPlan, arm: str, handle: Any, console: Console) -> None:
    from evalgate.throughput import measure_handle

    info = plan.manifest["arms"][arm]
    variant = plan.manifest["variants"][arm]["name"]
    try:
        info["throughput"] = measure_handle(handle, name=arm, variant=variant)
    except EvalgateError as exc:  # the sweep is extra: it must not cost the verdict
        console.print(f"[yellow]throughput sweep of the {arm} failed:[/] {exc}")
        info["throughput"] = {"error": exc.render()}


def _missing(store: RecordStore, suite: Suite, items: Sequence[Item], arm: str) -> list[Item]:
    done = store.load(suite.name, arm)
    return [it for it in items if (r := done.get((suite.name, it.item_id, 0))) is None or r.error is not None]


async def _run_group(
    plan: RunPlan,
    handles: dict[str, Any],
    todo: dict[str, dict[str, list[Item]]],
    store: RecordStore,
    console: Console,
) -> dict[str, dict[str, Any]]:
    """Each arm's suites, the arms of a group at the same time, under one progress display."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        outs = await asyncio.gather(
            *(_run_arm(plan, arm, h, todo[arm], store, progress) for arm, h in handles.items())
        )
    return dict(zip(handles, outs, strict=True))


async def _run_arm(
    plan: RunPlan, arm: str, handle: Any, todo: dict[str, list[Item]], store: RecordStore, progress: Progress
) -> dict[str, Any]:
    scorer = plan.engine.scorer(handle, seed=plan.request.seed)
    try:
        report = await preflight_all(scorer, server=arm)  # every URL of an attached arm
        out: dict[str, Any] = {"_fingerprint": report.tokenizer_fingerprint, "_preflight": report.checks}
        variant = plan.manifest["variants"][arm]["name"]
        for suite in plan.suites:
            items = todo[suite.name]
            if not items:
                continue
            await flush_cache(scorer)
            bar = progress.add_task(f"{arm:9} {variant:10} {suite.name}", total=len(items))
            t0 = time.perf_counter()
            await run_suite(plan, suite, items, scorer, store, arm, variant, progress, bar)
            out[suite.name] = round(time.perf_counter() - t0, 2)
        return out
    finally:
        await scorer.aclose()


async def run_suite(
    plan: RunPlan,
    suite: Suite,
    items: list[Item],
    scorer: Any,
    store: RecordStore,
    arm: str,
    variant: str,
    progress: Progress,
    bar: Any,
) -> list[Record]:
    """Run ``items`` on one arm, appending each record as it is scored; returns the records."""
    sem = asyncio.Semaphore(max(1, getattr(scorer, "concurrency", 4)))
    hide = suite.private and not plan.options.reveal_private
    written: list[Record] = []

    async def one(item: Item) -> None:
        async with sem:
            t0 = time.perf_counter()
            try:
                res = await suite.run(item, scorer, plan.options)
                error = None
            except RequestFailed as exc:
                res, error = None, str(exc)
            record = Record(
                run_id=plan.run_id,
                arm=arm,
                variant=variant,
                suite=suite.name,
                suite_version=suite.version,
                item_id=item.item_id,
                repeat=0,
                prompt_hash=item.prompt_hash,
                target=None if hide else item.target,
                response=None if (hide or res is None) else res.response,
                extracted=None if (hide or res is None) else res.extracted,
                metrics=res.metrics if res else {},
                tokens=res.tokens if res else {},
                latency_s=round(time.perf_counter() - t0, 4),
                error=error,
                extra={**item.extra, **(res.extra if res else {})},
            )
            store.append(record)
            written.append(record)
            progress.advance(bar)

    tasks = [asyncio.ensure_future(one(it)) for it in items]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return written
