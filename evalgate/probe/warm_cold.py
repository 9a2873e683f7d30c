"""``evalgate probe warm-cold``: answers must not depend on the prefix cache.

A warm hit reads a prefix that is stored (in FP8, with an FP8 KV cache), a cold request
recomputes it; the two may differ, and a gate that only ever ran cold would not see it. This is a
paired run on ONE server (``compare``'s same-server refusal stays: here the cache state is the
only difference, and this is the only comparison that runs on one server). Every prompt is
answered greedily twice:

- cold (``Scorer.cold_request``): under a salt of its own, a namespace nothing else has written
  (SGLang, vLLM), or with the server's per-request cache switch off (llama-server's
  ``cache_prompt: false``); first, on a flushed cache;
- warm (``Scorer.cached_request``): under one shared salt (the unsalted namespace where the server
  takes no salt), each prompt sent twice in a row, so the second answer reads the whole prompt
  (all but its last token or page) from the cache, shared few-shot prefixes included.

The flips (answers that differ) are tested against a flip budget with the gate's exact binomial
test (``stats.flip_budget_test``); ``--deterministic`` sets the budget to 0, so one flip BLOCKs.
Two controls keep it honest: a cold request that read cached tokens was not cold, and warm
requests that read none were not warm; either is an ERROR, never a PASS.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgate.engines.api import CacheObservation, NoCacheIsolation, Scorer
from evalgate.errors import ConfigError
from evalgate.probe.cache import answer_problems
from evalgate.probe.report import EXIT_CODES, no_isolation_report
from evalgate.stats import DEFAULT_FLIP_BUDGET, flip_budget_test
from evalgate.store.probe_report import PROBE_SCHEMA, WarmColdSettings
from evalgate.suites import SuiteOptions, default_registry

__all__ = ["WarmColdProbe", "WarmColdResult", "run_warm_cold", "suite_prompts", "warm_cold_report"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class WarmColdProbe:
    """``evalgate probe warm-cold`` as a ``Probe``: the settings and the prompts, by item id."""

    settings: WarmColdSettings
    prompts: tuple[tuple[str, str], ...]
    name = "warm_cold"

    @property
    def deterministic(self) -> bool:
        return self.settings.deterministic

    async def run(self, scorer: Scorer, *, progress: Progress) -> dict[str, Any]:
        s = self.settings
        ids = [await scorer.tokenize(text) for _, text in self.prompts]
        try:
            result = await run_warm_cold(
                scorer, ids, max_tokens=s.max_tokens, budget=s.budget, alpha=s.alpha, progress=progress
            )
        except NoCacheIsolation as exc:
            return no_isolation_report(self.name, exc, s)
        return warm_cold_report(result, s, [i for i, _ in self.prompts])


def suite_prompts(settings: WarmColdSettings, data_dir: Path | None) -> tuple[tuple[str, str], ...]:
    """Each item's prompt text by ``suite/item``; a suite whose prompts are no completion text
    (chat, private) is refused (exit 2)."""
    options = SuiteOptions(data_dir=data_dir, seed=settings.seed)
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
    return tuple(prompts)


@dataclass(frozen=True)
class WarmColdResult:
    """Each prompt's warm and cold answer and cached tokens, the flip test and its status."""

    warm: tuple[CacheObservation, ...]
    cold: tuple[CacheObservation, ...]
    flips: tuple[int, ...]
    budget: float
    pvalue: float
    status: str
    """PASS (within the budget), BLOCK (more flips than it allows), or ERROR (a control failed)."""
    reasons: tuple[str, ...]
    salted: bool
    """Warm requests went under one shared salt (False: the server's unsalted namespace)."""
    seconds: float = 0.0


