"""Async HTTP to one OpenAI-compatible server: bounded concurrency, retries, and death detection.

Retries cover what a healthy server does under load (5xx, timeouts, dropped connections).
Before each retry the server process is checked: a dead server is reported at once with its
log tail instead of being retried into a pile of per-item errors.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from evalgate.errors import InfraError

__all__ = ["HttpClient", "RequestFailed", "RetryPolicy"]


class RequestFailed(InfraError):
    """One request failed after all retries (the item is recorded with this error)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 600.0


class HttpClient:
    """A pooled async client for one server. ``alive`` is polled to tell death from a hiccup."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        concurrency: int,
        retry: RetryPolicy | None = None,
        alive: Callable[[], bool] | None = None,
        on_dead: Callable[[], Exception] | None = None,
        seed: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._alive = alive or (lambda: True)
        self._on_dead = on_dead
        self._sem = asyncio.Semaphore(max(1, concurrency))
        self._rng = random.Random(seed)  # jitter only; seeded so test doubles see a fixed schedule
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_connections = max(4, concurrency * 2)
        # aiohttp, not httpx: on an instant server httpx costs ~1.2 ms of CPU per request against
        # aiohttp's ~0.2 ms (benchmarks/harness_overhead.py). Made lazily: it needs a running loop.
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.retry.timeout_s, connect=10.0),
                connector=aiohttp.TCPConnector(limit=self._max_connections),
            )
        return self._http

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def post(self, path: str, payload: dict[str, Any]) -> Any:
        return await self.request("POST", path, payload)

    async def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        last = ""
        for attempt in range(self.retry.attempts):
            async with self._sem:
                try:
                    async with self._session().request(method, self.base_url + path, json=payload) as resp:
                        if resp.status < 400:
                            return await resp.json(content_type=None)
                        body = (await resp.text(errors="replace"))[:300]
                except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
                    last = f"{type(exc).__name__}: {exc}".rstrip(": ")
                else:
                    last = f"HTTP {resp.status} from {path}: {body}"
                    if resp.status < 500 and resp.status not in (408, 429):
                        raise RequestFailed(
                            f"the server rejected a request ({last})",
                            fix="this is a client/engine mismatch, not load: check the engine flags",
                        )
            if not self._alive():
                raise self._on_dead() if self._on_dead else RequestFailed("the server died", fix="")
            if attempt + 1 < self.retry.attempts:
                delay = min(self.retry.max_backoff_s, self.retry.backoff_s * 2**attempt)
                await asyncio.sleep(delay * (0.5 + self._rng.random()))
        if not self._alive():
            raise self._on_dead() if self._on_dead else RequestFailed("the server died", fix="")
        raise RequestFailed(
            f"{method} {path} failed {self.retry.attempts} times: {last}",
            fix="the item is recorded with this error; rerun with --resume to retry it",
        )
