"""``evalgate compare --dry-run``: what a comparison would launch and run, with nothing launched.

The run's own ``settle`` decides it (``evalgate.run.settle``), so the dry run refuses what the
run refuses, with the same message and exit 2, and shows what the run will do: each arm's exact
command (API key masked, placeholder port) and what the engine pins on it and why, the settings
every suite gets (sampling, repeats, generation cap, thinking, the order of a sequential run),
and the planned items per suite. No run folder is written and attached servers are not
contacted: the checks that ask them (their settings as a pair, their tool-call parser) run when
the run starts.
"""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape

from evalgate.arms import DEFAULT_AA_ITEMS
from evalgate.config import EvalgateConfig
from evalgate.redact import MASK, is_secret_key
from evalgate.request import CompareRequest
from evalgate.run.settle import Settled, load_items, settle
from evalgate.stats.sequential import DEFAULT_CHUNK

__all__ = ["dry_run"]

PORT = 30000
"""Shown in the commands; a real run takes a free port per arm."""


def _masked_env(pair: tuple[str, str]) -> str:
    key, value = pair
    return f"{key}={MASK if is_secret_key(key) else value}"


def dry_run(req: CompareRequest, cfg: EvalgateConfig, console: Console) -> int:
    """Print the plan of ``req``; exit 0, or raise the ConfigError the real run would (exit 2)."""
    settled = settle(req, cfg, contact=False)
    req, engine = settled.request, settled.engine
    out = console.print
    out(
        f"dry run: {req.baseline} vs {req.candidate} on {engine.name}; nothing is launched, no run folder written"
    )
    for arm, spec in settled.specs.items():
        variant = settled.variants[arm]
        out(f"\n[bold]{arm}[/bold] ({escape(variant.name)}): weights {variant.weights}, KV {variant.kv}")
        command = engine.launch_command(spec, name=arm, port=PORT, api_key="***")
        env = [_masked_env(e) for e in spec.env]
        out("  " + escape(shlex.join([*env, *command])), soft_wrap=True)
        for note in engine.plan_notes(spec):
            out(f"  - {escape(note)}", soft_wrap=True)
    if settled.attached:
        out(
            "  - checked when the run starts: the servers' reported settings as a pair, and their tool-call parser"
        )
    out("\n[bold]settings[/bold] (the same on every arm)")
    for line in _settings(settled):
        out(f"  {escape(line)}", soft_wrap=True)
    items = load_items(settled)
    out("\n[bold]items per suite[/bold] (the same items on every arm)")
    for suite in settled.suites:
        n = len({it.item_id for it in items[suite.name]})
        times = f" x {req.repeats} repeats" if req.repeats > 1 else ""
        out(f"  {suite.name}: {n} items{times}; {escape(suite.source(settled.options))}", soft_wrap=True)
    return 0


def _settings(settled: Settled) -> list[str]:
    """What every suite is sent, as the run will send it."""
    req, options = settled.request, settled.options
    sampled = [f"temperature {options.temperature:g}"] if options.temperature is not None else []
    sampled += [f"{k} {v:g}" for k, v in options.sampling]
    lines = [
        f"sampling: {', '.join(sampled) if sampled else 'each task its own (greedy)'}; seed {options.seed}"
    ]
    if req.repeats > 1:
        lines.append(f"repeats: {req.repeats} per item, each with one seed on both arms")
    cap = options.max_gen_tokens
    lines.append(f"generation cap: {'each task its own' if cap is None else f'{cap} tokens per answer'}")
    if options.thinking is not None:
        lines.append(f"thinking: {'on' if options.thinking else 'off'} (the chat template's enable_thinking)")
    if options.context_lengths:
        lines.append(f"context lengths: {', '.join(map(str, options.context_lengths))} tokens")
    if req.sequential:
        lines.append(
            f"sequential: items in a recorded shuffled order, chunks of {req.chunk or DEFAULT_CHUNK}"
        )
    if req.aa:
        both = req.aa == "both"
        lines.append(
            "aa: the baseline runs a second time on every item (the flip budget's noise floor)"
            + (
                f"; the candidate a second time on the first {req.aa_items or DEFAULT_AA_ITEMS} items of each suite "
                "(its own noise, shown beside the baseline's)"
                if both
                else ""
            )
        )
    return lines