async def run_warm_cold(
    scorer: Scorer,
    prompts: Sequence[Sequence[int]],
    *,
    max_tokens: int = 16,
    budget: float = DEFAULT_FLIP_BUDGET,
    alpha: float = 0.05,
    progress: Progress | None = None,
) -> WarmColdResult:
    """The paired warm/cold answers of ``prompts`` (token ids), one request at a time. Raises
    ``NoCacheIsolation`` when the server can send no cold request."""
    say = progress or (lambda _: None)
    start = time.monotonic()
    await scorer.flush_cache()
    cold = [await scorer.cold_request(p, max_tokens=max_tokens) for p in prompts]
    say(f"cold: {len(cold)} requests")
    shared: str | None = secrets.token_hex(16)
    try:  # the first prompt warms the shared namespace
        await scorer.cached_request(prompts[0], salt=shared, max_tokens=max_tokens)
    except NoCacheIsolation:  # no salts (llama-server): its one namespace is the warm one
        shared = None
        await scorer.cached_request(prompts[0], salt=None, max_tokens=max_tokens)
    warm = []
    for i, p in enumerate(prompts):
        # each prompt warms the cache right before its warm answer: a cache smaller than the set
        # (llama-server's LRU slots) would have evicted it if the whole set went first
        if i:
            await scorer.cached_request(p, salt=shared, max_tokens=max_tokens)
        warm.append(await scorer.cached_request(p, salt=shared, max_tokens=max_tokens))
    say(f"warm: {len(warm)} requests")
    flips = tuple(i for i, (w, c) in enumerate(zip(warm, cold, strict=True)) if w.text != c.text)
    test = flip_budget_test(len(flips), len(prompts), budget=budget)
    status, reasons = _decide(warm, cold, flips, test.pvalue, budget=budget, alpha=alpha)
    return WarmColdResult(
        tuple(warm),
        tuple(cold),
        flips,
        budget,
        test.pvalue,
        status,
        tuple(reasons),
        shared is not None,
        time.monotonic() - start,
    )


def _decide(
    warm: Sequence[CacheObservation],
    cold: Sequence[CacheObservation],
    flips: Sequence[int],
    pvalue: float,
    *,
    budget: float,
    alpha: float,
) -> tuple[str, list[str]]:
    """The controls first (answers that are no answers, a cold request that read the cache, warm
    requests that read none), then the flip test."""
    n = len(warm)
    flipped = f"{len(flips)} of {n} answers differ warm against cold (budget {budget:g}, p = {pvalue:.3g})"
    both = [*warm, *cold]
    garbage = answer_problems(
        [{"cached_tokens": o.cached_tokens, "prompt_tokens": o.prompt_tokens, "answered": o.text is not None}
         for o in both]
    )  # fmt: skip
    if not garbage and all(not (o.text or "").strip() for o in both):
        garbage = [
            f"every one of the {len(both)} answers is empty: the server answered nothing, so two "
            "empty answers agreeing says nothing of the cache"
        ]
    if garbage:
        return "ERROR", [*garbage, flipped]
    cold_read = [c.cached_tokens for c in cold if c.cached_tokens]
    warm_cached = [w.cached_tokens for w in warm if w.cached_tokens is not None]
    if cold_read:
        return "ERROR", [
            f"{len(cold_read)} cold requests read up to {max(cold_read)} cached tokens: they were not "
            "cold (the server shares its cache across salts?); run `evalgate probe cache`",
            flipped,
        ]
    if warm_cached and not any(warm_cached):
        return "ERROR", [
            "no warm request read a cached token: the prefix cache is off or was evicted, so nothing "
            "was compared; turn prefix caching on for this server",
            flipped,
        ]
    reasons = [flipped]
    if not warm_cached:
        reasons.append(
            "the server reports no cached tokens: that the warm requests read the cache is not checked"
        )
    return ("BLOCK" if flips and pvalue < alpha else "PASS"), reasons


def warm_cold_report(
    result: WarmColdResult, settings: WarmColdSettings, item_ids: Sequence[str]
) -> dict[str, Any]:
    """probe.json for one warm/cold run."""
    verdict = result.status
    items = [
        {
            "item": item,
            "prompt_tokens": w.prompt_tokens,
            "warm_cached_tokens": w.cached_tokens,
            "cold_cached_tokens": c.cached_tokens,
            "warm_latency_s": w.latency_s,
            "cold_latency_s": c.latency_s,
            "flip": i in result.flips,
            "warm": w.text,
            "cold": c.text,
        }
        for i, (item, w, c) in enumerate(zip(item_ids, result.warm, result.cold, strict=True))
    ]
    return {
        "schema": PROBE_SCHEMA,
        "probe": "warm_cold",
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "reasons": list(result.reasons),
        "settings": settings.model_dump(mode="json"),
        "n": len(items),
        "flips": len(result.flips),
        "budget": result.budget,
        "pvalue": result.pvalue,
        "warm_namespace": "one shared salt" if result.salted else "the server's unsalted namespace",
        "conditions": {"warm": _condition(result.warm), "cold": _condition(result.cold)},
        "seconds": round(result.seconds, 1),
        "items": items,
    }


def _condition(obs: Sequence[CacheObservation]) -> dict[str, Any]:
    cached = [o.cached_tokens for o in obs if o.cached_tokens is not None]
    return {
        "median_latency_s": statistics.median(o.latency_s for o in obs),
        "cached_tokens_min": min(cached) if cached else None,
        "cached_tokens_max": max(cached) if cached else None,
    }
