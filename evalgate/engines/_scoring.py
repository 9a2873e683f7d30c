"""What the HTTP scorers (llama.cpp, SGLang, vLLM) share, so that every engine tokenizes, splits
and reports a completion by the same rules and a difference between arms is the server's alone.
SGLang's and vLLM's scorers also share their batching of a question's choices (BatchScorer)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from evalgate.client import HttpClient, RetryPolicy
from evalgate.engines._launcher import ServerHandle
from evalgate.engines.api import LogLik, Scorer, Split
from evalgate.errors import PreflightError

__all__ = ["BatchScorer", "TokenCache", "completion_result", "lm_eval_split", "server_client"]


def server_client(
    handle: ServerHandle, *, concurrency: int, seed: int, retry: RetryPolicy | None = None
) -> HttpClient:
    """The client for one launched server: its key, and its log tail when a request finds it dead."""
    return HttpClient(
        handle.base_url,
        api_key=handle.api_key,
        concurrency=concurrency,
        retry=retry,
        alive=handle.alive,
        on_dead=handle.died,
        seed=seed,
    )


class TokenCache:
    """Token ids per text for one server, cached, since few-shot contexts repeat per choice.

    The cache holds the request in flight, so the choices of one item, scored concurrently, share
    one ``/tokenize`` of their context instead of each sending its own. A failure is not kept."""

    def __init__(self, fetch: Callable[[str], Awaitable[list[int]]]) -> None:
        self._fetch = fetch
        self._futures: dict[str, asyncio.Future[list[int]]] = {}

    async def get(self, text: str) -> list[int]:
        fut = self._futures.get(text)
        if fut is None:
            fut = self._futures[text] = asyncio.ensure_future(self._fetch(text))
        try:
            return await asyncio.shield(fut)  # one waiter cancelled must not cancel the others
        except Exception:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                self._futures.pop(text, None)
            raise


def lm_eval_split(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's rule: the context's trailing whitespace moves to the start of the continuation."""
    n_space = len(context) - len(context.rstrip())
    if n_space:
        return context[:-n_space], context[-n_space:] + continuation
    return context, continuation


class BatchScorer(Scorer):
    """A scorer whose server scores a question's choices in ONE request (SGLang, vLLM), so its
    prefix cache computes the shared context once.

    A subclass names its engine (``label``), tokenizes through its server (``_tokenize``, without
    special tokens) and scores a batch (``_score_splits``: one result per split, in order)."""

    label: ClassVar[str]

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, retry: RetryPolicy | None = None
    ) -> None:
        self.handle = handle
        self.concurrency = concurrency
        self.http = server_client(handle, concurrency=concurrency, seed=seed, retry=retry)
        self._tokens = TokenCache(self._tokenize)

    async def aclose(self) -> None:
        await self.http.__aexit__()

    async def _tokenize(self, text: str) -> list[int]:
        raise NotImplementedError

    async def _score_splits(self, splits: list[Split]) -> list[LogLik]:
        raise NotImplementedError

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens (lm-eval's default); one request in flight per text."""
        return await self._tokens.get(text)

    async def split_tokens(self, context: str, continuation: str) -> Split:
        """lm-eval's split: the continuation is what follows the context's tokens in the tokenized
        whole (after ``lm_eval_split``); both are tokenized at once."""
        context, continuation = lm_eval_split(context, continuation)
        whole, ctx = await asyncio.gather(self.tokenize(context + continuation), self.tokenize(context))
        return ctx, whole[len(ctx) :]

    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        """(sum logprob of continuation given context, all greedy, n continuation tokens)."""
        return (await self.loglikelihood_many(context, [continuation]))[0]

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        """Every continuation of one context in ONE ``_score_splits`` call (a question's choices);
        an empty continuation scores (0.0, True, 0) and is not sent."""
        splits = await asyncio.gather(*(self.split_tokens(context, c) for c in continuations))
        todo = [i for i, (_, cont) in enumerate(splits) if cont]
        results: list[LogLik] = [(0.0, True, 0)] * len(splits)
        if not todo:
            return results
        if any(not splits[i][0] for i in todo):
            raise PreflightError(
                f"cannot score a continuation with an empty context on {self.label}",
                fix="the first prompt token has no logprob; give the suite a non-empty context",
            )
        for i, result in zip(todo, await self._score_splits([splits[i] for i in todo]), strict=True):
            results[i] = result
        return results


def completion_result(data: dict[str, Any], stop: Sequence[str]) -> dict[str, Any]:
    """Text and token counts of a ``/v1/completions`` answer, the text cut at the first stop string.

    Servers trim their own stop strings, but not alike (llama-server takes only four), so every
    engine cuts here too and the arms' texts end by the same rule."""
    text = str(data["choices"][0]["text"])
    for s in stop:
        if s and s in text:
            text = text[: text.index(s)]
    usage = data.get("usage") or {}
    return {
        "text": text,
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
    }
