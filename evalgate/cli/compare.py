"""``evalgate compare``: run the same items on a baseline and a candidate server and gate.

Every flag maps onto one field of ``CompareRequest``. Flags default to None here so that
``--resume RUN_DIR`` can tell what the user typed from what the original run recorded.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from rich.console import Console

from evalgate.config import load_config
from evalgate.errors import ConfigError, InfraError
from evalgate.kernel_check import kernel_check_for, kernel_failures
from evalgate.manifest import load_manifest
from evalgate.plan import CompareRequest, plan_compare
from evalgate.report import github, render_run
from evalgate.report.terminal import print_verdict
from evalgate.runner import run_arms
from evalgate.suites import DEFAULT_SUITES, PRESETS

__all__ = ["DEFAULTS", "add_parser", "request_from_args", "run"]

DEFAULTS: dict[str, Any] = {
    "baseline": "bf16",
    "candidate": "fp8kv",
    "suites": ",".join(DEFAULT_SUITES),
    "preset": "smoke",
    "alpha": 0.05,
    "seed": 1234,
    "policy": "difference",
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "compare",
        help="launch baseline and candidate, run suites on both, test the paired items, gate",
        description="Launch two servers that differ only in quantization, run the same items on both, "
        "pair them, test (McNemar mid-p, Holm), and exit 0 (PASS) or 1 (BLOCK).",
        epilog="exit codes: 0 PASS, 1 BLOCK, 2 usage/config error, 3 infrastructure error",
    )
    p.add_argument("--baseline", help="baseline variant (default: bf16)")
    p.add_argument(
        "--candidate", help="candidate variant, e.g. fp8kv, fp8, int4, int4+fp8kv (default: fp8kv)"
    )
    p.add_argument(
        "--suites", help=f"comma-separated suites (default: {DEFAULTS['suites']}); see `evalgate suites list`"
    )
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="items per suite: smoke 50, quick 500, full all (default: smoke)",
    )
    p.add_argument("--limit", type=int, help="items per suite, overriding the preset")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="local copy of the benchmark data (layout of shared/data); default: the Hub",
    )
    p.add_argument("--out", type=Path, help="run folder (default: reports/<run-id>)")
    p.add_argument("--alpha", type=float, help="family-wise error rate (default: 0.05)")
    p.add_argument("--engine", help="llamacpp (default on CPU), sglang or vllm")
    p.add_argument(
        "--baseline-url",
        metavar="URL[,URL...]",
        help="attach to baseline server(s) already running instead of launching one; items are sharded "
        "across the URLs; API key from EVALGATE_BASELINE_API_KEY",
    )
    p.add_argument(
        "--candidate-url",
        metavar="URL[,URL...]",
        help="attach to candidate server(s); API key from EVALGATE_CANDIDATE_API_KEY",
    )
    p.add_argument(
        "--protocol",
        choices=["auto", "llamacpp", "sglang", "vllm"],
        help="attach mode: the servers' engine (default: auto, detected from their endpoints)",
    )
    p.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
    p.add_argument("--seed", type=int, help="item selection and few-shot seed (default: 1234)")
    p.add_argument(
        "--allow-diff",
        action="append",
        metavar="KEY",
        help="allow this launch setting to differ between the arms (recorded in the report)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="RUN",
        help="continue an interrupted run (its folder or run id); other flags default to the run's",
    )
    p.add_argument("--max-gen-tokens", type=int, help="cap generated tokens on both arms (recorded)")
    p.add_argument(
        "--policy",
        choices=["difference", "regression", "non-inferiority"],
        help="difference: block on any significant change (default); regression: one-sided; "
        "non-inferiority: block unless the CI lower bound is above -margin",
    )
    p.add_argument(
        "--margin", help="non-inferiority margin: 2pt, 0.02 (absolute) or 1%%rel (of the baseline)"
    )
    p.add_argument(
        "--errors-as-wrong",
        action="store_true",
        default=None,
        help="score items that failed after retries as wrong instead of ending with exit 3",
    )
    p.add_argument(
        "--aa",
        action="store_true",
        default=None,
        help="also run the baseline a second time: measures the noise floor and sets the flip budget",
    )
    p.add_argument(
        "--agreement-gate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also block when more answers flip than the budget allows (default: on)",
    )
    p.add_argument(
        "--flip-budget", type=float, help="tolerated flip rate (default: A/A + 0.03 with --aa, else 0.05)"
    )
    p.add_argument(
        "--with-throughput",
        action="store_true",
        default=None,
        help="also load-sweep each arm after its suites: output tok/s, TTFT, ITL per concurrency and KV "
        "capacity (the `evalgate bench` defaults), in the report and throughput.json",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="llamacpp: one slot, one request at a time, no prompt cache, so logprobs are "
        "bit-identical across runs and resumes (measured as fast on 2 cores; no batching)",
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        default=None,
        help="keep both servers up, run items in a recorded shuffled order in chunks, and stop each "
        "suite once its always-valid e-value decides (block) or no decision is reachable (futile)",
    )
    p.add_argument("--chunk", type=int, help="--sequential: items per look (default: 50)")
    p.add_argument(
        "--tool-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tool_calls: prefill <tool_call> with tool_choice=required (default: on for llamacpp only)",
    )
    p.add_argument(
        "--skip-kernel-check",
        action="store_true",
        help="do not run the candidate's kernel numerics check first",
    )
    p.add_argument(
        "--reveal-private",
        action="store_true",
        default=None,
        help="write private exam prompts, answers and responses into records and reports",
    )
    p.add_argument(
        "--github",
        action="store_true",
        help="write the GitHub step summary, outputs (verdict, report-dir, blocked) and annotations "
        "(on by default when GITHUB_ACTIONS=true)",
    )
    p.set_defaults(func=run)


def _resume_dir(value: Path) -> Path:
    if (value / "manifest.json").exists():
        return value
    candidate = Path("reports") / str(value)
    if (candidate / "manifest.json").exists():
        return candidate
    raise ConfigError(f"no run folder or run id {value}", fix="pass the folder `evalgate compare` printed")


def request_from_args(args: argparse.Namespace) -> CompareRequest:
    """Typed flags, else the resumed run's recorded request, else the defaults."""
    typed = {
        "baseline": args.baseline, "candidate": args.candidate, "suites": args.suites, "preset": args.preset,
        "limit": args.limit, "data_dir": args.data_dir, "out": args.out, "alpha": args.alpha,
        "engine": args.engine, "seed": args.seed,
        "allow_diff": tuple(args.allow_diff) if args.allow_diff else None,
        "max_gen_tokens": args.max_gen_tokens, "reveal_private": args.reveal_private,
        "policy": args.policy, "margin": args.margin, "errors_as_wrong": args.errors_as_wrong,
        "aa": args.aa, "tool_prefill": args.tool_prefill, "agreement_gate": args.agreement_gate, "flip_budget": args.flip_budget,
        "with_throughput": args.with_throughput, "sequential": args.sequential, "chunk": args.chunk,
        "deterministic": args.deterministic, "protocol": args.protocol,
        "baseline_url": _urls(args.baseline_url), "candidate_url": _urls(args.candidate_url),
    }  # fmt: skip
    if isinstance(typed["suites"], str):
        typed["suites"] = tuple(s.strip() for s in typed["suites"].split(",") if s.strip())
    base: dict[str, Any] = {
        **{k: v for k, v in DEFAULTS.items()},
        "suites": tuple(DEFAULTS["suites"].split(",")),
    }
    resume = None
    if args.resume is not None:
        resume = _resume_dir(args.resume)
        recorded = load_manifest(resume).get("request", {})
        clashes = [
            f"--{k.replace('_', '-')} {typed[k]} (the run used {recorded[k]})"
            for k in typed
            if typed[k] is not None and k in recorded and _norm(typed[k]) != _norm(recorded[k])
        ]
        if clashes:
            raise ConfigError(
                f"--resume {resume}: " + "; ".join(clashes),
                fix="drop those flags (a resumed run keeps its own settings), or start a new run",
            )
        base.update({k: v for k, v in recorded.items() if k in typed and v is not None})
    merged = {**base, **{k: v for k, v in typed.items() if v is not None}}
    for key in ("data_dir", "out"):
        if merged.get(key) is not None:
            merged[key] = Path(merged[key])
    merged["suites"] = tuple(merged["suites"])
    merged["allow_diff"] = tuple(merged.get("allow_diff") or ())
    for key in ("baseline_url", "candidate_url"):
        merged[key] = tuple(merged.get(key) or ())
    known = {f.name for f in fields(CompareRequest)}
    return CompareRequest(resume=resume, **{k: v for k, v in merged.items() if k in known and k != "resume"})


