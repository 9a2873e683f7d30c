"""How much does one competing CPU-bound process slow the CPU engine, per thread setting?

CI runners and laptops are rarely quiet. ggml's worker threads spin at barriers (``--poll``,
default 50) and llama-server's default of one thread per core means a descheduled worker stalls
every other one, so the cost of a busy neighbour can be far larger than the CPU it takes.

For each thread setting this launches the real llama-server (SmolLM2-135M, BF16, through
evalgate's own launcher, so the flags are exactly what ``evalgate compare`` uses), runs the same
fixed workload of GSM8K generation items (5-shot, as the suite sends them) quietly and then again
next to one busy process (a bounded Python spin loop in its own process, stopped when the timing
ends), and prints the time of each and the slowdown ratio. Rounds alternate the order of the
settings so that a drift in the machine's speed falls on both.

    python benchmarks/cpu_contention.py --data-dir ../shared/data              # old vs new default
    python benchmarks/cpu_contention.py --data-dir ../shared/data --items 8 \\
        --setting "t2 poll50=threads=2,poll=50" --setting "t1=threads=1,poll=0"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.config import LlamaCppConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.client import RetryPolicy
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.suites import SuiteOptions, default_registry
from evalgate.variants import parse_variant

# OpenMP's own spin-then-sleep against "auto": passive when the load measured before launch says
# another process is busy (evalgate/engines/llamacpp/_host.py), OpenMP's default otherwise.
OLD = LlamaCppConfig(threads=2, poll=50, wait_policy="default")
NEW = LlamaCppConfig(threads=2, poll=50, wait_policy="auto")


def parse_setting(text: str) -> tuple[str, LlamaCppConfig]:
    """``label=key=value,key=value`` over the fields of ``[llamacpp]`` (LlamaCppConfig)."""
    label, _, body = text.partition("=")
    known = LlamaCppConfig.model_fields
    changes: dict[str, object] = {}
    for part in filter(None, body.split(",")):
        key, _, value = part.partition("=")
        if key not in known:
            raise SystemExit(f"unknown setting {key!r}; known: {', '.join(sorted(known))}")
        changes[key] = None if value == "none" else value  # pydantic converts, as for evalgate.toml
    return label, LlamaCppConfig(**changes)  # validated as evalgate.toml's [llamacpp] would be


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


@contextlib.contextmanager
def busy_neighbour(max_s: float) -> Iterator[None]:
    """One CPU-bound process for the length of the block (and never longer than ``max_s``)."""
    proc = multiprocessing.Process(target=_spin, args=(time.monotonic() + max_s,), daemon=True)
    proc.start()
    try:
        yield
    finally:
        proc.terminate()
        proc.join(5)


async def _workload(engine: LlamaCppEngine, handle, items, suite, options) -> None:  # type: ignore[no-untyped-def]
    scorer = engine.scorer(handle)
    sem = asyncio.Semaphore(scorer.concurrency)

    async def one(item) -> None:  # type: ignore[no-untyped-def]
        async with sem:
            await suite.run(item, scorer, options)

    try:
        await asyncio.gather(*(one(i) for i in items))
    finally:
        await scorer.aclose()


def time_setting(  # type: ignore[no-untyped-def]
    settings: LlamaCppConfig, items, suite, options, *, busy: bool, log_dir: Path, cap_s: float
) -> tuple[float, str]:
    """Seconds for the workload (``inf`` when it did not finish within ``cap_s``: a collapse) and the
    wait policy the arm launched with. The busy neighbour starts before the launch, as a CI job's
    neighbour would, so that ``auto`` sees it."""
    with busy_neighbour(cap_s + 300) if busy else contextlib.nullcontext():
        engine = LlamaCppEngine(settings)
        spec = engine.launch_spec(parse_variant("bf16"))
        policy = engine.wait_policy
        with engine.launch(spec, LaunchSlot("bench", log_dir)) as handle:
            handle.retry = RetryPolicy(timeout_s=engine.request_timeout_s())  # as evalgate compare
            # one warm-up item outside the timing: first-request allocations are not the workload
            asyncio.run(_workload(engine, handle, items[:1], suite, options))
            t0 = time.perf_counter()
            try:
                asyncio.run(asyncio.wait_for(_workload(engine, handle, items, suite, options), cap_s))
            except TimeoutError:
                return float("inf"), policy
            return time.perf_counter() - t0, policy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=None, help="local benchmark splits (../shared/data)")
    ap.add_argument("--items", type=int, default=20, help="GSM8K items in the workload (default 20)")
    ap.add_argument("--max-gen-tokens", type=int, default=256, help="generation cap (the smoke preset's)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat each measurement; medians are shown")
    ap.add_argument(
        "--cap-s",
        type=float,
        default=900.0,
        help="give up on one measurement after this long (shown as >cap)",
    )
    ap.add_argument("--quiet-only", action="store_true", help="time each setting on the quiet machine only")
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        help="label=key=value,... over [llamacpp] fields; default: the old and the new default",
    )
    args = ap.parse_args(argv)
    settings = [parse_setting(s) for s in args.setting] or [
        ("default (OpenMP spins)", OLD),
        ("wait_policy = auto", NEW),
    ]

    options = SuiteOptions(data_dir=args.data_dir, max_gen_tokens=args.max_gen_tokens)
    suite = default_registry().get("gsm8k")
    items = suite.load(options, args.items)
    print(f"workload: {len(items)} GSM8K items, max {args.max_gen_tokens} new tokens, {os.cpu_count()} CPUs")
    times: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = settings if r % 2 == 0 else settings[::-1]
            for label, s in order:
                for busy in (False,) if args.quiet_only else (False, True):
                    t, policy = time_setting(
                        s, items, suite, options, busy=busy, log_dir=Path(tmp), cap_s=args.cap_s
                    )
                    times.setdefault((label, busy), []).append(t)
                    state = "busy " if busy else "quiet"
                    print(
                        f"  round {r + 1}: {label:24s} {state} {_s(t, args.cap_s):>9s}  (wait policy {policy})",
                        flush=True,
                    )
    print()
    print(f"{'setting':26s} {'quiet s':>8s} {'busy s':>8s} {'slowdown':>9s} {'quiet vs first':>15s}")
    first_quiet = statistics.median(times[(settings[0][0], False)])
    for label, s in settings:
        quiet = statistics.median(times[(label, False)])
        busy = statistics.median(times.get((label, True), [float("nan")]))
        flags = " ".join(f"{k} {v}" if v is not None else k for k, v in _thread_flags(s))
        slowdown = f"{busy / quiet:8.2f}x" if busy != float("inf") else f">{args.cap_s / quiet:.1f}x".rjust(9)
        if busy != busy:  # nan: --quiet-only
            slowdown = "-".rjust(9)
        print(
            f"{label:26s} {quiet:8.1f} {_s(busy, args.cap_s):>8s} {slowdown} {quiet / first_quiet:14.2f}x   {flags}"
        )
    return 0


def _s(t: float, cap_s: float) -> str:
    if t != t:  # nan: not measured
        return "-"
    return f"{t:.1f} s" if t != float("inf") else f">{cap_s:.0f} s"


def _thread_flags(s: LlamaCppConfig) -> list[tuple[str, str | None]]:
    engine = LlamaCppEngine(s.model_copy(update={"wait_policy": "default"}) if s.wait_policy == "auto" else s)
    spec = engine.launch_spec(parse_variant("bf16"))
    flags = [
        (k, v) for k, v in spec.args if k in {"-t", "-tb", "--poll", "--threads-batch", "-np", "--no-repack"}
    ]
    return flags + [(f"{k}={v}", None) for k, v in spec.env] + [(f"wait_policy={s.wait_policy}", None)]


if __name__ == "__main__":
    raise SystemExit(main())
