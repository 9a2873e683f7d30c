"""``evalgate compare --dry-run``: what a comparison would launch and run, with nothing launched.

The same steps as the plan up to the first server: the engine and its settings, each arm's
launch spec (checked for fairness, KV scales validated, a tool-call parser required for
tool_calls), and the items of every suite. Printed: each arm's exact command (API key masked,
placeholder port), what the engine pins on it and why, and the planned items per suite. No run
folder is written and attached servers are not contacted.
"""

from __future__ import annotations

import re
import shlex

from rich.console import Console
from rich.markup import escape

from evalgate.config import EvalgateConfig
from evalgate.engines import Engine, get_engine
from evalgate.engines.attach import ExternalEngine
from evalgate.request import CompareRequest
from evalgate.run.plan import resolve_suites
from evalgate.suites import PRESETS, SuiteOptions, ToolCallSuite
from evalgate.suites.long_context import LongContextSuite, plan_lengths
from evalgate.variants import require_only_quantization

__all__ = ["dry_run"]

PORT = 30000
"""Shown in the commands; a real run takes a free port per arm."""
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def _engine(req: CompareRequest, cfg: EvalgateConfig) -> Engine:
    if req.deterministic:  # as the plan does: the flag lands in each arm's launch settings
        on = {"deterministic": True}
        cfg = cfg.model_copy(
            update={
                "llamacpp": cfg.llamacpp.model_copy(update=on),
                "sglang": cfg.sglang.model_copy(update=on),
                "vllm": cfg.vllm.model_copy(update=on),
            }
        )
    if req.baseline_url or req.candidate_url:
        urls = {"baseline": list(req.baseline_url), "candidate": list(req.candidate_url)}
        return ExternalEngine(
            urls, protocol=req.protocol, deterministic=req.deterministic, allow_diff=req.allow_diff
        )
    return get_engine(req.engine or cfg.engine, cfg)


def _masked_env(pair: tuple[str, str]) -> str:
    key, value = pair
    return f"{key}={'***' if _SECRET_ENV.search(key) else value}"


def dry_run(req: CompareRequest, cfg: EvalgateConfig, console: Console) -> int:
    """Print the plan of ``req``; exit 0, or raise the ConfigError the real run would (exit 2)."""
    engine = _engine(req, cfg)
    engine.settle_host()  # what the launch settings depend on (llama.cpp: the measured load)
    variants = {"baseline": cfg.variant(req.baseline), "candidate": cfg.variant(req.candidate)}
    specs = {arm: engine.launch_spec(v) for arm, v in variants.items()}
    require_only_quantization(specs["baseline"], specs["candidate"], allow=req.allow_diff)
    suites = resolve_suites(req)  # --chat's variants and the plan's refusals
    if any(isinstance(s, ToolCallSuite) for s in suites) and not isinstance(engine, ExternalEngine):
        for arm, spec in specs.items():
            engine.require_tool_parser(arm, spec)
    lengths = None
    if any(isinstance(s, LongContextSuite) for s in suites):  # as the plan settles them (exit 2 if too long)
        slots = {arm: engine.slot_context(spec) for arm, spec in specs.items()}
        lengths = plan_lengths(req.context_lengths, slots, req.preset)
    cap = engine.default_gen_cap(req.preset)
    options = SuiteOptions(
        data_dir=req.data_dir,
        seed=req.seed,
        max_gen_tokens=req.max_gen_tokens if req.max_gen_tokens is not None else cap,
        engine=engine.name,
        reveal_private=req.reveal_private,
        context_lengths=lengths or (),
        thinking=None if req.thinking == "auto" else req.thinking == "on",
    )
    out = console.print
    out(
        f"dry run: {req.baseline} vs {req.candidate} on {engine.name}; nothing is launched, no run folder written"
    )
    arms = ["baseline", "candidate", *(["aa"] if req.aa else [])]
    for arm in arms:
        spec = specs["baseline" if arm == "aa" else arm]
        variant = variants["baseline" if arm == "aa" else arm]
        out(f"\n[bold]{arm}[/bold] ({escape(variant.name)}): weights {variant.weights}, KV {variant.kv}")
        command = engine.launch_command(spec, name=arm, port=PORT, api_key="***")
        env = [_masked_env(e) for e in spec.env]
        out("  " + escape(shlex.join([*env, *command])), soft_wrap=True)
        for note in engine.plan_notes(spec):
            out(f"  - {escape(note)}", soft_wrap=True)
    n = req.limit if req.limit is not None else PRESETS[req.preset]
    out("\n[bold]items per suite[/bold] (the same items on every arm)")
    for suite in suites:
        items = suite.load(options, n)
        out(f"  {suite.name}: {len(items)} items; {escape(suite.source(options))}", soft_wrap=True)
    return 0