def _urls(value: str | None) -> tuple[str, ...] | None:
    return tuple(u.strip() for u in value.split(",") if u.strip()) if value else None


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def request_to_record(req: CompareRequest) -> dict[str, Any]:
    """The request as the manifest stores it (JSON types only)."""
    out = asdict(req)
    out.pop("resume", None)
    return {
        k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v) for k, v in out.items()
    }


def run(args: argparse.Namespace) -> int:
    console = Console(width=None if Console().is_terminal else 120)
    req = request_from_args(args)
    if req.limit is not None and req.limit < 1:
        raise ConfigError("--limit must be at least 1", fix="omit it to use the preset's item count")
    if not 0 < req.alpha < 1:
        raise ConfigError(f"--alpha {req.alpha} is not between 0 and 1", fix="the usual value is 0.05")
    if req.chunk is not None and req.chunk < 1:
        raise ConfigError("--chunk must be at least 1", fix="the default is 50 items per look")
    if not req.suites:
        raise ConfigError("--suites is empty", fix="name at least one suite; see `evalgate suites list`")
    cfg = load_config(args.config)
    plan = plan_compare(req, cfg, console, record=request_to_record(req))
    console.print(
        f"run {plan.run_id}: {req.baseline} vs {req.candidate} on {plan.engine.name}, "
        f"suites {', '.join(req.suites)} -> {plan.run_dir}"
    )
    check = kernel_check_for(plan.variants["candidate"], skip=bool(args.skip_kernel_check))
    if check is not None:
        plan.manifest["kernel_check"] = check
        plan.save()
        if kernel_failures(check):
            _, verdict = render_run(plan.run_dir)  # BLOCK before spending any server time
            print_verdict(verdict, console, run_dir=str(plan.run_dir))
            if github.enabled(args.github):
                github.publish(plan.run_dir, verdict)
            return verdict.exit_code
    try:
        run_arms(plan, console)
    except KeyboardInterrupt:
        raise InfraError(
            "interrupted; every item finished so far is recorded",
            fix=f"continue with: evalgate compare --resume {plan.run_dir}",
        ) from None
    _, verdict = render_run(plan.run_dir)
    print_verdict(verdict, console, run_dir=str(plan.run_dir))
    if github.enabled(args.github):
        github.publish(plan.run_dir, verdict)
    return verdict.exit_code
