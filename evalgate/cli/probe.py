"""``evalgate probe cache``: does the server's shared prefix cache isolate tenants?

Launches one server (``--engine``, ``--variant``) or attaches to one (``--url``, its key in
``EVALGATE_API_KEY``), runs the cache-isolation probe (``evalgate.probe.cache``), writes
``probe.json`` and ``junit.xml`` to ``--out`` and prints one summary line. Exit codes: 0 PASS,
1 BLOCK, 2 usage or config error and NO_ISOLATION (the server takes no cache salt: a server per
tenant, or caching off), 3 infrastructure error, ERROR (the positive control failed: the probe
was blind) or UNDERPOWERED (too few probes to rule out a leak).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalgate.config import load_config
from evalgate.engines import Scorer, ServerHandle, get_engine
from evalgate.engines.attach import DIALECTS, AttachedHandle, fingerprint, normalize_url
from evalgate.errors import ConfigError
from evalgate.probe import ProbeSettings, junit_xml, run_cache_probe, summary_line
from evalgate.redact import redact_url
from evalgate.stats import DEFAULT_LEAK_SHARE

__all__ = ["add_parser", "run", "settings_from_args"]

API_KEY_ENV = "EVALGATE_API_KEY"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "probe",
        help="probe one server: does its shared prefix cache leak between tenants?",
        description="Probes of one running or launched server. `probe cache`: per probe, a victim's "
        "prefix under salt A, then SAME (salt A, the positive control), CROSS (salt B) and COLD (a fresh "
        "prefix) in random order; exact oracle on the cached tokens the server reports, paired timing "
        "test on latency. Writes probe.json.",
        epilog="exit codes: 0 PASS, 1 BLOCK, 2 usage/config error or NO_ISOLATION (no cache salt), "
        "3 infrastructure error, ERROR (the positive control failed) or UNDERPOWERED",
    )
    what = p.add_subparsers(dest="probe", metavar="PROBE")
    c = what.add_parser("cache", help="cache isolation between tenants (cache_salt)")
    c.add_argument("--engine", help="launch this engine's server (llamacpp, sglang, vllm)")
    c.add_argument("--variant", default="bf16", help="the variant to launch (default: bf16)")
    c.add_argument("--url", help="attach to this running server instead (its key in EVALGATE_API_KEY)")
    c.add_argument("--protocol", default="auto", help="the attached server's engine (default: auto)")
    c.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
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
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--out", type=Path, help="folder for probe.json and the server log (default: reports/probe-<time>)"
    )
    c.set_defaults(func=run)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def settings_from_args(args: argparse.Namespace) -> ProbeSettings:
    """The probe's settings, each checked (exit 2 with the fix)."""
    if args.probes < 2:
        raise ConfigError(
            f"--probes {args.probes} is too few", fix="pass --probes 2 or more (20 is the default)"
        )
    if not 0 < args.share < 1:
        raise ConfigError(
            f"--share {args.share} is not a share", fix="pass a number between 0 and 1, e.g. 0.2"
        )
    if not 0 < args.alpha < 0.5:
        raise ConfigError(
            f"--alpha {args.alpha} is out of range", fix="pass a level between 0 and 0.5, e.g. 0.05"
        )
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


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if bool(args.engine) == bool(args.url):
        raise ConfigError(
            "probe cache needs one server",
            fix="pass --engine NAME to launch one, or --url URL to attach to one",
        )
    out = args.out or Path("reports") / f"probe-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    with _server(args, out) as (handle, scorer):
        report = asyncio.run(_probe(scorer, settings))
    report["server"] = redact_url(handle.base_url) if args.url else f"{args.engine} {args.variant}"
    path = out / "probe.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "junit.xml").write_text(junit_xml(report), encoding="utf-8")
    print(summary_line(report))
    for reason in report["reasons"]:
        print(f"  {reason}")
    print(f"  {path}")
    return int(report["exit_code"])


async def _probe(scorer: Scorer, settings: ProbeSettings) -> dict[str, Any]:
    try:
        return await run_cache_probe(
            scorer, settings, progress=lambda line: print(line, file=sys.stderr, flush=True)
        )
    finally:
        await scorer.aclose()


@contextlib.contextmanager
def _server(args: argparse.Namespace, out: Path) -> Iterator[tuple[ServerHandle, Scorer]]:
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
    engine = get_engine(args.engine, cfg)
    spec = engine.launch_spec(cfg.variant(args.variant))
    with engine.launch(spec, name="probe", log_dir=out / "logs") as handle:
        yield handle, engine.scorer(handle, seed=args.seed)
