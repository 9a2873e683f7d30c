"""What ``evalgate compare`` will do, settled before any server starts: the fairness check, the
suites with their own options, the items, the run folder and its manifest (and, on --resume,
that they match the run's). The request itself is ``evalgate.request.CompareRequest``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from evalgate.config import EvalgateConfig
from evalgate.engines import Engine, get_engine
from evalgate.engines._launcher import require_input_files
from evalgate.engines.attach import ExternalEngine, require_two_servers
from evalgate.engines.client import RetryPolicy
from evalgate.engines.gguf import file_sha256
from evalgate.errors import ConfigError
from evalgate.gate import GatePolicy
from evalgate.request import CompareRequest
from evalgate.stats.sequential import DEFAULT_CHUNK, shuffled
from evalgate.store.lock import RunLock
from evalgate.store.manifest import (
    LaunchInfo,
    Manifest,
    SequentialInfo,
    SuiteInfo,
    VariantInfo,
    command_line,
    git_state,
    load_manifest,
    package_versions,
    utc_now,
    write_manifest,
)
from evalgate.store.records import safe_name
from evalgate.suites import (
    PRESETS,
    Item,
    Suite,
    SuiteOptions,
    ToolCallSuite,
    chat_variants,
    default_registry,
)
from evalgate.suites.long_context import LongContextSuite, plan_lengths
from evalgate.variants import LaunchSpec, Variant, require_only_quantization

__all__ = ["CompareRequest", "RunPlan", "plan_compare", "resolve_suites"]


@dataclass
class RunPlan:
    request: CompareRequest
    run_dir: Path
    run_id: str
    engine: Engine
    specs: dict[str, LaunchSpec]
    suites: list[Suite]
    items: dict[str, list[Item]]
    options: SuiteOptions
    manifest: Manifest
    variants: dict[str, Variant] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Per request: the timeout of one try and the number of tries ([client], --request-timeout, --tries)."""
    deadline_s: float | None = None
    """Seconds the whole run may take ([client] deadline_s, --deadline); None: no deadline."""
    lock: RunLock | None = None
    """Held on the run folder from planning until the command ends: one writer per run."""
    secrets: list[str] = field(default_factory=list)
    """Launched servers' API keys, masked in every error stored or printed (never recorded)."""

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def save(self) -> None:
        """Write manifest.json atomically: every write of a compare run's manifest goes through here."""
        write_manifest(self.run_dir, self.manifest)


def _run_id(req: CompareRequest) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{req.baseline}-vs-{req.candidate}-{secrets.token_hex(2)}".replace("+", "_")


def plan_compare(req: CompareRequest, cfg: EvalgateConfig, console: Console) -> RunPlan:
    """Everything that can fail without a server: config, variants, the fairness check, items.
    The returned plan holds the run folder's lock (``RunPlan.release`` lets it go)."""
    GatePolicy.from_request(req)  # validate
    run_id = _run_id(req)
    run_dir = Path(req.resume) if req.resume else Path(req.out) if req.out else Path("reports") / run_id
    lock = RunLock(run_dir)
    if run_dir.is_dir():  # a run being resumed, or an --out folder given: take it before any work
        lock.acquire()
    try:
        plan = _plan(req, cfg, console, run_id, run_dir, lock)
    except BaseException:
        lock.release()
        raise
    plan.lock = lock
    return plan


def resolve_suites(req: CompareRequest) -> list[Suite]:
    """The run's suites, each with its own options (``--chat``: the chat variants), and the
    refusals a run and its ``--dry-run`` share (exit 2): options for a suite not in the run,
    ``--thinking`` with no chat suite to reach."""
    registry = default_registry()
    names = chat_variants(req.suites) if req.chat else req.suites  # --chat: each suite's chat variant
    extra = [name for name in req.suite_options if name not in names]
    if extra:
        raise ConfigError(
            f"suite options for {extra[0]}, which this run does not include",
            fix="add it to --suites, or drop its --suite-opt"
            + (" (--chat runs the chat variants)" if req.chat else ""),
        )
    suites = [registry.get(name, options=req.suite_options.get(name)) for name in names]
    if req.thinking != "auto" and not any(
        s.kind == "chat" and not isinstance(s, ToolCallSuite) for s in suites
    ):
        raise ConfigError(
            f"--thinking {req.thinking} reaches only chat suites, and this run has none",
            fix="add --chat (or a chat suite such as gsm8k_chat, or a private exam), or drop --thinking",
        )
    return suites


