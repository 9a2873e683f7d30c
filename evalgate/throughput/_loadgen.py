"""The built-in load generator: one streamed completion, and one closed-loop concurrency level.

Timing is read from the stream itself (``perf_counter`` at each server-sent event), the way
SGLang's and vLLM's bench_serving measure TTFT and ITL, so the numbers compare with theirs.
Nothing here raises for what a server does: rejections, queueing, errors and cut-off requests
become counts in the level's row, which is what the report needs to show a capacity limit.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import numpy as np

if TYPE_CHECKING:
    from evalgate.store.throughput import BenchSettings

__all__ = ["Req", "level", "one_request", "payload", "synthetic_text"]

_REJECTED = frozenset({429, 503, 507})  # the server said "too busy" or "no memory": a capacity limit
_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wise owls count stars above a quiet river".split()
)


@dataclass
class Req:
    """One request's timeline; a request still running when its level ends stays 'cut'."""

    t_start: float
    ttft: float | None = None
    stamps: list[float] = field(default_factory=list)
    tokens: int | None = None
    outcome: str = "cut"
    error: str = ""


def _event(line: bytes) -> dict[str, Any] | None:
    text = line.decode("utf-8", errors="replace").strip()
    if not text.startswith(("data:", "error:")):
        return None
    body = text.split(":", 1)[1].strip()
    if body == "[DONE]":
        return {"_done": True}
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return {"error": body[:200]}
    if text.startswith("error:") and isinstance(data, dict) and "error" not in data:
        data = {"error": data}
    return data if isinstance(data, dict) else None


def _is_token(event: Mapping[str, Any]) -> bool:
    choices = event.get("choices") or []
    if not choices:
        return False  # vLLM/SGLang send usage in a final chunk with no choices
    first = choices[0]
    return (
        bool(first.get("text") or (first.get("delta") or {}).get("content"))
        or first.get("finish_reason") is None
    )


async def one_request(
    session: aiohttp.ClientSession, url: str, payload: dict[str, Any], req: Req, queue_timeout: float
) -> None:
    """Stream one completion into ``req``; never raises for what the server does."""
    first_deadline = req.t_start + queue_timeout

    async def post() -> aiohttp.ClientResponse:
        return await session.post(url, json=payload, allow_redirects=False)

    # a timeout before the first token (the request sat in the queue) or a connection error, at
    # the POST or while streaming, ends the request the same way
    try:
        resp = await asyncio.wait_for(post(), timeout=queue_timeout)
        async with resp:
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:200]
                memory = "out of memory" in body.lower()
                req.outcome = "rejected" if resp.status in _REJECTED or memory else "error"
                req.error = f"HTTP {resp.status}: {body}"
                return
            events = 0
            while True:
                if req.ttft is None:
                    line = await asyncio.wait_for(
                        resp.content.readline(), timeout=max(0.0, first_deadline - time.perf_counter())
                    )
                else:
                    line = await resp.content.readline()
                if not line:
                    break
                event = _event(line)
                if event is None:
                    continue
                if event.get("_done"):
                    break
                if event.get("error"):
                    req.outcome, req.error = "error", f"stream error: {json.dumps(event['error'])[:200]}"
                    return
                if _is_token(event):
                    now = time.perf_counter()
                    req.ttft = req.ttft if req.ttft is not None else now - req.t_start
                    req.stamps.append(now)
                    events += 1
                usage = event.get("usage") or {}
                timings = event.get("timings") or {}  # llama-server
                reported = usage.get("completion_tokens") or timings.get("predicted_n")
                if reported:
                    req.tokens = int(reported)
    except asyncio.TimeoutError:
        req.outcome = "queued"
        return
    except aiohttp.ClientError as exc:
        req.outcome, req.error = "error", f"{type(exc).__name__}: {exc}"
        return
    req.tokens = req.tokens if req.tokens is not None else events
    req.outcome = "ok" if req.ttft is not None else "error"
    req.error = "" if req.ttft is not None else "the stream ended without a token"


def _pct(values: Sequence[float], q: float) -> float | None:
    """Percentile in milliseconds (numpy's linear interpolation, as bench_serving uses)."""
    return round(float(np.percentile(values, q)) * 1000.0, 2) if values else None


