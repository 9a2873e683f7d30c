"""A per-server cache of ``/tokenize`` answers (``TokenCache``), kept apart from the answer checks
of ``_scoring`` so each module stays one concept."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable

__all__ = ["TokenCache"]


class TokenCache:
    """Token ids per text for one server, cached, since few-shot contexts repeat per choice.

    The cache holds the request in flight, so the choices of one item, scored concurrently, share
    one ``/tokenize`` of their context instead of each sending its own. A failure is not kept.
    Finished entries are bounded (least recently used go first): a long-context run tokenizes
    every fitted 32k-token prompt, and an unbounded cache would hold gigabytes of ids."""

    def __init__(
        self,
        fetch: Callable[[str], Awaitable[list[int]]],
        *,
        max_entries: int = 4096,
        max_tokens: int = 2_000_000,
    ) -> None:
        self._fetch = fetch
        self._futures: OrderedDict[str, asyncio.Future[list[int]]] = OrderedDict()
        self._max_entries = max_entries
        self._max_tokens = max_tokens
        self._held = 0  # token ids held by finished entries

    def __len__(self) -> int:
        return len(self._futures)

    async def get(self, text: str) -> list[int]:
        fut = self._futures.get(text)
        if fut is None:
            fut = self._futures[text] = asyncio.ensure_future(self._fetch(text))
            fut.add_done_callback(lambda f, t=text: self._finished(t, f))
        else:
            self._futures.move_to_end(text)
        try:
            return await asyncio.shield(fut)  # one waiter cancelled must not cancel the others
        except Exception:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                self._drop(text, fut)
            raise

    def _finished(self, text: str, fut: asyncio.Future[list[int]]) -> None:
        if fut.cancelled() or fut.exception() is not None or self._futures.get(text) is not fut:
            return
        self._held += len(fut.result())
        if not self._over():
            return
        for key in list(self._futures):  # oldest first; requests in flight stay
            if not self._over():
                break
            if key != text and self._futures[key].done():
                self._drop(key, self._futures[key])

    def _over(self) -> bool:
        return len(self._futures) > self._max_entries or self._held > self._max_tokens

    def _drop(self, text: str, fut: asyncio.Future[list[int]]) -> None:
        if self._futures.get(text) is not fut:
            return
        del self._futures[text]
        if not fut.cancelled() and fut.exception() is None:
            self._held -= len(fut.result())

    async def aclose(self) -> None:
        """Cancel the requests still in flight and collect every outcome. When a run stops (a
        server died), their waiters are cancelled but the shielded requests are not: left alone,
        one would reopen the closed client's session and leave it unclosed."""
        pending = list(self._futures.values())
        self._futures.clear()
        self._held = 0
        for fut in pending:
            fut.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
