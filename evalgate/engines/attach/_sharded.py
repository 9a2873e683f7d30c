"""One attached arm over several URLs: a scorer per URL, items sharded stickily across them (the
choices of one question share a context, so they go to one server and its prompt cache stays
warm; the assignment is reproducible), and a preflight of every URL."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from evalgate.engines.api import Decoded, Generation, LogLik, Position, Scorer
from evalgate.engines.gateway import GatewayScorer
from evalgate.engines.preflight import PreflightReport, preflight
from evalgate.errors import PreflightError

__all__ = ["ShardedScorer", "preflight_all", "shard_index"]


def shard_index(key: str, n: int) -> int:
    """Stable across processes and runs (unlike ``hash``), so a rerun sends each item to the same URL."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % n


class ShardedScorer(Scorer):
    """One scorer per URL; every call about the same prompt goes to the same URL. Caches are not
    flushed (the protocol's default): attached servers are not evalgate's to reset."""

    def __init__(self, scorers: Sequence[Scorer], urls: Sequence[str]) -> None:
        if not scorers or len(scorers) != len(urls):
            raise ValueError("one scorer per URL")
        self.scorers, self.urls = list(scorers), list(urls)
        self.concurrency = sum(int(s.concurrency) for s in self.scorers)
        paths = {s.forced_path for s in self.scorers}
        if len(paths) != 1:
            raise ValueError(
                f"the URLs of one arm measure teacher forcing on different paths: {sorted(paths)}"
            )
        self.forced_path = paths.pop()
        """The URLs' own (one engine's: attach mode refuses an arm of mixed engines)."""

    def shard_of(self, key: str) -> int:
        return shard_index(key, len(self.scorers))

    def _on(self, key: str) -> Scorer:
        return self.scorers[self.shard_of(key)]

    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        # keyed by context alone: all choices of a question land on one server's prompt cache
        return await self._on(context).loglikelihood(context, continuation)

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        """A question's choices on one URL, in one request where its engine batches them."""
        return await self._on(context).loglikelihood_many(context, continuations)

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """A document's positions on one URL, keyed by its ids (a rerun sends it to the same one)."""
        return await self._on(repr(list(tokens))).token_distributions(tokens, start=start, top_k=top_k)

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """A prompt's greedy generation on one URL, keyed by its ids as ``token_distributions``."""
        scorer = self._on(repr(list(prompt)))
        return await scorer.decode_distributions(prompt, max_tokens=max_tokens, top_k=top_k)

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        return await self._on(prompt).generate(prompt, gen)

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return await self._on(_messages_key(payload.get("messages"))).chat(payload)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return await self._on(_messages_key(messages)).render_chat(messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self._on(text).tokenize(text)

    async def detokenize(self, tokens: list[int]) -> str:
        return await self._on(repr(tokens)).detokenize(tokens)

    async def context_length(self) -> int | None:
        """The smallest any URL reports (an item may go to any of them); None if one does not say."""
        lengths = await asyncio.gather(*(s.context_length() for s in self.scorers))
        known = [n for n in lengths if n]
        return min(known) if known and len(known) == len(lengths) else None

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.scorers))


def _messages_key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)


async def preflight_all(scorer: Scorer, *, server: str, chat: bool = True) -> PreflightReport:
    """Preflight every URL (each can be misconfigured on its own) and require one tokenizer; an
    arm behind a gateway through it, then its workers' probe (engines/gateway)."""
    if isinstance(scorer, GatewayScorer):
        return await scorer.preflight(server=server, chat=chat)
    if not isinstance(scorer, ShardedScorer):
        return await preflight(scorer, server=server, chat=chat)
    reports = await asyncio.gather(
        *(
            preflight(s, server=f"{server} ({url})", chat=chat)
            for s, url in zip(scorer.scorers, scorer.urls, strict=True)
        )
    )
    prints = {url: r.tokenizer_fingerprint for url, r in zip(scorer.urls, reports, strict=True)}
    if len(set(prints.values())) > 1:
        raise PreflightError(
            f"the {server} URLs tokenize differently ({prints}), so an item's prompt depends on its URL",
            fix=f"attach only replicas of one deployment to the {server}; drop the odd URL",
        )
    merged = PreflightReport(tokenizer_fingerprint=reports[0].tokenizer_fingerprint)
    for url, report in zip(scorer.urls, reports, strict=True):
        merged.checks += [{**c, "url": url} for c in report.checks]
    return merged