def _summary(
    concurrency: int, planned: int, reqs: list[Req], elapsed: float, s: BenchSettings
) -> dict[str, Any]:
    counts = Counter(r.outcome for r in reqs)
    tokens = sum((r.tokens or 0) if r.outcome == "ok" else len(r.stamps) for r in reqs)
    ttfts = [r.ttft for r in reqs if r.ttft is not None]
    itls = [b - a for r in reqs for a, b in zip(r.stamps, r.stamps[1:], strict=False)]
    status, reason = "ok", ""
    if counts["rejected"] or counts["queued"]:
        status = "limit"
        reason = (
            f"{counts['rejected']} rejected, {counts['queued']} with no first token within "
            f"{s.queue_timeout_s:g} s, of {len(reqs)} requests"
        )
    elif not counts["ok"] and counts["cut"]:
        status, reason = "limit", f"no request finished within {s.max_seconds_per_level:g} s"
    elif counts["error"]:
        status = "errors"
        reason = next(r.error for r in reqs if r.outcome == "error")
    return {
        "concurrency": concurrency,
        "status": status,
        "reason": reason,
        "planned": planned,
        "requests": len(reqs),
        "ok": counts["ok"],
        "errors": counts["error"],
        "rejected": counts["rejected"],
        "queued": counts["queued"],
        "cut": counts["cut"],
        "duration_s": round(elapsed, 3),
        "output_tokens": tokens,
        "output_tok_s": round(tokens / elapsed, 2) if elapsed > 0 else None,
        "request_s": round(counts["ok"] / elapsed, 3) if elapsed > 0 else None,
        "ttft_p50_ms": _pct(ttfts, 50),
        "ttft_p99_ms": _pct(ttfts, 99),
        "itl_p50_ms": _pct(itls, 50),
        "itl_p99_ms": _pct(itls, 99),
    }


def payload(prompts: list[int] | None, i: int, s: BenchSettings, model: str | None) -> dict[str, Any]:
    """Request ``i``: greedy, ``ignore_eos`` and ``max_tokens`` so every arm generates the same length."""
    if prompts:
        # Unique per request across the whole sweep: llama-server's prompt cache and SGLang's radix
        # cache would otherwise serve a repeated prompt without prefill. The first tokens spell
        # ``i`` in base len(pool), least significant first, so two prompts share at most a few.
        pool = sorted(set(prompts))
        digits, n = [], i
        for _ in range(4 if len(pool) > 1 else 0):
            digits.append(pool[n % len(pool)])
            n //= len(pool)
        k = i % len(prompts)
        prompt: Any = (digits + prompts[k:] + prompts[:k])[: s.input_len]
    else:
        prompt = f"{i} " + synthetic_text(s.input_len - 1, s.seed + i)
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": s.output_len,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": s.seed,
    }
    if model:
        body["model"] = model
    return body


async def level(
    session: aiohttp.ClientSession,
    url: str,
    prompts: list[int] | None,
    s: BenchSettings,
    c: int,
    model: str | None,
    first_index: int = 0,
) -> dict[str, Any]:
    """One closed-loop level: ``c`` workers share ``requests_for(c)`` requests until the time cap.

    Request indices start at ``first_index`` so that no prompt repeats across the sweep's levels."""
    planned = s.requests_for(c)
    reqs: list[Req] = []
    indices = iter(range(first_index, first_index + planned))  # shared by the workers: each sent once
    t0 = time.perf_counter()
    deadline = t0 + s.max_seconds_per_level

    async def worker() -> None:
        for i in indices:
            if time.perf_counter() >= deadline:
                return
            req = Req(time.perf_counter())
            reqs.append(req)
            await one_request(session, url, payload(prompts, i, s, model), req, s.queue_timeout_s)

    tasks = [asyncio.ensure_future(worker()) for _ in range(c)]
    _, pending = await asyncio.wait(tasks, timeout=s.max_seconds_per_level)
    for t in pending:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return _summary(c, planned, reqs, time.perf_counter() - t0, s)


def synthetic_text(n_words: int, seed: int) -> str:
    """Seeded filler words: the same prompt on every arm and every run."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n_words)))
