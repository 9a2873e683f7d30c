"""``evalgate probe cache|warm-cold``: probes of one server, launched or attached.

Launches one server (``--engine``, ``--variant``) or attaches to one (``--url``, its key in
``EVALGATE_API_KEY``), runs the probe, writes ``probe.json``, ``junit.xml``, ``summary.md`` and
``probe.html`` to ``--out`` and prints one summary line. ``cache``: does the shared prefix cache
isolate tenants (``evalgate.probe.cache``)? ``warm-cold``: are a suite's answers the same read
from the cache as recomputed (``evalgate.probe.warm_cold``)? Exit codes (both): 0 PASS, 1 BLOCK,
2 usage or config error and NO_ISOLATION (the server takes no cache salt, or can send no cold
request), 3 infrastructure error, ERROR (a control failed: the probe was blind) or UNDERPOWERED
(``cache``: too few probes to rule out a leak).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable, Coroutine, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalgate.config import EvalgateConfig, load_config
from evalgate.engines import Scorer, ServerHandle, get_engine
from evalgate.engines.api import NoCacheIsolation
from evalgate.engines.attach import DIALECTS, AttachedHandle, fingerprint, normalize_url
from evalgate.errors import ConfigError
from evalgate.probe import (
    DEFAULT_SUITES,
    ProbeSettings,
    WarmColdSettings,
    junit_xml,
    probe_html,
    run_cache_probe,
    run_warm_cold,
    summary_line,
    summary_md,
    warm_cold_report,
)
from evalgate.probe.warm_cold import no_isolation_report
from evalgate.redact import redact_url
from evalgate.stats import DEFAULT_FLIP_BUDGET, DEFAULT_LEAK_SHARE
from evalgate.store.files import make_folder, write_atomic
from evalgate.suites import SuiteOptions, default_registry

__all__ = ["add_parser", "run", "settings_from_args", "warm_cold_settings"]

API_KEY_ENV = "EVALGATE_API_KEY"
OUTPUTS = ("probe.json", "junit.xml", "summary.md", "probe.html")
"""The files a probe writes to --out (beside the server's log under logs/)."""
EXITS = (
    "exit codes: 0 PASS, 1 BLOCK, 2 usage/config error or NO_ISOLATION (no cache salt, no cold request), "
    "3 infrastructure error, ERROR (a control failed: the probe was blind) or UNDERPOWERED"
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "probe",
        help="probe one server's prefix cache: isolation between tenants, answers warm against cold",
        description="Probes of one running or launched server; each writes probe.json, junit.xml, "
        "summary.md and probe.html. `probe cache`: per probe, a victim's prefix under salt A, then SAME "
        "(salt A, the positive control), CROSS (salt B) and COLD (a fresh prefix) in random order; exact "
        "oracle on the cached tokens the server reports, paired timing test on latency. `probe warm-cold`: "
        "a suite's items answered cold and warm on the same server, flips against the flip budget.",
        epilog=EXITS,
    )
    what = p.add_subparsers(dest="probe", metavar="PROBE")
    c = what.add_parser(
        "cache",
        help="cache isolation between tenants (cache_salt)",
        epilog=EXITS,
        description="Does one tenant's cached prefix show in another tenant's requests (cached tokens, latency)?",
    )
    _server_flags(c)
    c.add_argument("--probes", type=int, default=20, help="probes (default: 20)")
    c.add_argument(
        "--share",
        type=float,
        default=DEFAULT_LEAK_SHARE,
        help=f"PASS needs CROSS's speed-up bound below this share of the cache gap (default: {DEFAULT_LEAK_SHARE})",
    )
    c.add_argument("--alpha", type=float, default=0.05, help="one-sided level of each test (default: 0.05)")
    c.add_argument(
        "--no-salt",
        dest="salted",
        action="store_false",
        help="send no salt: both tenants share the cache (the probe must BLOCK)",
    )
    c.add_argument("--prefix-tokens", type=int, help="prefix length (default: calibrated)")
    c.add_argument(
        "--page-tokens",
        type=int,
        default=16,
        help="SAME may read this many fewer cached tokens (default: 16)",
    )
    c.set_defaults(func=run)
    w = what.add_parser(
        "warm-cold",
        help="answers read from the prefix cache against recomputed, on one server",
        epilog=EXITS,
        description="A suite's items answered greedily cold (a salt each, or the cache off) and warm (one "
        "shared salt, the same prompts read from the cache) on one server; the flips are tested against "
        "the flip budget (0 with --deterministic).",
    )
    _server_flags(w)
    w.add_argument(
        "--suites",
        default=",".join(DEFAULT_SUITES),
        help=f"comma-separated (default: {','.join(DEFAULT_SUITES)})",
    )
    w.add_argument("--limit", type=int, default=10, help="items per suite (default: 10)")
    w.add_argument("--max-tokens", type=int, default=16, help="greedy tokens per answer (default: 16)")
    w.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_FLIP_BUDGET,
        help=f"flip budget: the share of answers allowed to differ (default: {DEFAULT_FLIP_BUDGET}; 0 with --deterministic)",
    )
    w.add_argument("--alpha", type=float, default=0.05, help="level of the flip test (default: 0.05)")
    w.add_argument(
        "--deterministic",
        action="store_true",
        help="launch the server deterministic (as compare --deterministic) and expect 0 flips",
    )
    w.add_argument("--data-dir", type=Path, help="benchmark data folder (default: the Hub)")
    w.set_defaults(func=run_warm_cold_cli)
    p.set_defaults(func=lambda args: _usage(p))


