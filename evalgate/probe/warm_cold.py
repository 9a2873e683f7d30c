"""Answers must not depend on the prefix cache: warm against cold on one server.

A warm hit reads a prefix that is stored (in FP8, with an FP8 KV cache), a cold request
recomputes it; the two may differ, and a gate that only ever ran cold would not see it. This is a
paired run on ONE server (the same-server refusal of ``compare`` does not apply: the cache state
is the only difference): every prompt is answered greedily under one shared salt after the same
prompts have warmed it (few-shot prefixes reused), and under a fresh salt of its own (cold). The
flips (answers that differ) are tested against a flip budget, the A/A budget of the gate
(``stats.flip_budget_test``); a deterministic server is expected to flip none.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from evalgate.engines.api import Scorer
from evalgate.stats import DEFAULT_FLIP_BUDGET, flip_budget_test

__all__ = ["WarmColdResult", "run_warm_cold"]


@dataclass(frozen=True)
class WarmColdResult:
    """Each prompt's warm and cold answer, the warm requests' cached tokens, and the flip test."""

    warm: tuple[str, ...]
    cold: tuple[str, ...]
    warm_cached: tuple[int | None, ...]
    flips: tuple[int, ...]
    budget: float
    pvalue: float
    status: str
    """pass (within the budget), block (more flips than the budget allows), or error (no warm
    request read the cache: nothing was compared)."""


async def run_warm_cold(
    scorer: Scorer,
    prompts: Sequence[Sequence[int]],
    *,
    max_tokens: int = 16,
    budget: float = DEFAULT_FLIP_BUDGET,
    alpha: float = 0.05,
) -> WarmColdResult:
    """The paired warm/cold answers of ``prompts`` (token ids) on the server behind ``scorer``."""
    await scorer.flush_cache()
    shared = secrets.token_hex(16)
    cold = [
        await scorer.cached_request(p, salt=secrets.token_hex(16), max_tokens=max_tokens) for p in prompts
    ]
    for p in prompts:  # warm the shared namespace with the same prompts
        await scorer.cached_request(p, salt=shared, max_tokens=max_tokens)
    warm = [await scorer.cached_request(p, salt=shared, max_tokens=max_tokens) for p in prompts]
    flips = tuple(i for i, (w, c) in enumerate(zip(warm, cold, strict=True)) if w.text != c.text)
    test = flip_budget_test(len(flips), len(prompts), budget=budget)
    cached = tuple(w.cached_tokens for w in warm)
    if not any(cached):
        status = "error"
    else:
        status = "block" if test.pvalue < alpha else "pass"
    return WarmColdResult(
        tuple(w.text or "" for w in warm),
        tuple(c.text or "" for c in cold),
        cached,
        flips,
        budget,
        test.pvalue,
        status,
    )
