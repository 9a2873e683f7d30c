"""``evalgate compare``: run the same items on a baseline and a candidate server and gate."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from evalgate.config import load_config
from evalgate.errors import ConfigError, InfraError
from evalgate.report import render_run
from evalgate.report.terminal import print_verdict
from evalgate.runner import CompareRequest, plan_compare, run_arms
from evalgate.suites import DEFAULT_SUITES, PRESETS

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "compare",
        help="launch baseline and candidate, run suites on both, test the paired items, gate",
        description="Launch two servers that differ only in quantization, run the same items on both, "
        "pair them, test (McNemar mid-p, Holm), and exit 0 (PASS) or 1 (BLOCK).",
    )
    p.add_argument("--baseline", default="bf16", help="baseline variant (default: bf16)")
    p.add_argument("--candidate", default="fp8kv", help="candidate variant, e.g. fp8kv, int4, int4+fp8kv")
    p.add_argument(
        "--suites", default=",".join(DEFAULT_SUITES), help="comma-separated suites (default: %(default)s)"
    )
    p.add_argument(
        "--preset", default="smoke", choices=list(PRESETS), help="items per suite (default: smoke = 50)"
    )
    p.add_argument("--limit", type=int, help="items per suite, overriding the preset")
    p.add_argument("--data-dir", type=Path, help="local copy of the benchmark data (layout of shared/data)")
    p.add_argument("--out", type=Path, help="run folder (default: reports/<run-id>)")
    p.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate (default: 0.05)")
    p.add_argument("--engine", help="llamacpp (default on CPU)")
    p.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
    p.add_argument("--seed", type=int, default=1234, help="item selection and few-shot seed")
    p.add_argument(
        "--allow-diff",
        action="append",
        default=[],
        metavar="KEY",
        help="allow this launch setting to differ between the arms (recorded in the report)",
    )
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run")
    p.add_argument("--max-gen-tokens", type=int, help="cap generated tokens on both arms (recorded)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(width=None if Console().is_terminal else 120)
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1", fix="omit it to use the preset's item count")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha {args.alpha} is not between 0 and 1", fix="the usual value is 0.05")
    suites = tuple(s.strip() for s in args.suites.split(",") if s.strip())
    if not suites:
        raise ConfigError("--suites is empty", fix="name at least one suite; see `evalgate suites list`")
    req = CompareRequest(
        baseline=args.baseline,
        candidate=args.candidate,
        suites=suites,
        preset=args.preset,
        limit=args.limit,
        data_dir=args.data_dir,
        out=args.out,
        alpha=args.alpha,
        engine=args.engine,
        seed=args.seed,
        allow_diff=tuple(args.allow_diff),
        resume=args.resume,
        max_gen_tokens=args.max_gen_tokens,
    )
    cfg = load_config(args.config)
    plan = plan_compare(req, cfg, console)
    console.print(
        f"run {plan.run_id}: {req.baseline} vs {req.candidate} on {plan.engine.name}, "
        f"suites {', '.join(suites)} -> {plan.run_dir}"
    )
    try:
        run_arms(plan, console)
    except KeyboardInterrupt:
        raise InfraError(
            "interrupted; every item finished so far is recorded",
            fix=f"continue with: evalgate compare --resume {plan.run_dir} (plus the same flags)",
        ) from None
    _, verdict = render_run(plan.run_dir)
    print_verdict(verdict, console, run_dir=str(plan.run_dir))
    return verdict.exit_code
