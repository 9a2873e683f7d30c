"""Async HTTP to one OpenAI-compatible server: bounded concurrency, retries, and death detection.

Retries cover what a healthy server does under load (5xx, timeouts, dropped connections).
Before each retry the server process is checked: a dead server is reported at once with its
log tail instead of being retried into a pile of per-item errors, and a server that times out on
every try is reported as stalled (``ServerStalled``, exit 3) instead of costing every item the
same wait. An error body is kept only as a short excerpt with the API key, URL credentials and
the request's own text masked (``evalgate.redact``): a server may echo what it was sent.

Redirects are never followed: an answer must come from the server under test, and a 3xx to the
other arm would score that server's answers as this one's. A body is read up to
``MAX_ANSWER_BYTES``, its Content-Length checked first: a runaway or hostile body is an error,
never a MemoryError.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from evalgate.errors import InfraError, InvalidResponse
from evalgate.redact import BODY_EXCERPT, env_secrets, payload_texts, redact, redact_url

__all__ = [
    "GATEWAY_PATHS",
    "MAX_ANSWER_BYTES",
    "ROUTED_TO",
    "ROUTING_KEY",
    "GatewayRoute",
    "HttpClient",
    "RequestFailed",
    "RetryPolicy",
    "ServerStalled",
    "UnlistedWorker",
    "routing_key",
]

_MAX_BODY = 65536
"""Bytes of an error body read (then masked and cut to an excerpt)."""

MAX_ANSWER_BYTES = 64 * 2**20
"""Bytes of a successful answer read at most: a 300 000-character generation with logprobs is a
few MiB; more is a runaway or hostile server, refused before it fills memory."""


GATEWAY_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/generate"})
"""The scoring paths smg's regular HTTP router proxies to a worker it picks (model_gateway/src/
server.rs route table; every other path is a 404 there, /tokenize and /props included)."""

ROUTING_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("evalgate_routing_key", default=None)
"""The item a request belongs to, set by ``GatewayScorer`` around each call: a gateway client sends
it as ``X-SMG-Routing-Key`` so that smg's consistent_hashing policy sends every request of an item
to one worker. A context variable, not an argument: it crosses the engines' scorers untouched, and
each asyncio task (one item) sees only its own."""

ROUTED_TO: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "evalgate_routed_to", default=None
)
"""The list the compare loop sets around one item: a gateway client appends the worker smg named
for each of the item's answers, so the record says where it was scored."""

ROUTED_HEADER = "x-smg-routed-worker-id"
"""smg names the worker that served a proxied request in this response header (header_utils.rs):
its URL, with an ``@<rank>`` suffix for a data-parallel worker; under PD the decode worker."""
ROUTED_SHOWN = 80
"""Characters of a routed-worker header an error quotes (masked first): the server's text."""


def routing_key(key: str) -> str:
    """A key as smg reads it: at most 128 bytes of header-safe text, so a digest of the item's key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class GatewayRoute:
    """How one client reaches an arm behind smg: the scoring paths (``GATEWAY_PATHS``) go to the
    gateway, with the routing key and the served model name smg requires in every body; the
    tokenizer's paths, which smg does not proxy, go to ``direct_url`` (a worker: all of an arm's
    workers are checked identical). ``routed`` counts the worker smg reported for each answer."""

    direct_url: str
    model: str
    routed: Counter[str] = field(default_factory=Counter)
    listed: frozenset[str] = frozenset()
    """The worker URLs the arm's gateway lists (``GatewayScorer`` sets them): an answer smg names
    any other worker for is refused (``UnlistedWorker``), so nothing but a listed URL is ever
    counted or stored. Empty: not known yet, and the header is stored masked and cut."""
    arm: str = ""
    """The arm behind the gateway, for the refusal's words (set at its preflight)."""

    def named(self, header: str | None) -> str | None:
        """The listed worker ``header`` names (its URL, or URL@rank), else None."""
        whole, (url, _, rank) = (header or "").rstrip("/"), (header or "").rpartition("@")
        if whole in self.listed:
            return whole
        ranked = url.rstrip("/") in self.listed and rank.isascii() and rank.isdigit() and len(rank) <= 6
        return url.rstrip("/") if ranked else None


class RequestFailed(InfraError):
    """One request failed after all retries (the item is recorded with this error)."""


class ServerStalled(InfraError):
    """Every try of a request timed out: the server accepts connections but does not answer."""