def _plan(
    req: CompareRequest, cfg: EvalgateConfig, console: Console, run_id: str, run_dir: Path, lock: RunLock
) -> RunPlan:
    if not req.resume:
        _require_fresh(run_dir)
    if req.deterministic:  # recorded in the launch args (-np 1, SGLang's flag, vLLM's env): a resume keeps it
        on = {"deterministic": True}
        cfg = cfg.model_copy(
            update={
                "llamacpp": cfg.llamacpp.model_copy(update=on),
                "sglang": cfg.sglang.model_copy(update=on),
                "vllm": cfg.vllm.model_copy(update=on),
            }
        )
    engine = _engine(req, cfg)
    old = load_manifest(run_dir) if req.resume else None
    host = engine.settle_host(previous_env=old.launch["baseline"].env if old else None)
    if host and not old:
        for value in host.values():
            if isinstance(value, dict) and value.get("reason"):
                console.print(f"[dim]host: {value['reason']}[/dim]")
    variants = {"baseline": cfg.variant(req.baseline), "candidate": cfg.variant(req.candidate)}
    specs = {arm: engine.launch_spec(v) for arm, v in variants.items()}
    if req.aa:  # the baseline launched a second time: the noise floor
        variants["aa"], specs["aa"] = variants["baseline"], specs["baseline"]
    require_input_files(specs)  # a --chat-template-file that is not there: exit 2, not a failed start
    require_only_quantization(specs["baseline"], specs["candidate"], allow=req.allow_diff)
    engine.check_pair(allow=req.allow_diff)  # attach mode: the settings the servers report
    suites = resolve_suites(req)
    if any(isinstance(s, ToolCallSuite) for s in suites):
        for arm, spec in specs.items():
            engine.require_tool_parser(arm, spec)  # else no calls on either arm: a silent PASS
    if req.context_lengths and not any(isinstance(s, LongContextSuite) for s in suites):
        raise ConfigError(
            "--context-lengths sets long_context's lengths, and this run does not include it",
            fix="add long_context to --suites, or drop --context-lengths",
        )
    if any(isinstance(s, LongContextSuite) for s in suites):  # lengths settled (and fit) before launch
        slots = {arm: engine.slot_context(spec) for arm, spec in specs.items()}
        req = req.model_copy(update={"context_lengths": plan_lengths(req.context_lengths, slots, req.preset)})
    cap = engine.default_gen_cap(req.preset)  # e.g. llama.cpp's smoke runs: CPU time is short
    if req.max_gen_tokens is None and cap is not None:  # both arms get it; manifest and report say so
        req = req.model_copy(update={"max_gen_tokens": cap})
    options = SuiteOptions(
        data_dir=req.data_dir,
        seed=req.seed,
        max_gen_tokens=req.max_gen_tokens,
        engine=engine.name,
        reveal_private=req.reveal_private,
        temperature=req.temperature,
        context_lengths=req.context_lengths or (),
        thinking=None if req.thinking == "auto" else req.thinking == "on",
        sampling=tuple(
            (k, v)
            for k, v in (("top_p", req.top_p), ("top_k", req.top_k), ("min_p", req.min_p))
            if v is not None
        ),
    )
    if req.repeats > 1:
        fixed = [s.name for s in suites if not getattr(s, "samples", False)]
        if fixed:
            raise ConfigError(
                f"--repeats {req.repeats}: {', '.join(fixed)} do(es) not sample (log-likelihood scoring "
                "or the suite's own fixed requests), so every repeat would be the same request",
                fix="run those suites in a separate run without --repeats, or drop --repeats",
            )
        if req.sequential:
            raise ConfigError(
                "--sequential cannot be combined with --repeats",
                fix="run the repeats as a full run (the per-item mean needs every repeat of an item)",
            )
    if req.sequential and req.policy == "non-inferiority":
        raise ConfigError(
            "--sequential tests for a difference or a regression, not non-inferiority",
            fix="drop --sequential, or use --policy difference or regression",
        )
    if req.sequential and (req.aa or req.with_throughput):
        raise ConfigError(
            "--sequential cannot be combined with --aa or --with-throughput",
            fix="run the A/A calibration or the throughput sweep as a separate, full run",
        )
    n = req.limit if req.limit is not None else PRESETS[req.preset]
    items = {}
    for suite in suites:
        with console.status(f"loading {suite.name} items"):
            items[suite.name] = suite.load(options, n)
        if req.sequential:  # the recorded order in which the e-value consumes them
            items[suite.name] = shuffled(items[suite.name], seed=req.seed, suite=suite.name)
        if req.repeats > 1:  # repeat r of an item: its own record, the same seed on both arms
            items[suite.name] = [
                replace(it, repeat=r) for it in items[suite.name] for r in range(req.repeats)
            ]
    if old:
        run_id = old.run_id
    manifest = _manifest(req, run_id, engine, specs, suites, items, options, variants)
    manifest.host = old.host if old else host
    if req.sequential:
        manifest.sequential = SequentialInfo(chunk=req.chunk or DEFAULT_CHUNK)
    if old:
        _check_resume(old, manifest, run_dir)
        manifest.arms = old.arms
        manifest.request = old.request
        manifest.created_utc = old.created_utc
        manifest.resumed_utc = [*old.resumed_utc, utc_now()]
        if old.sequential:
            manifest.sequential = old.sequential
        if old.throughput:  # compare --with-throughput: arms already swept are not swept again
            manifest.throughput = old.throughput
        if old.kernel_check:  # the check the run ran or skipped (--skip-kernel-check) is kept
            manifest.kernel_check = old.kernel_check
    plan = RunPlan(req, run_dir, run_id, engine, specs, suites, items, options, manifest, variants)
    plan.retry = RetryPolicy(
        attempts=req.tries or cfg.client.tries,
        timeout_s=req.request_timeout_s or cfg.client.timeout_s or engine.request_timeout_s(),
    )
    plan.deadline_s = req.deadline_s or cfg.client.deadline_s
    lock.acquire()
    if not req.resume:
        _require_fresh(run_dir)  # again, now that no one else can start it
    plan.save()
    _write_prompts(plan)
    return plan


