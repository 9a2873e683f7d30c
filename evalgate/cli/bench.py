"""``evalgate bench``: what the candidate buys, as output tok/s per concurrency and KV capacity.

Launches each arm in turn (as ``compare`` does: one server at a time), sweeps the concurrency
levels, and writes throughput.json. With ``--baseline-url`` and ``--candidate-url`` it attaches
to servers that are already running instead; those are the only non-loopback targets allowed.
Every flag maps onto one ``BenchSettings`` field or one launch choice. Exit 0 when both arms
were measured (a capacity limit is a result, not a failure), 2 on bad input, 3 if a server failed.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evalgate.config import load_config
from evalgate.engines.api import LaunchSlot
from evalgate.errors import ConfigError
from evalgate.request import CompareRequest
from evalgate.run.settle import settle
from evalgate.store.manifest import command_line, git_state, utc_now
from evalgate.throughput import (
    DEFAULT_LEVELS,
    BenchSettings,
    Target,
    check_target,
    measure_handle,
    run_sweep,
    throughput_doc,
    write_throughput,
)

__all__ = ["add_parser", "run", "settings_from_args"]

API_KEY_ENV = "EVALGATE_API_KEY"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "bench",
        help="load-sweep baseline and candidate: output tok/s, TTFT, ITL per concurrency, KV capacity",
        description="Run a bounded, closed-loop load sweep against each arm's server and report output "
        "tok/s, request/s, TTFT and ITL (p50, p99) per concurrency level, the candidate/baseline ratio, "
        "each arm's capacity limit, and its KV-cache capacity. Writes throughput.json.",
        epilog="exit codes: 0 measured, 2 usage/config error, 3 infrastructure error",
    )
    p.add_argument("--baseline", help="baseline variant (default: bf16; with URLs, only a label)")
    p.add_argument(
        "--candidate", help="candidate variant, e.g. fp8kv, int4 (default: fp8kv; with URLs, only a label)"
    )
    p.add_argument("--baseline-url", help="attach to this running baseline server instead of launching one")
    p.add_argument("--candidate-url", help="attach to this running candidate server instead of launching one")
    p.add_argument(
        "--levels",
        default=",".join(map(str, DEFAULT_LEVELS)),
        help="comma-separated concurrency levels, capped at the server's parallel slots "
        f"(default: {','.join(map(str, DEFAULT_LEVELS))})",
    )
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens per request (default: 128)")
    p.add_argument("--output-len", type=int, default=64, help="generated tokens per request (default: 64)")
    p.add_argument(
        "--requests-per-level", type=int, help="requests per level (default: 4 per stream, at least 8)"
    )
    p.add_argument("--max-requests-per-level", type=int, default=256, help="hard cap (default: 256)")
    p.add_argument(
        "--max-seconds-per-level", type=float, default=30.0, help="hard time cap per level (default: 30)"
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=20.0,
        help="seconds without a first token after which a request marks the capacity limit (default: 20)",
    )
    p.add_argument(
        "--generator",
        choices=["builtin", "sglang"],
        default="builtin",
        help="builtin load generator (any OpenAI-compatible server), or SGLang's `python -m "
        "sglang.bench_serving` against SGLang servers (needs the sglang extra)",
    )
    p.add_argument("--seed", type=int, default=0, help="prompt text seed (default: 0)")
    p.add_argument("--out", type=Path, help="output folder for throughput.json (default: reports/bench-<id>)")
    p.add_argument("--engine", help="llamacpp (default on CPU)")
    p.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
    p.add_argument(
        "--allow-diff",
        action="append",
        metavar="KEY",
        help="allow this launch setting to differ between arms",
    )
    p.set_defaults(func=run)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--levels {text!r} is not a list of integers", fix="e.g. --levels 1,4,8") from None
    if not levels:
        raise ConfigError("--levels is empty", fix="e.g. --levels 1,4,8")
    return levels


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    settings = BenchSettings(
        levels=_levels(args.levels),
        input_len=args.input_len,
        output_len=args.output_len,
        requests_per_level=args.requests_per_level,
        max_requests_per_level=args.max_requests_per_level,
        max_seconds_per_level=args.max_seconds_per_level,
        queue_timeout_s=args.queue_timeout,
        generator=args.generator,
        seed=args.seed,
    )
    settings.validate()
    return settings


def run(args: argparse.Namespace) -> int:
    console = Console(width=None if Console().is_terminal else 120)
    settings = settings_from_args(args)
    urls = {"baseline": args.baseline_url, "candidate": args.candidate_url}
    if bool(urls["baseline"]) != bool(urls["candidate"]):
        raise ConfigError(
            "give both --baseline-url and --candidate-url, or neither",
            fix="attach to two running servers, or let evalgate launch both arms",
        )
    attach = bool(urls["baseline"])
    variants = {  # attached servers are whatever they are: a variant name is only the user's label
        "baseline": args.baseline or (None if attach else "bf16"),
        "candidate": args.candidate or (None if attach else "fp8kv"),
    }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    pair = f"{variants['baseline'] or 'baseline'}-vs-{variants['candidate'] or 'candidate'}"
    out = args.out or Path("reports") / f"bench-{stamp}-{pair}".replace("+", "_")
    header: dict[str, Any] = {"created_utc": utc_now(), "command": command_line(), "git": git_state()}
    arms: dict[str, dict[str, Any]] = {}

    def save() -> None:  # after each arm, so a failed candidate keeps the baseline's numbers
        write_throughput(out, {**throughput_doc(arms, settings), **header})

    if attach:
        key = os.environ.get(API_KEY_ENV)
        targets = {arm: Target(arm, str(url), key, explicit=True) for arm, url in urls.items()}
        for t in targets.values():
            check_target(t)
        header["engine"] = "external"
        for arm, target in targets.items():
            console.print(
                f"[bold]{arm}[/] {target.base_url}: sweeping levels {','.join(map(str, settings.levels))}"
            )
            arms[arm] = {**run_sweep(target, settings), "variant": variants[arm]}
            save()
    else:
        _launch_and_measure(args, settings, out, variants, header, arms, save, console)
    header["finished_utc"] = utc_now()
    save()
    doc = throughput_doc(arms, settings)
    print_table(doc, console)
    console.print(f"wrote {out / 'throughput.json'}")
    return 0


def _launch_and_measure(
    args: argparse.Namespace,
    settings: BenchSettings,
    out: Path,
    variants: dict[str, Any],
    header: dict[str, Any],
    arms: dict[str, dict[str, Any]],
    save: Any,
    console: Console,
) -> None:
    request = CompareRequest(  # the launch half of a comparison: no suites, nothing to score
        baseline=variants["baseline"],
        candidate=variants["candidate"],
        engine=args.engine,
        allow_diff=tuple(args.allow_diff or ()),
        suites=(),
    )
    settled = settle(request, load_config(args.config), measures="speed")  # as compare settles it
    engine, specs = settled.engine, settled.specs
    if settled.host:  # e.g. the CPU engine's wait policy, from the load before launch
        header["host"] = settled.host
    header.update({"engine": engine.name, "engine_version": engine.version()})
    for arm, spec in specs.items():
        with engine.launch(spec, LaunchSlot(arm, out / "logs")) as handle:
            console.print(
                f"[bold]{arm}[/] {variants[arm]} on {engine.name}: sweeping levels "
                f"{','.join(map(str, settings.levels))}"
            )
            capacity = engine.capacity(handle)
            arms[arm] = measure_handle(handle, settings, name=arm, variant=variants[arm], capacity=capacity)
        save()


def print_table(doc: dict[str, Any], console: Console) -> None:
    """Both arms' output tok/s per level and the ratio, then the capacity line."""
    arms = doc.get("arms") or {}
    labels = {a: (arms.get(a) or {}).get("variant") for a in ("baseline", "candidate")}
    names = {a: f"{a} ({v})" if v else a for a, v in labels.items()}
    detail = {a: {r["concurrency"]: r for r in (arms.get(a) or {}).get("levels") or []} for a in names}
    table = Table(title="output tok/s by concurrency", title_justify="left")
    for col in ("conc", f"{names['baseline']} tok/s", f"{names['candidate']} tok/s", "ratio"):
        table.add_column(col, justify="right")
    table.add_column("TTFT p50/p99 ms (b | c)", justify="right")
    table.add_column("ITL p50/p99 ms (b | c)", justify="right")
    table.add_column("errors (b | c)", justify="right")
    for lv in doc.get("levels") or []:
        c = lv["concurrency"]
        b, k = detail["baseline"].get(c, {}), detail["candidate"].get(c, {})
        table.add_row(
            str(c),
            _cell(lv.get("baseline_tok_s"), lv.get("baseline_status")),
            _cell(lv.get("candidate_tok_s"), lv.get("candidate_status")),
            "—" if lv.get("ratio") is None else f"{lv['ratio']:.2f}x",
            f"{_lat(b, 'ttft')} | {_lat(k, 'ttft')}",
            f"{_lat(b, 'itl')} | {_lat(k, 'itl')}",
            f"{_errs(b)} | {_errs(k)}",
        )
    console.print(table)
    for arm in names:
        data = arms.get(arm) or {}
        if data.get("limit") is not None:
            console.print(
                f"{arm}: capacity limit at concurrency {data['limit']} ({data.get('limit_reason')})"
            )
    cap = doc.get("capacity") or {}
    b, k = cap.get("baseline") or {}, cap.get("candidate") or {}
    if b or k:
        ratio = "—" if cap.get("ratio") is None else f"{cap['ratio']:.2f}x"
        console.print(
            f"KV capacity: baseline {_kv(b)}; candidate {_kv(k)}; ratio {ratio} ({cap.get('basis')})"
        )


def _cell(value: Any, status: Any) -> str:
    if status in ("limit", "skipped"):
        return str(status).upper() if value is None else f"{value:.1f} {str(status).upper()}"
    return "—" if value is None else f"{value:.1f}"


def _lat(row: dict[str, Any], kind: str) -> str:
    p50, p99 = row.get(f"{kind}_p50_ms"), row.get(f"{kind}_p99_ms")
    return "—" if p50 is None else f"{p50:.0f}/{p99:.0f}"


def _errs(row: dict[str, Any]) -> str:
    return (
        "—"
        if not row or row.get("status") == "skipped"
        else str(sum(int(row.get(k) or 0) for k in ("errors", "rejected", "queued")))
    )


def _kv(c: dict[str, Any]) -> str:
    if not c:
        return "not reported"
    mib = f", {c['kv_mib']:.0f} MiB" if c.get("kv_mib") else ""
    types = f" [{c['kv_types']}]" if c.get("kv_types") else ""
    weights = f", weights {c['weights_mib']:.0f} MiB" if c.get("weights_mib") else ""
    return f"{c.get('kv_tokens'):,} tokens{mib}{types}{weights}"
