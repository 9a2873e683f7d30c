"""``evalgate probe cache|warm-cold``: probes of one server, launched or attached.

The flags are the fields of ``evalgate.probe.ProbeServer`` (the server and --out) and of the
probe's settings, ``ProbeSettings`` or ``WarmColdSettings`` (``evalgate.store.probe_report``,
recorded in probe.json), built by ``evalgate.cli._flags`` as ``compare``'s are; ``--config`` and
``--data-dir`` only steer this command. ``evalgate.probe.run_probe`` settles the server, runs the
probe and writes probe.json, junit.xml, summary.md and probe.html to --out. Exit codes (both): 0
PASS, 1 BLOCK, 2 usage or config error and NO_ISOLATION (the server takes no cache salt, or can
send no cold request), 3 infrastructure error, ERROR (a control failed: the probe was blind) or
UNDERPOWERED (``cache``: too few probes to rule out a leak).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from evalgate.cli._flags import add_model_flags, flag_name, typed_values
from evalgate.errors import ConfigError
from evalgate.probe import (
    CacheProbe,
    ProbeServer,
    ProbeSettings,
    WarmColdProbe,
    WarmColdSettings,
    run_probe,
    suite_prompts,
)

__all__ = ["add_parser", "run", "run_warm_cold_cli"]

EXITS = (
    "exit codes: 0 PASS, 1 BLOCK, 2 usage/config error or NO_ISOLATION (no cache salt, no cold request), "
    "3 infrastructure error, ERROR (a control failed: the probe was blind) or UNDERPOWERED"
)
INTERNAL = ("suffix_tokens", "max_tokens")
"""ProbeSettings fields recorded in probe.json that no flag sets."""
M = TypeVar("M", bound=BaseModel)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "probe",
        help="probe one server's prefix cache: isolation between tenants, answers warm against cold",
        description="Probes of one running or launched server; each writes probe.json, junit.xml, "
        "summary.md and probe.html. `probe cache`: per probe, a victim's prefix under salt A, then SAME "
        "(salt A, the positive control), CROSS (salt B) and COLD (a fresh prefix) in random order; exact "
        "oracle on the cached tokens the server reports, paired timing test on latency against a margin. "
        "`probe warm-cold`: a suite's items answered cold and warm on the same server, flips against the "
        "flip budget.",
        epilog=EXITS,
    )
    what = p.add_subparsers(dest="probe", metavar="PROBE")
    c = what.add_parser(
        "cache",
        help="cache isolation between tenants (cache_salt)",
        epilog=EXITS,
        description="Does one tenant's cached prefix show in another tenant's requests (cached tokens, latency)?",
    )
    _common(c)
    add_model_flags(c, ProbeSettings, skip=INTERNAL)
    c.set_defaults(func=run)
    w = what.add_parser(
        "warm-cold",
        help="answers read from the prefix cache against recomputed, on one server",
        epilog=EXITS,
        description="A suite's items answered greedily cold (a salt each, or the cache off) and warm (one "
        "shared salt, the same prompts read from the cache) on one server; the flips are tested against "
        "the flip budget (0 with --deterministic).",
    )
    _common(w)
    add_model_flags(w, WarmColdSettings)
    w.add_argument("--data-dir", type=Path, help="benchmark data folder (default: the Hub)")
    w.set_defaults(func=run_warm_cold_cli)
    p.set_defaults(func=lambda args: _usage(p))


def _common(p: argparse.ArgumentParser) -> None:
    add_model_flags(p, ProbeServer)
    p.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _model(model: type[M], args: argparse.Namespace) -> M:
    """The flags the user typed as ``model``; a value it refuses is exit 2 naming the flag."""
    try:
        return model(**typed_values(args, model))
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        flag = flag_name(name, model.model_fields[name]) if name in model.model_fields else name
        raise ConfigError(f"{flag}: {first['msg']}", fix=f"see `evalgate probe {args.probe} --help`") from exc


def _settings(model: type[M], args: argparse.Namespace) -> tuple[M, ProbeServer]:
    """The probe's settings, then its server: each checked before anything loads or starts."""
    settings, server = _model(model, args), _model(ProbeServer, args)
    server.require_one(args.probe)
    return settings, server


def run(args: argparse.Namespace) -> int:
    settings, server = _settings(ProbeSettings, args)
    return run_probe(CacheProbe(settings), server, config=args.config, seed=settings.seed)


def run_warm_cold_cli(args: argparse.Namespace) -> int:
    settings, server = _settings(WarmColdSettings, args)
    probe = WarmColdProbe(settings, suite_prompts(settings, args.data_dir))
    return run_probe(probe, server, config=args.config, seed=settings.seed)