def _engine(req: CompareRequest, cfg: EvalgateConfig) -> Engine:
    if bool(req.baseline_url) != bool(req.candidate_url):
        raise ConfigError(
            "attach mode needs both --baseline-url and --candidate-url",
            fix="pass both (comma-separated URLs per arm), or neither to launch the servers",
        )
    if req.baseline_url:
        if req.engine:
            raise ConfigError(
                "--engine launches servers; --baseline-url/--candidate-url attach to running ones",
                fix="drop --engine (use --protocol to name the attached servers' engine)",
            )
        urls = {"baseline": list(req.baseline_url), "candidate": list(req.candidate_url)}
        if not req.same_server_ok:
            require_two_servers(urls["baseline"], urls["candidate"])
        return ExternalEngine(
            urls,
            protocol=req.protocol,
            deterministic=req.deterministic,
            allow_diff=req.allow_diff,
            same_server_ok=req.same_server_ok,
        )
    return get_engine(req.engine or cfg.engine, cfg)


def _require_fresh(run_dir: Path) -> None:
    """A new run's folder holds no run: neither a manifest nor another run's records."""
    if (run_dir / "manifest.json").exists():
        raise ConfigError(
            f"{run_dir} already holds a run",
            fix=f"continue it with --resume {run_dir}, or choose another --out",
        )
    leftovers = [p for p in ("items", "prompts") if any((run_dir / p).glob("*.jsonl"))]
    if leftovers:
        raise ConfigError(
            f"{run_dir} holds {' and '.join(f'{p}/' for p in leftovers)} of another run but no manifest.json, "
            "so they cannot be told apart from this run's",
            fix="choose another --out (or empty that folder); a run is continued only with --resume",
        )


def _write_prompts(plan: RunPlan) -> None:
    """What each item asked, once per run (shared by both arms), for the report's item browser."""
    folder = plan.run_dir / "prompts"
    folder.mkdir(parents=True, exist_ok=True)
    for suite in plan.suites:
        if suite.private and not plan.options.reveal_private:
            continue
        path = folder / f"{safe_name(suite.name)}.jsonl"  # private:/a/b would nest folders
        if path.exists():
            continue
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for it in plan.items[suite.name]:
                if it.repeat:  # one row per item: its repeats asked the same
                    continue
                row = {"item_id": it.item_id, "prompt_hash": it.prompt_hash, **it.display}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(path)


def _manifest(
    req: CompareRequest,
    run_id: str,
    engine: Any,
    specs: dict[str, LaunchSpec],
    suites: list[Suite],
    items: dict[str, list[Item]],
    options: SuiteOptions,
    variants: dict[str, Variant],
) -> Manifest:
    return Manifest(
        run_id=run_id,
        created_utc=utc_now(),
        command=command_line(),
        engine=engine.name,
        engine_version=engine.version(),
        git=git_state(),
        packages=package_versions(),
        request=req,
        variants={arm: VariantInfo(name=v.name, weights=v.weights, kv=v.kv) for arm, v in variants.items()},
        launch={
            arm: LaunchInfo(
                model=s.model,
                model_sha256=file_sha256(Path(s.model)) if Path(s.model).is_file() else None,
                args=list(s.args),
                env=list(s.env),
            )
            for arm, s in specs.items()
        },
        suites={
            s.name: SuiteInfo(
                version=s.version,
                metrics=list(s.metrics),
                kind=s.kind,
                metric_kind=getattr(s, "metric_kind", "binary"),
                private=s.private,
                source=s.source(options),
                n=len({it.item_id for it in items[s.name]}),
                item_ids=list(dict.fromkeys(it.item_id for it in items[s.name])),
            )
            for s in suites
        },
        arm_names=list(specs),
    )


def _resume_keys(m: Manifest) -> dict[str, Any]:
    """What a resumed run must share with the original (the rest of its request is the original's)."""
    req = m.request
    return {
        "engine": m.engine,
        "engine_version": m.engine_version,
        "seed": req.seed,
        "preset": req.preset,
        "limit": req.limit,
        "max_gen_tokens": req.max_gen_tokens,
        "variants": m.variants,
        "launch": m.launch,
        "suites": m.suites,
    }


def _check_resume(old: Manifest, new: Manifest, run_dir: Path) -> None:
    before, now = _resume_keys(old), _resume_keys(new)
    mismatched = [k for k in before if before[k] != now[k]]
    if mismatched:
        raise ConfigError(
            f"--resume {run_dir}: this command differs from the original run in {', '.join(mismatched)}",
            fix="rerun with exactly the original flags (see `command` in its manifest.json), or start a new run",
        )
