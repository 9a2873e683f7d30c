"""Attach to servers that are already running (a staging cluster behind sgl-router, llama-servers
someone else started): nothing is launched, and nothing is taken on trust.

evalgate did not start these servers, so it cannot read their settings from a command line. It
reads them back instead (``/v1/models`` plus ``/props``, ``/server_info`` or ``/version``),
refuses an arm whose URLs serve different things, and gives the caller the comparable settings
so a pair that differs beyond quantization is refused as it would be for launched servers.
Items are sharded stickily over an arm's URLs: the choices of one question share a context, so
they go to one server (its prompt cache stays warm), and the assignment is reproducible.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalgate.engines._attach import (
    PROTOCOLS,
    _key_env,
    _require_one_deployment,
    _servers,
    api_key_for,
    attached_settings,
    check_attached_pair,
    fingerprint,
    normalize_url,
    require_attached_pair,
)
from evalgate.engines.base import ServerHandle
from evalgate.errors import ConfigError, PreflightError
from evalgate.preflight import PreflightReport, preflight
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "PROTOCOLS",
    "AttachedHandle",
    "ExternalEngine",
    "ShardedScorer",
    "api_key_for",
    "attached_settings",
    "check_attached_pair",
    "fingerprint",
    "normalize_url",
    "preflight_all",
    "require_attached_pair",
    "shard_index",
]

# Scorers of the GPU engines, imported only when an arm needs one (their modules may be absent).
SCORERS = {
    "sglang": ("evalgate.engines.sglang", "SGLangScorer"),
    "vllm": ("evalgate.engines.vllm", "VLLMScorer"),
}
DEFAULT_GPU_CONCURRENCY = 32


def shard_index(key: str, n: int) -> int:
    """Stable across processes and runs (unlike ``hash``), so a rerun sends each item to the same URL."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % n


class ShardedScorer:
    """One scorer per URL; every call about the same prompt goes to the same URL."""

    def __init__(self, scorers: Sequence[Any], urls: Sequence[str]) -> None:
        if not scorers or len(scorers) != len(urls):
            raise ValueError("one scorer per URL")
        self.scorers, self.urls = list(scorers), list(urls)
        self.concurrency = sum(int(getattr(s, "concurrency", 1)) for s in self.scorers)

    def shard_of(self, key: str) -> int:
        return shard_index(key, len(self.scorers))

    def _on(self, key: str) -> Any:
        return self.scorers[self.shard_of(key)]

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        # keyed by context alone: all choices of a question land on one server's prompt cache
        return await self._on(context).loglikelihood(context, continuation)

    async def loglikelihood_many(
        self, context: str, continuations: Sequence[str]
    ) -> list[tuple[float, bool, int]]:
        """A question's choices in one call where the shard batches them (SGLang), else one by one."""
        shard = self._on(context)
        if hasattr(shard, "loglikelihood_many"):
            return await shard.loglikelihood_many(context, continuations)
        return list(await asyncio.gather(*(shard.loglikelihood(context, c) for c in continuations)))

    async def generate(
        self, prompt: str, *, max_tokens: int, stop: list[str], temperature: float = 0.0, seed: int = 0
    ) -> dict[str, Any]:
        return await self._on(prompt).generate(
            prompt, max_tokens=max_tokens, stop=stop, temperature=temperature, seed=seed
        )

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return await self._on(_messages_key(payload.get("messages"))).chat(payload)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return await self._on(_messages_key(messages)).render_chat(messages)

    async def tokenize(self, text: str) -> list[int]:
        return await self._on(text).tokenize(text)

    async def detokenize(self, tokens: list[int]) -> str:
        return await self._on(repr(tokens)).detokenize(tokens)

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.scorers))


def _messages_key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)


async def preflight_all(scorer: Any, *, server: str, chat: bool = True) -> PreflightReport:
    """Preflight every URL (each can be misconfigured on its own) and require one tokenizer."""
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


@dataclass
class AttachedHandle(ServerHandle):
    """A server evalgate did not start: alive while its port accepts connections."""

    urls: list[str] = field(default_factory=list)
    protocol: str = ""

    def alive(self) -> bool:
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=2.0):
                return True
        except OSError:
            return False


def _scorer_class(protocol: str) -> Any:
    if protocol == "llamacpp":
        from evalgate.engines.llamacpp import LlamaCppScorer

        return LlamaCppScorer
    module, name = SCORERS[protocol]
    try:
        return getattr(importlib.import_module(module), name)
    except (ModuleNotFoundError, AttributeError) as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name != module:
            raise
        raise ConfigError(
            f"attaching to a {protocol} server needs {module}.{name}, which this evalgate does not have",
            fix="attach to llama-server URLs, or upgrade evalgate",
        ) from exc