class UnlistedWorker(InvalidResponse):
    """A gateway's answer came from a worker its listing does not name (or it named none): the
    answer may be another arm's server's, so it is never scored. ``worker`` is the header as
    shown (masked, cut)."""

    def __init__(self, cause: str, *, fix: str = "", worker: str = "") -> None:
        super().__init__(cause, fix=fix)
        self.worker = worker


@dataclass(frozen=True)
class RetryPolicy:
    """How long one request may take and how often it is tried (``[client]`` in evalgate.toml).
    The defaults give a stalled server up about two minutes after its first request."""

    attempts: int = 2
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 60.0


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
        gateway: GatewayRoute | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.gateway = gateway
        self.retry = retry or RetryPolicy()
        self._alive = alive or (lambda: True)
        self._on_dead = on_dead
        self._sem = asyncio.Semaphore(max(1, concurrency))
        self._rng = random.Random(seed)  # jitter only; seeded so test doubles see a fixed schedule
        self._key = api_key or ""
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_connections = max(4, concurrency * 2)
        # aiohttp, not httpx: on an instant server httpx costs ~1.2 ms of CPU per request against
        # aiohttp's ~0.2 ms (benchmarks/harness_overhead.py). Made lazily: it needs a running loop.
        self._http: aiohttp.ClientSession | None = None
        self._closed = False

    def _session(self) -> aiohttp.ClientSession:
        if self._closed:  # a session opened now would never be closed ("Unclosed client session")
            raise RequestFailed(
                f"the client of {redact_url(self.base_url)} is closed; nothing was sent", fix=""
            )
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
        self._closed = True
        if self._http is not None:
            await self._http.close()

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def post(self, path: str, payload: dict[str, Any]) -> Any:
        return await self.request("POST", path, payload)

    async def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        last = ""
        timeouts = 0
        for attempt in range(self.retry.attempts):
            async with self._sem:
                try:
                    url, sent, headers = self._address(path, payload)
                    async with self._session().request(
                        method, url, json=sent, headers=headers, allow_redirects=False
                    ) as resp:
                        if 300 <= resp.status < 400:
                            raise self._redirected(method, path, resp, payload)
                        if resp.status < 400:
                            if self.gateway is not None and path in GATEWAY_PATHS:
                                self._routed(self.gateway, resp.headers.get(ROUTED_HEADER), method, path)
                            return _json(await self._read_capped(method, path, resp))
                        raw = await resp.content.read(_MAX_BODY)
                        body = self._clean(raw.decode("utf-8", errors="replace"), payload)
                except asyncio.TimeoutError:
                    timeouts += 1
                    last = f"no answer within {self.retry.timeout_s:g} s"
                except aiohttp.ClientError as exc:
                    last = self._clean(f"{type(exc).__name__}: {exc}".rstrip(": "), payload)
                else:
                    last = f"HTTP {resp.status} from {path}: {body}"
                    if resp.status < 500 and resp.status not in (408, 429):
                        raise RequestFailed(
                            f"the server rejected a request ({last})",
                            fix=_gateway_fix(body)
                            if self.gateway is not None
                            else "this is a client/engine mismatch, not load: check the engine flags",
                        )
            if not self._alive():
                raise self._on_dead() if self._on_dead else RequestFailed("the server died", fix="")
            if attempt + 1 < self.retry.attempts:
                delay = min(self.retry.max_backoff_s, self.retry.backoff_s * 2**attempt)
                await asyncio.sleep(delay * (0.5 + self._rng.random()))
        if not self._alive():
            raise self._on_dead() if self._on_dead else RequestFailed("the server died", fix="")
        if timeouts == self.retry.attempts:
            where = redact_url(self.base_url)
            raise ServerStalled(
                f"the server at {where} stopped answering: {method} {path} timed out "
                f"{timeouts} time(s) after {self.retry.timeout_s:g} s",
                fix="check the server (overloaded, hung, or still loading?); if its answers are just slow, "
                "raise [client] timeout_s in evalgate.toml or --request-timeout; continue with "
                "--resume RUN_DIR",
            )
        raise RequestFailed(
            f"{method} {path} failed {_times(self.retry.attempts)}: {last}",
            fix="the item is recorded with this error; rerun with --resume to retry it",
        )

    def _address(
        self, path: str, payload: dict[str, Any] | None
    ) -> tuple[str, dict[str, Any] | None, Mapping[str, str] | None]:
        """(URL, body, extra headers) of one request: as given, or routed as ``GatewayRoute`` says."""
        route = self.gateway
        if route is None:
            return self.base_url + path, payload, None
        if path not in GATEWAY_PATHS:
            return route.direct_url.rstrip("/") + path, payload, None
        # smg refuses an OpenAI body without "model" (400); /generate it fills in itself
        openai = path.startswith("/v1/") and payload is not None and "model" not in payload
        body = {"model": route.model, **payload} if openai and payload is not None else payload
        key = ROUTING_KEY.get()
        return self.base_url + path, body, {"X-SMG-Routing-Key": routing_key(key)} if key else None

    def _routed(self, route: GatewayRoute, header: str | None, method: str, path: str) -> None:
        """Count the worker smg named for one answer, and add it to the item's ``ROUTED_TO``: a
        listed worker's URL, never the header's own text (a server's word, which may echo the
        request's ``Authorization``). An unlisted or missing worker is ``UnlistedWorker``."""
        worker = route.named(header)
        shown = redact(header or "", secrets=[self._key, *env_secrets()], limit=ROUTED_SHOWN)
        if worker is None and route.listed:
            said = f"{ROUTED_HEADER}: {shown!r}" if header else f"no {ROUTED_HEADER} header"
            arm = f"the {route.arm}'s gateway" if route.arm else "the gateway"
            raise UnlistedWorker(
                f"{arm} {redact_url(self.base_url)} answered {method} {path} from a worker it does not list "
                f"({said}), so the answer may be another server's (the other arm's); it is never scored",
                fix="every answer must come from a worker the gateway's GET /workers lists: check its "
                "routing (and that it is smg, which names the worker that answered)",
                worker=shown or "none",
            )
        worker = worker or shown or "?"
        route.routed[worker] += 1
        seen = ROUTED_TO.get()
        if seen is not None:
            seen.append(worker)

    def _redirected(
        self, method: str, path: str, resp: aiohttp.ClientResponse, payload: dict[str, Any] | None
    ) -> RequestFailed:
        """A 3xx: never followed (module docstring), so the item is an error naming where it pointed."""
        where = self._clean(redact_url(resp.headers.get("Location", "")), payload) or "no Location"
        return RequestFailed(
            f"{redact_url(self.base_url)} answered {method} {path} with a redirect (HTTP {resp.status} to "
            f"{where}); a scoring request never follows one, since the answer must "
            "come from the server under test",
            fix="give the URL of the server itself (not a proxy or alias that redirects to another server)",
        )

    async def _read_capped(self, method: str, path: str, resp: aiohttp.ClientResponse) -> bytes:
        """The body, refused past ``MAX_ANSWER_BYTES``: by its Content-Length before reading a byte,
        or once the chunks read (chunked or compressed bodies) pass the cap."""
        cap = MAX_ANSWER_BYTES
        size = resp.content_length
        if size is None or size <= cap:
            body = bytearray()
            async for chunk in resp.content.iter_chunked(2**16):
                body += chunk
                if len(body) > cap:
                    break
            else:
                return bytes(body)
        told = (
            f"{size} bytes (its Content-Length)" if size is not None and size > cap else f"over {cap} bytes"
        )
        raise RequestFailed(
            f"{redact_url(self.base_url)} answered {method} {path} with a body of {told}, past the cap of "
            f"{cap} bytes ({cap / 2**20:g} MiB) on one answer; no more of it was read",
            fix="check the server (a runaway answer, or a proxy sending something else); "
            "the item is recorded with this error",
        )

    def _clean(self, text: str, payload: dict[str, Any] | None) -> str:
        """An excerpt of a server's text with this client's key, URL credentials and whatever the
        request carried (an echo of the prompt) masked."""
        return redact(text, secrets=[self._key], private=payload_texts(payload), limit=BODY_EXCERPT)


def _gateway_fix(body: str) -> str:
    """What to do about a 4xx from a gateway: smg parsing a token-id prompt is its policy's doing."""
    if "StringOrArray" in body or "untagged enum" in body:
        return (
            "the gateway parses each request as OpenAI text (smg's cache_aware or prefix_hash policy, or "
            "retries on) and refuses the token-id prompts evalgate scores with: start smg with --policy "
            "consistent_hashing --disable-retries, which forwards a body as sent"
        )
    return "this is a client/gateway mismatch, not load: check the gateway's and the workers' flags"


def _json(body: bytes) -> Any:
    """A body as JSON (None when blank, as aiohttp's ``json()``); nesting too deep for the parser is
    a ValueError like any other body that is not JSON, never a RecursionError."""
    text = body.decode("utf-8").strip()
    try:
        return json.loads(text) if text else None
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"
