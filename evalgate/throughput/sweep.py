"""Load sweep: output tok/s, request/s, TTFT and ITL per concurrency level, for each arm.

Accuracy says what a quantization costs; this says what it buys. The load is closed-loop: at
level N, N workers each send their next request as soon as the previous one ends. Prompts are
fixed synthetic token ids (each request rotated, so no prefix cache serves it), and generation
is greedy with ``ignore_eos``, so every request makes exactly ``output_len`` tokens.

Bounds: each level sends at most ``max_requests_per_level`` requests and lasts at most
``max_seconds_per_level`` (requests still running then are cancelled); a request with no first
token within ``queue_timeout_s`` is abandoned. Requests go only to loopback servers that evalgate
launched or to URLs the user typed, and redirects are never followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from evalgate.engines.llamacpp import PROPS, total_slots
from evalgate.engines.sglang import run_levels, server_limits
from evalgate.errors import ConfigError, InfraError
from evalgate.store.manifest import Manifest
from evalgate.store.throughput import DEFAULT_LEVELS, BenchSettings, throughput_doc, write_throughput
from evalgate.throughput._loadgen import Req, level, one_request, payload, synthetic_text

__all__ = ["DEFAULT_LEVELS", "BenchSettings", "Target", "capped_levels", "check_target", "finish_compare",
           "measure_handle", "run_sweep", "sweep"]  # fmt: skip


@dataclass(frozen=True)
class Target:
    """One arm's server. ``explicit`` marks a URL the user typed; any other must be loopback."""

    name: str
    base_url: str
    api_key: str | None = None
    explicit: bool = False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_target(target: Target) -> None:
    """Refuse to load-test anything but loopback, unless the user named the URL themselves."""
    parts = urlsplit(target.base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{target.base_url!r} is not an http(s) URL", fix="e.g. http://127.0.0.1:30000")
    if not target.explicit and not _is_loopback(parts.hostname):
        raise ConfigError(
            f"refusing to load-test {target.base_url}: evalgate only sends load to loopback servers "
            "it launched or to URLs given on the command line",
            fix="pass the URL explicitly with --baseline-url / --candidate-url",
        )


async def _json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    try:
        async with session.request(method, url, json=body, allow_redirects=False) as r:
            return await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


async def _prompt_ids(
    session: aiohttp.ClientSession, base: str, model: str | None, s: BenchSettings
) -> list[int] | None:
    """Exactly ``input_len`` token ids of fixed text, via the server's own /tokenize."""
    text = synthetic_text(s.input_len, s.seed)
    for body in ({"content": text, "add_special": False}, {"prompt": text, "model": model}):
        data = await _json(session, "POST", base + "/tokenize", body)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if tokens and all(isinstance(t, int) for t in tokens):
            return (tokens * (s.input_len // len(tokens) + 1))[: s.input_len]
    return None


async def _probe(session: aiohttp.ClientSession, base: str, api_key: str | None) -> dict[str, Any]:
    models = await _json(session, "GET", base + "/v1/models")
    if models is None:
        raise InfraError(
            f"{base} did not answer GET /v1/models",
            fix="check the URL and that the server is up; set EVALGATE_API_KEY if it needs a key",
        )
    data = (models.get("data") or []) if isinstance(models, dict) else []
    props = await _json(session, "GET", base + PROPS)  # llama-server reports its slots there
    limits = await asyncio.to_thread(server_limits, base, api_key)  # an SGLang server says more
    slots = total_slots(props)
    if slots is None:
        slots = limits["slots"]
    return {
        "model": data[0].get("id") if data and isinstance(data[0], dict) else None,
        "slots": int(slots) if slots else None,
        "capacity": limits["capacity"],
    }


def capped_levels(levels: Sequence[int], slots: int | None) -> list[int]:
    """The sweep's levels, those above the server's parallel slots capped to it (deduplicated)."""
    return sorted({min(c, slots) if slots else c for c in levels})


async def sweep(target: Target, settings: BenchSettings) -> dict[str, Any]:
    """Probe one server and run every level; stop at the first level that hits a capacity limit.

    Bounded: a few probe requests (30 s), one warm-up (60 s), then per level at most
    ``requests_for(c)`` requests within ``max_seconds_per_level``."""
    check_target(target)
    settings.validate()
    base = target.base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    top = max(settings.levels)
    timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=None)
    # A fresh connection per request (as bench_serving does): servers close keep-alive connections
    # after a count or an idle time (cpp-httplib, uvicorn), and a reused dead one fails the request.
    connector = aiohttp.TCPConnector(limit=top + 4, force_close=True)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout, connector=connector) as session:
        probe = await asyncio.wait_for(_probe(session, base, target.api_key), timeout=30)
        levels = capped_levels(settings.levels, probe["slots"])
        result: dict[str, Any] = {
            "name": target.name,
            "url": base,
            "model": probe["model"],
            "slots": probe["slots"],
            "levels_requested": list(settings.levels),
            "levels_run": levels,
            "limit": None,
            "limit_reason": "",
            "capacity": probe["capacity"],
        }
        if settings.generator == "sglang":
            rows = await asyncio.to_thread(run_levels, target, settings, levels, probe["model"])
            result["prompt"] = {"mode": "sglang.bench_serving random-ids", "input_len": settings.input_len}
        else:
            prompts = await asyncio.wait_for(_prompt_ids(session, base, probe["model"], settings), timeout=30)
            result["prompt"] = {
                "mode": "token ids" if prompts else "text (about input_len words)",
                "input_len": settings.input_len,
            }
            url = base + "/v1/completions"
            warm = Req(time.perf_counter())
            warm_body = {**payload(prompts, 0, settings, probe["model"]), "max_tokens": 2}
            await asyncio.wait_for(
                one_request(session, url, warm_body, warm, settings.queue_timeout_s), timeout=60
            )
            if warm.outcome != "ok":
                raise InfraError(
                    f"the {target.name} server failed the warm-up request ({warm.outcome}: {warm.error})",
                    fix="check that the server serves /v1/completions with streaming and the API key",
                )
            rows, sent = [], 1  # index 0 was the warm-up
            for c in levels:
                rows.append(await level(session, url, prompts, settings, c, probe["model"], sent))
                sent += settings.requests_for(c)
                if rows[-1]["status"] == "limit":
                    break
        for row in rows:
            if row["status"] == "limit" and result["limit"] is None:
                result["limit"], result["limit_reason"] = row["concurrency"], row["reason"]
        done = {r["concurrency"] for r in rows}
        limit_reason = (
            f"not run: capacity limit reached at concurrency {result['limit']}"
            if result["limit"] is not None
            else "not run: the load generator stopped at an error"
        )
        rows += [_skipped(c, limit_reason) for c in levels if c not in done]
        result["levels"] = rows
        return result


def _skipped(c: int, reason: str) -> dict[str, Any]:
    return {"concurrency": c, "status": "skipped", "reason": reason, "output_tok_s": None}


def run_sweep(target: Target, settings: BenchSettings) -> dict[str, Any]:
    """``sweep`` from synchronous code (the CLI and the compare runner)."""
    return asyncio.run(sweep(target, settings))


def measure_handle(
    handle: Any,
    settings: BenchSettings | None = None,
    *,
    name: str | None = None,
    variant: str | None = None,
    capacity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sweep a server evalgate launched (a ``ServerHandle``); ``capacity`` is the KV pool its
    engine read (``Engine.capacity``), kept where the server did not report one to the sweep."""
    settings = settings or BenchSettings()
    target = Target(name or handle.name, handle.base_url, handle.api_key, explicit=False)
    result = run_sweep(target, settings)
    if result.get("capacity") is None:
        result["capacity"] = capacity
    result["command"] = list(handle.command or [])  # the key is already masked
    result["variant"] = variant
    return result


def finish_compare(
    run_dir: Path, manifest: Manifest, settings: BenchSettings | None = None
) -> dict[str, Any]:
    """For ``compare --with-throughput``: move each arm's sweep into the manifest's ``throughput``
    (the report renders it) and write throughput.json beside the manifest."""
    before = (manifest.throughput or {}).get("arms") or {}  # a resumed run keeps earlier sweeps
    arms: dict[str, Any] = {}
    for arm in ("baseline", "candidate"):
        info = manifest.arms.get(arm)
        arms[arm] = (info.throughput if info else None) or before.get(arm)
    doc = throughput_doc(arms, settings or BenchSettings())
    write_throughput(Path(run_dir), doc)
    manifest.throughput_finished(doc)
    return doc