class ExternalEngine:
    """Servers that are already running, given as URLs per arm; launching only checks them."""

    name = "external"

    def __init__(
        self,
        urls: Mapping[str, Sequence[str]],
        *,
        protocol: str = "auto",
        concurrency: int | None = None,
        timeout_s: float = 10.0,
        deterministic: bool = False,
    ) -> None:
        if protocol not in ("auto", *PROTOCOLS):
            raise ConfigError(
                f"unknown protocol {protocol!r}", fix=f"use auto or one of {', '.join(PROTOCOLS)}"
            )
        self.urls = {arm: [normalize_url(u) for u in us] for arm, us in urls.items()}
        for arm in ("baseline", "candidate"):
            if not self.urls.get(arm):
                raise ConfigError(f"no URL given for the {arm}", fix=f"pass --{arm}-url http://HOST:PORT")
        self.protocol = protocol
        self.concurrency = concurrency
        """Requests in flight per URL; None: llama-server's slots, or 32 for SGLang and vLLM."""
        self.timeout_s = timeout_s
        self.deterministic = deterministic
        """One request at a time per URL and, on llama-server, no prompt cache (see --deterministic)."""
        self._info: dict[str, dict[str, Any]] = {}

    def urls_for(self, arm: str) -> list[str]:
        return self.urls.get(arm) or self.urls["baseline"]  # aa: the baseline's servers again

    def attach_info(self, arm: str) -> dict[str, Any]:
        """Check every URL of ``arm`` answers and serves one deployment; the arm's ``handle.info``."""
        urls = self.urls_for(arm)
        key = api_key_for(arm)
        env = _key_env(arm)
        fps = [
            fingerprint(u, api_key=key, protocol=self.protocol, key_env=env, timeout_s=self.timeout_s)
            for u in dict.fromkeys(urls)
        ]
        _require_one_deployment(arm, fps)
        protocol = fps[0]["protocol"]
        _scorer_class(protocol)  # an unsupported protocol fails before any item runs
        info = {"attached": True, "protocol": protocol, "urls": urls, "servers": {f["url"]: f for f in fps}}
        self._info[arm] = info
        return info

    def version(self) -> str:
        infos = [self._info.get(a) or self.attach_info(a) for a in ("baseline", "candidate")]
        found = [f"{i['protocol']} {_servers(i)[0].get('version') or '?'}" for i in infos]
        return found[0] if found[0] == found[1] else f"baseline: {found[0]}; candidate: {found[1]}"

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        if variant.args or variant.env:
            raise ConfigError(
                f"variant {variant.name!r} sets engine flags or env, but evalgate does not start attached servers",
                fix="start the servers with those settings yourself, and drop args/env from the variant",
            )
        # The URLs are not settings: the comparable ones are read back at attach (attached_settings).
        args: tuple[tuple[str, str | None], ...] = (("--attach", None), ("--protocol", self.protocol))
        return LaunchSpec(self.name, variant.model or f"attached:{variant.name}", args, (), frozenset())

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, *, name: str, log_dir: Path) -> Iterator[AttachedHandle]:
        """Start nothing: check the arm's URLs and yield a handle; nothing to stop on exit."""
        info = self.attach_info(name)
        urls = info["urls"]
        log_path = log_dir / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            for fp in info["servers"].values():
                log.write(
                    f"attached {fp['url']}: {fp['protocol']} {fp.get('version')} models={fp['models']}\n"
                )
        yield AttachedHandle(
            name,
            urls[0],
            api_key_for(name) or "",
            ["attach", f"--protocol={self.protocol}", *urls],
            log_path,
            info=info,
            urls=list(urls),
            protocol=info["protocol"],
        )

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> ShardedScorer:
        servers = handle.info["servers"]
        urls = [str(u) for u in handle.info["urls"]]
        scorers = []
        for url in urls:
            fp = servers[url]
            shard = AttachedHandle(**{**vars(handle), "name": f"{handle.name} ({url})", "base_url": url})
            shard.info, shard.urls, shard.protocol = fp, [url], fp["protocol"]
            extra = {"cache_prompt": False} if self.deterministic and fp["protocol"] == "llamacpp" else {}
            scorers.append(
                _scorer_class(fp["protocol"])(shard, concurrency=self._concurrency(fp), seed=seed, **extra)
            )
        return ShardedScorer(scorers, urls)

    def _concurrency(self, fp: Mapping[str, Any]) -> int:
        if self.deterministic:
            return 1
        if self.concurrency:
            return self.concurrency
        if fp["protocol"] == "llamacpp":
            return int(fp.get("total_slots") or 4)
        limit = (fp.get("server_args") or {}).get("max_running_requests")
        return min(int(limit or DEFAULT_GPU_CONCURRENCY), 256)