def _server_flags(c: argparse.ArgumentParser) -> None:
    c.add_argument("--engine", help="launch this engine's server (llamacpp, sglang, vllm)")
    c.add_argument("--variant", default="bf16", help="the variant to launch (default: bf16)")
    c.add_argument("--url", help="attach to this running server instead (its key in EVALGATE_API_KEY)")
    c.add_argument("--protocol", default="auto", help="the attached server's engine (default: auto)")
    c.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
    c.add_argument("--seed", type=int, default=0, help="random content and sampling seed (default: 0)")
    c.add_argument(
        "--out",
        type=Path,
        help="folder for probe.json, junit.xml, summary.md, probe.html and the server log "
        "(default: reports/probe-<time>)",
    )


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 0.5:
        raise ConfigError(f"--alpha {alpha} is out of range", fix="pass a level between 0 and 0.5, e.g. 0.05")


def settings_from_args(args: argparse.Namespace) -> ProbeSettings:
    """The cache probe's settings, each checked (exit 2 with the fix)."""
    if args.probes < 2:
        raise ConfigError(
            f"--probes {args.probes} is too few", fix="pass --probes 2 or more (20 is the default)"
        )
    if not 0 < args.share < 1:
        raise ConfigError(
            f"--share {args.share} is not a share", fix="pass a number between 0 and 1, e.g. 0.2"
        )
    _check_alpha(args.alpha)
    if args.prefix_tokens is not None and args.prefix_tokens < 16:
        raise ConfigError(
            f"--prefix-tokens {args.prefix_tokens} is too short", fix="pass 16 or more, or omit it"
        )
    if args.page_tokens < 0:
        raise ConfigError("--page-tokens is negative", fix="pass 0 or more (the server's page size)")
    return ProbeSettings(
        probes=args.probes,
        share=args.share,
        alpha=args.alpha,
        salted=args.salted,
        prefix_tokens=args.prefix_tokens,
        page_tokens=args.page_tokens,
        seed=args.seed,
    )


def warm_cold_settings(args: argparse.Namespace) -> WarmColdSettings:
    """The warm/cold probe's settings, each checked (exit 2 with the fix)."""
    suites = tuple(s.strip() for s in args.suites.split(",") if s.strip())
    if not suites:
        raise ConfigError("--suites is empty", fix=f"pass suite names, e.g. {','.join(DEFAULT_SUITES)}")
    if args.limit < 1:
        raise ConfigError(f"--limit {args.limit} is too few", fix="pass 1 or more items per suite")
    if args.max_tokens < 1:
        raise ConfigError(f"--max-tokens {args.max_tokens} is too few", fix="pass 1 or more")
    if not 0 <= args.budget < 1:
        raise ConfigError(f"--budget {args.budget} is not a share", fix="pass a share in [0, 1), e.g. 0.05")
    _check_alpha(args.alpha)
    budget = 0.0 if args.deterministic else args.budget
    return WarmColdSettings(
        suites, args.limit, args.max_tokens, budget, args.alpha, args.deterministic, args.seed
    )


def _one_server(args: argparse.Namespace) -> None:
    if bool(args.engine) == bool(args.url):
        raise ConfigError(
            f"probe {args.probe} needs one server",
            fix="pass --engine NAME to launch one, or --url URL to attach to one",
        )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    _one_server(args)

    async def probe(scorer: Scorer) -> dict[str, Any]:
        return await run_cache_probe(scorer, settings, progress=_say)

    return _run_probe(args, probe)


