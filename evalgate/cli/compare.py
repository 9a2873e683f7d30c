"""``evalgate compare``: run the same items on a baseline and a candidate server and gate.

The request's flags are built from the fields of ``evalgate.request.CompareRequest`` (one
declaration per option; see ``evalgate.cli._flags``); ``--config`` and ``--github`` only steer
this command. Flags default to None here so that ``--resume RUN_DIR``
can tell what the user typed from what the original run recorded.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from evalgate.cli._dry_run import dry_run
from evalgate.cli._flags import add_model_flags, flag_name, typed_values
from evalgate.config import load_config
from evalgate.errors import ConfigError, InfraError, validated
from evalgate.gate import kernel_check_for, kernel_failures
from evalgate.lmeval.samples import import_samples
from evalgate.redact import MASK, redact_url
from evalgate.report import github, render_run
from evalgate.report.terminal import print_verdict
from evalgate.request import TIMING_FIELDS, CompareRequest, check_request
from evalgate.run.loop import run_arms
from evalgate.run.plan import RunPlan, plan_compare
from evalgate.run.settle import suite_tables
from evalgate.store.manifest import load_manifest
from evalgate.suites import chat_variants

__all__ = ["add_parser", "request_from_args", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "compare",
        help="launch baseline and candidate, run suites on both, test the paired items, gate",
        description="Launch two servers that differ only in quantization, run the same items on both, "
        "pair them, test (McNemar mid-p, Holm), and exit 0 (PASS) or 1 (BLOCK).",
        epilog="exit codes: 0 PASS, 1 BLOCK, 2 usage/config error, 3 infrastructure error, "
        "4 INCONCLUSIVE (--require-power: a PASS with an UNDERPOWERED blocking row)",
    )
    add_model_flags(p, CompareRequest)
    p.add_argument("--config", type=Path, help="evalgate.toml (default: ./evalgate.toml if present)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print both arms' launch commands (keys masked), what the engine pins on them, and the "
        "planned items per suite; launch nothing, write nothing",
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


def request_from_args(
    args: argparse.Namespace, suite_config: Mapping[str, Mapping[str, Any]] | None = None
) -> CompareRequest:
    """Typed flags, else the resumed run's recorded request, else the defaults. A suite's options
    are its ``[suites.<name>]`` table in evalgate.toml (``suite_config``) under its --suite-opt;
    their ``tier = "advisory"`` adds the suite to --advisory (the gate's, not the suite's, option);
    a resumed run keeps the options it recorded."""
    typed = typed_values(args, CompareRequest, skip=("resume",))
    if args.resume is None:
        suites = typed.get("suites", CompareRequest.model_fields["suites"].default)
        options = suite_tables(suite_config or {}, suites, chat=bool(typed.get("chat")))  # as run
        for name, table in typed.get("suite_options", {}).items():
            options[name] = {**options.get(name, {}), **table}
        tiered = _tiers(options)
        if tiered and "advisory" not in typed:  # the flag, when typed, wins over the tables
            typed["advisory"] = tiered
        if typed.get("advisory") and not (typed.get("baseline_samples") or typed.get("candidate_samples")):
            typed["advisory"] = _advisory(typed["advisory"], suites, chat=bool(typed.get("chat")))
        return _request({**typed, "suite_options": options})
    resume = _resume_dir(args.resume)
    recorded = load_manifest(resume).request
    fields = CompareRequest.model_fields
    kept = {k: v for k, v in typed.items() if k in TIMING_FIELDS or k in _URL_FIELDS}
    clashes = [
        f"{flag_name(k, fields[k])} {_show(_masked(k, v))} (the run used {_show(getattr(recorded, k))})"
        for k, v in typed.items()
        if k not in TIMING_FIELDS and _differs(_masked(k, v), getattr(recorded, k))
    ]
    if clashes:
        raise ConfigError(
            f"--resume {resume}: " + "; ".join(clashes),
            fix="drop those flags (a resumed run keeps its own settings), or start a new run",
        )
    for k in _URL_FIELDS:  # credentials are not recorded: the URL with them is typed again
        if k not in typed and any(f"://{MASK}@" in u for u in getattr(recorded, k)):
            raise ConfigError(
                f"--resume {resume}: the run's {flag_name(k, fields[k])} held credentials, which are not recorded",
                fix=f"pass {flag_name(k, fields[k])} again, as the original run had it",
            )
    return _request({**recorded.model_dump(), **kept, "resume": resume})


_URL_FIELDS = ("baseline_url", "candidate_url")


def _tiers(options: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The suites whose table (or --suite-opt) says ``tier = "advisory"``; ``tier`` is taken out."""
    out = []
    for name, table in list(options.items()):
        if "tier" in table and len(table) == 1:
            del options[name]  # a table that held only the tier leaves no suite option
        tier = table.pop("tier", "blocking")
        if tier not in ("blocking", "advisory"):
            raise ConfigError(
                f"[suites.{name}] tier = {tier!r}: not blocking or advisory",
                fix='tier = "advisory" (tested and shown, never gating) or "blocking" (the default)',
            )
        out += [name] if tier == "advisory" else []
    return tuple(out)


