"""A simulated server for the cache probe: a prefix cache keyed by salt (or not), latency that
grows with the prompt tokens it must compute, and log-normal noise. No sleeping: the latency is
reported, not waited for."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from evalgate.engines.api import CacheObservation, Scorer


class SimScorer(Scorer):
    """``honour_salt=False`` is a server that ignores salts (the leak); ``cache=False`` one whose
    cache never hits (a blind probe); ``report=False`` one that reports no cached tokens; ``warm_changes=True`` one whose answer
    changes when it reads the cache."""

    concurrency = 1

    def __init__(
        self,
        *,
        honour_salt: bool = True,
        cache: bool = True,
        report: bool = True,
        noise: float = 0.05,
        seed: int = 0,
        warm_changes: bool = False,
    ) -> None:
        self.warm_changes = warm_changes
        self.honour_salt, self.cache, self.report, self.noise = honour_salt, cache, report, noise
        self.rng = np.random.default_rng(seed)
        self.stored: list[tuple[str | None, tuple[int, ...]]] = []
        self.sent: list[tuple[list[int], str | None]] = []
        self.flushes = 0

    async def tokenize(self, text: str) -> list[int]:
        return [10 + zlib.crc32(w.encode()) % 5000 for w in text.split()]

    async def context_length(self) -> int | None:
        return 2048

    async def flush_cache(self) -> str | None:
        self.flushes += 1
        self.stored.clear()
        return "flushed"

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        ids = tuple(int(t) for t in prompt_ids)
        self.sent.append((list(ids), salt))
        space = salt if self.honour_salt else None
        hit = 0
        if self.cache:
            for s, kept in self.stored:
                if s == space:
                    n = 0
                    while n < min(len(kept), len(ids)) and kept[n] == ids[n]:
                        n += 1
                    hit = max(hit, n)
            self.stored.append((space, ids))
        latency = (0.02 + 0.002 * (len(ids) - hit)) * float(np.exp(self.rng.normal(0, self.noise)))
        text = f"answer {sum(ids) % 97}" + (" (from the cache)" if self.warm_changes and hit else "")
        return CacheObservation(latency, hit if self.report else None, len(ids), text)