def run_warm_cold_cli(args: argparse.Namespace) -> int:
    settings = warm_cold_settings(args)
    _one_server(args)
    options = SuiteOptions(data_dir=args.data_dir, seed=args.seed)
    registry = default_registry()
    prompts: list[tuple[str, str]] = []
    for name in settings.suites:
        suite = registry.get(name)
        if suite.kind == "chat" or suite.private:
            raise ConfigError(
                f"probe warm-cold sends each prompt as a completion; {name} is a "
                f"{'private' if suite.private else 'chat'} suite",
                fix="probe a public completion suite, e.g. arc_easy or gsm8k",
            )
        for item in suite.load(options, settings.limit):
            text = item.display.get("prompt")
            if item.secrets or not isinstance(text, str) or not text:
                raise ConfigError(
                    f"suite {name} shows no prompt text for its items",
                    fix="probe a public lm-eval suite, e.g. arc_easy or gsm8k",
                )
            prompts.append((f"{name}/{item.item_id}", text))

    async def probe(scorer: Scorer) -> dict[str, Any]:
        ids = [await scorer.tokenize(text) for _, text in prompts]
        try:
            result = await run_warm_cold(
                scorer, ids, max_tokens=settings.max_tokens, budget=settings.budget, alpha=settings.alpha,
                progress=_say,
            )  # fmt: skip
        except NoCacheIsolation as exc:
            return no_isolation_report(exc, settings)
        return warm_cold_report(result, settings, [i for i, _ in prompts])

    return _run_probe(args, probe, deterministic=settings.deterministic)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_probe(
    args: argparse.Namespace,
    probe: Callable[[Scorer], Coroutine[Any, Any, dict[str, Any]]],
    *,
    deterministic: bool = False,
) -> int:
    """The server, the probe on it, and the files; the exit code is the verdict's."""
    out = args.out or Path("reports") / f"probe-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    make_folder(out)
    _refuse_planted(out)

    async def go(scorer: Scorer) -> dict[str, Any]:
        try:
            return await probe(scorer)
        finally:
            await scorer.aclose()

    with _server(args, out, deterministic=deterministic) as (handle, scorer):
        report = asyncio.run(go(scorer))
    report["server"] = redact_url(handle.base_url) if args.url else f"{args.engine} {args.variant}"
    path = out / "probe.json"
    write_atomic(path, json.dumps(report, indent=2) + "\n")  # never through a link (store/files.py)
    write_atomic(out / "junit.xml", junit_xml(report))
    write_atomic(out / "summary.md", summary_md(report))
    write_atomic(out / "probe.html", probe_html(report))
    print(summary_line(report))
    for reason in report["reasons"]:
        print(f"  {reason}")
    print(f"  {path}")
    return int(report["exit_code"])


def _refuse_planted(out: Path) -> None:
    """Refuse (exit 2), before any server starts, an --out where a probe's file, its logs/ folder
    or a log in it is something else (a symbolic link would have the probe write where it points)."""
    logs = out / "logs"
    wanted = [(out / n, "a regular file", stat.S_ISREG) for n in OUTPUTS] + [(logs, "a folder", stat.S_ISDIR)]
    if logs.is_dir() and not logs.is_symlink():
        wanted += [(p, "a regular file", stat.S_ISREG) for p in sorted(logs.iterdir())]
    for path, kind, test in wanted:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not test(mode):
            found = "a symbolic link" if stat.S_ISLNK(mode) else "something else"
            raise ConfigError(
                f"{path} is {found}, not {kind}: evalgate probe writes there and never through a link",
                fix=f"remove {path}, or pass another --out",
            )


def _deterministic(cfg: EvalgateConfig, engine: str) -> EvalgateConfig:
    """--deterministic in the launched engine's own section, as compare sets it."""
    section = getattr(cfg, engine, None)
    if section is None or "deterministic" not in type(section).model_fields:
        raise ConfigError(
            f"--deterministic has no setting for the engine {engine!r}",
            fix="drop --deterministic, or launch llamacpp, sglang or vllm",
        )
    return cfg.model_copy(update={engine: section.model_copy(update={"deterministic": True})})


@contextlib.contextmanager
def _server(
    args: argparse.Namespace, out: Path, *, deterministic: bool = False
) -> Iterator[tuple[ServerHandle, Scorer]]:
    """The launched or attached server and its scorer, one request at a time."""
    if args.url:
        key = os.environ.get(API_KEY_ENV) or None
        url = normalize_url(args.url)
        fp = fingerprint(url, api_key=key, protocol=args.protocol, key_env=API_KEY_ENV)
        handle = AttachedHandle(
            "probe",
            url,
            key or "",
            ["attach", url],
            out / "probe.log",
            info=fp,
            urls=[url],
            protocol=fp["protocol"],
        )
        yield (
            handle,
            DIALECTS[fp["protocol"]].scorer(handle, concurrency=1, seed=args.seed, deterministic=True),
        )
        return
    cfg = load_config(args.config)
    if deterministic:
        cfg = _deterministic(cfg, args.engine)
    engine = get_engine(args.engine, cfg)
    spec = engine.launch_spec(cfg.variant(args.variant))
    with engine.launch(spec, name="probe", log_dir=out / "logs") as handle:
        yield handle, engine.scorer(handle, seed=args.seed)
