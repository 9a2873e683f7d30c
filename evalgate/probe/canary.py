"""The concurrency canary: a tenant's greedy answers must not depend on who else is served.

llama.cpp#27148: under concurrent load the host-memory prompt cache (``--cache-ram``,
``--cache-idle-slots``) can restore an unrelated conversation into a fresh slot, and the request
is answered from someone else's context while reporting ``cached_tokens: 0``. The canary asks a
tenant's prompts alone, one at a time, then again interleaved with unrelated traffic (every
request in flight at once, up to the server's slots), and compares the greedy answers. Identical
answers are expected where the server is deterministic (evalgate's CPU default: no RAM prompt
cache, no idle-slot caching); any difference is named.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.engines.api import Generation, Scorer

__all__ = ["CanaryResult", "filler_prompts", "run_canary"]


@dataclass(frozen=True)
class CanaryResult:
    """The tenant's answers alone and under load, and which of them differ."""

    alone: tuple[str, ...]
    loaded: tuple[str, ...]
    differ: tuple[int, ...]

    @property
    def passed(self) -> bool:
        return not self.differ


def filler_prompts(n: int, *, seed: int = 0, words: int = 120) -> list[str]:
    """Unrelated traffic: long prompts of random words, so they fill slots and the prompt cache."""
    rng = np.random.default_rng(seed)
    vocab = [
        "river",
        "copper",
        "lantern",
        "orbit",
        "meadow",
        "cipher",
        "granite",
        "harbor",
        "violet",
        "ember",
    ]
    return [" ".join(vocab[int(i)] for i in rng.integers(0, len(vocab), size=words)) + "\n" for _ in range(n)]


async def run_canary(
    scorer: Scorer, tenant: Sequence[str], traffic: Sequence[str], *, max_tokens: int = 24
) -> CanaryResult:
    """The tenant's prompts alone, then interleaved with ``traffic`` (all in flight together)."""

    async def answer(prompt: str) -> str:
        out = await scorer.generate(prompt, Generation(max_tokens=max_tokens))
        return str(out["text"])

    alone = [await answer(p) for p in tenant]
    order: list[tuple[int, str]] = []
    for i, p in enumerate(tenant):  # tenant, filler, tenant, filler ...: each lands beside another
        order.append((i, p))
        order.extend((-1, t) for t in traffic[i :: max(1, len(tenant))])
    answers = await asyncio.gather(*(answer(p) for _, p in order))
    loaded = [a for (i, _), a in zip(order, answers, strict=True) if i >= 0]
    differ = tuple(i for i, (x, y) in enumerate(zip(alone, loaded, strict=True)) if x != y)
    return CanaryResult(tuple(alone), tuple(loaded), differ)