def _advisory(names: Sequence[str], suites: Sequence[str], *, chat: bool) -> tuple[str, ...]:
    """--advisory / [suites.<name>] tier, by the names the suites run under (--chat: gsm8k is gsm8k_chat);
    each must be a suite of the run, and one suite at least must stay blocking (exit 2)."""
    runs = chat_variants(suites) if chat else tuple(suites)
    as_run = dict(zip(suites, runs, strict=True))
    out = tuple(dict.fromkeys(as_run.get(n, n) for n in names))
    unknown = [n for n in out if n not in runs]
    if unknown:
        raise ConfigError(
            f"--advisory {','.join(unknown)}: not a suite of this run ({','.join(suites)})",
            fix="name suites given to --suites (or set tier in their [suites.<name>] table)",
        )
    if set(out) >= set(runs):
        raise ConfigError(
            f"--advisory names every suite of the run ({','.join(suites)}): nothing would gate",
            fix="leave at least one suite blocking, or drop --advisory",
        )
    return out


def _masked(name: str, value: Any) -> Any:
    """A typed URL as the manifest records it (``user:pass@`` masked), to compare with the record."""
    return tuple(redact_url(str(u)) for u in value) if name in _URL_FIELDS else value


def _request(values: dict[str, Any]) -> CompareRequest:
    return validated(CompareRequest, values, at=_flag_of, fix="see `evalgate compare --help`")


def _flag_of(where: str) -> str:
    """The flag a request field's error is about (``suite_options.x.y`` -> ``--suite-opt``)."""
    name = where.split(".")[0]
    field = CompareRequest.model_fields.get(name)
    return flag_name(name, field) if field is not None else where


def _differs(typed: Any, recorded: Any) -> bool:
    """A typed value the recorded one does not match (for a table, only the keys typed)."""
    if isinstance(typed, dict):
        table = recorded if isinstance(recorded, dict) else {}
        return any(k not in table or _differs(v, table[k]) for k, v in typed.items())
    return _norm(typed) != _norm(recorded)


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def run(args: argparse.Namespace) -> int:
    console = Console(width=None if Console().is_terminal else 120)
    cfg = load_config(args.config)
    req = request_from_args(args, cfg.suites)
    check_request(req)  # every value, before any item is loaded or server started
    if req.baseline_samples or req.candidate_samples:  # lm-eval runs that already happened
        return _imported(args, req, console)
    if args.dry_run:
        return dry_run(req, cfg, console)
    plan = plan_compare(req, cfg, console)  # holds the run folder's lock
    args.run_dir = plan.run_dir  # where main() saves a traceback, should one happen
    try:
        return _run(args, plan, console)
    finally:
        plan.release()


def _run(args: argparse.Namespace, plan: RunPlan, console: Console) -> int:
    req = plan.request
    console.print(
        f"run {plan.run_id}: {req.baseline} vs {req.candidate} on {plan.engine.name}, "
        f"suites {', '.join(s.name for s in plan.suites)} -> {plan.run_dir}"  # --chat: the chat variants
    )
    for arm in ("baseline", "candidate"):  # what runs, not the variant's name (engine.describe)
        launch = plan.manifest.launch.get(arm)
        label = (
            launch.label if launch is not None and launch.label else "not known (evalgate did not launch it)"
        )
        console.print(f"  {arm} {getattr(req, arm)}: {escape(label)}")
    # a resumed run keeps the check it ran or skipped (the manifest), else asks the request
    check = plan.manifest.kernel_check or kernel_check_for(
        plan.variants["candidate"], skip=req.skip_kernel_check
    )
    if check is not None:
        plan.manifest.kernels_checked(check)
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


def _imported(args: argparse.Namespace, req: CompareRequest, console: Console) -> int:
    """Gate two lm-eval ``--log_samples`` runs: import them as a run folder, then the usual verdict."""
    typed = typed_values(args, CompareRequest)
    for arm in ("baseline", "candidate"):  # a variant name means nothing here: name the arm by its run
        paths = getattr(req, f"{arm}_samples")
        if arm not in typed and paths:
            label = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(paths[0]).resolve().name)[:40] or arm
            clash = arm == "candidate" and label == req.baseline
            req = req.model_copy(update={arm: f"{label}-candidate" if clash else label})
    run_dir = import_samples(req, suites=req.suites if "suites" in typed else None)
    args.run_dir = run_dir
    console.print(f"imported lm-eval runs: {req.baseline} vs {req.candidate} -> {run_dir}")
    _, verdict = render_run(run_dir)
    print_verdict(verdict, console, run_dir=str(run_dir))
    if github.enabled(args.github):
        github.publish(run_dir, verdict)
    return verdict.exit_code
