"""A reverse proxy that makes a real server look like one with a decode-only fault (an FP8 KV cache
whose scales never reached the generation kernels): every prompt-side logprob passes exact, and
the distributions reported for GENERATED tokens change from the ``from_position``-th generated
token on. Everything else passes through as the server answered it.

What changes, per generated position from ``from_position`` on: probability mass moves from the
best alternative to the second, ``shift`` of half their gap (p1 - d, p2 + d with d = shift *
(p1 - p2) / 2), so the order, the ids and the sum stay as they were; the generated token's own
logprob follows its entry (a greedy token is the best, or tied with it). A list of one
alternative loses ``shift / 2`` of its probability. The tokens themselves are not touched: what a
client sees is the same generation with different distributions, as an FP8-KV decode reads from
outside before it flips a token.

- SGLang's ``POST /generate``: ``meta_info.output_top_logprobs`` and ``output_token_logprobs``
  (``input_*`` untouched), for one result or a batch.
- vLLM's ``POST /v1/completions``: ``choices[].logprobs`` past the echoed prompt (with ``echo``
  and a token-id prompt, its first ``len(prompt)`` positions are the prompt's: untouched; a text
  prompt with ``echo`` is passed through whole); ``prompt_logprobs`` untouched.

A streamed answer, a non-JSON body and an error status pass through unchanged. It listens on
127.0.0.1 and forwards only to a loopback upstream; request headers (the API key included) are
forwarded as sent.

    with decode_proxy(handle.base_url, from_position=4) as proxy:
        scorer = engine.scorer(dataclasses.replace(handle, base_url=proxy.url))
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.helpers.background import background_apps

__all__ = ["DecodeProxy", "decode_proxy", "shift_top"]

_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
)
_DROP_BACK = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)


@dataclass
class DecodeProxy:
    """One running proxy: its URL, and what it did."""

    upstream: str
    from_position: int
    shift: float
    url: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request passed on, in order."""
    perturbed: int = 0
    """Generated positions whose distribution was changed."""


def shift_top(top: list[tuple[int, float]], shift: float) -> list[tuple[int, float]]:
    """``top`` (best first, (id, logprob)) with ``shift`` of half the gap between the best and the
    second moved from the best to the second; a list of one loses ``shift / 2`` of its mass."""
    if not top:
        return top
    p = [math.exp(v) for _, v in top]
    if len(p) == 1:
        p[0] *= 1 - shift / 2
    else:
        d = shift * (p[0] - p[1]) / 2
        p[0], p[1] = p[0] - d, p[1] + d
    return [(t, math.log(q)) for (t, _), q in zip(top, p, strict=True)]


def _perturb_sglang(out: dict[str, Any], proxy: DecodeProxy) -> bool:
    meta = out.get("meta_info")
    if not isinstance(meta, dict):
        return False
    tops, entries = meta.get("output_top_logprobs"), meta.get("output_token_logprobs")
    if not isinstance(tops, list) or not isinstance(entries, list):
        return False
    changed = False
    for i in range(proxy.from_position, min(len(tops), len(entries))):
        top = tops[i]
        if not top:
            continue
        new = shift_top([(t[1], t[0]) for t in top], proxy.shift)
        tops[i] = [[lp, tid, old[2]] for (tid, lp), old in zip(new, top, strict=True)]
        own = dict(new).get(entries[i][1])
        if own is not None:
            entries[i] = [own, entries[i][1], entries[i][2]]
        proxy.perturbed += 1
        changed = True
    return changed


def _perturb_completion(choice: dict[str, Any], skip: int, proxy: DecodeProxy) -> bool:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("top_logprobs"), list):
        return False
    tokens, values, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp["top_logprobs"]
    changed = False
    for i in range(skip + proxy.from_position, min(len(tops), len(values), len(tokens))):
        if not tops[i]:
            continue
        ranked = sorted(
            tops[i].items(), key=lambda kv: -kv[1]
        )  # best first; the dict's own order kept on ties
        new = dict(shift_top(ranked, proxy.shift))
        tops[i] = {k: new[k] for k in tops[i]}
        if tokens[i] in new:
            values[i] = new[tokens[i]]
        proxy.perturbed += 1
        changed = True
    return changed


def _perturb(path: str, sent: Any, data: Any, proxy: DecodeProxy) -> bool:
    """Change ``data`` in place where it reports generated tokens; whether anything changed."""
    if path == "/generate":
        outs = data if isinstance(data, list) else [data]
        return any([_perturb_sglang(o, proxy) for o in outs if isinstance(o, dict)])
    if path == "/v1/completions" and isinstance(data, dict) and isinstance(data.get("choices"), list):
        sent = sent if isinstance(sent, dict) else {}
        prompt = sent.get("prompt")
        prompts = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else [prompt]
        changed = False
        for choice in data["choices"]:
            if not isinstance(choice, dict):
                continue
            skip = 0
            if sent.get("echo"):
                index = int(choice.get("index", 0)) // max(1, int(sent.get("n") or 1))
                ids = prompts[index] if index < len(prompts) else None
                if not isinstance(ids, list):
                    continue  # a text prompt echoed: where its tokens end is not known here
                skip = len(ids)
            changed = _perturb_completion(choice, skip, proxy) or changed
        return changed
    return False


def _app(proxy: DecodeProxy) -> web.Application:
    app = web.Application(client_max_size=256 * 2**20)
    session: dict[str, aiohttp.ClientSession] = {}

    async def start(_: web.Application) -> None:
        session["s"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900))

    async def stop(_: web.Application) -> None:
        await session["s"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        proxy.requests.append((request.method, request.path))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with session["s"].request(
            request.method,
            proxy.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            allow_redirects=False,
        ) as resp:
            raw = await resp.read()
            back = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP_BACK}
            status, kind = resp.status, resp.content_type
        if status == 200 and kind == "application/json" and request.method == "POST":
            try:
                sent, data = json.loads(body or b"null"), json.loads(raw)
            except ValueError:
                sent = data = None
            if data is not None and _perturb(request.path, sent, data, proxy):
                raw = json.dumps(data).encode()
        return web.Response(status=status, body=raw, headers=back)

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


@contextmanager
def decode_proxy(upstream: str, *, from_position: int, shift: float = 0.5) -> Iterator[DecodeProxy]:
    """A proxy in front of ``upstream`` (a loopback URL) that changes the distributions of the
    generated tokens from ``from_position`` (0-based) on, by ``shift`` in (0, 1); stopped when the
    block ends."""
    if urlsplit(upstream).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the proxy forwards only to a loopback server, not {upstream}")
    if from_position < 0 or not 0 < shift < 1:
        raise ValueError(f"from_position={from_position} must be >= 0 and shift={shift} in (0, 1)")
    proxy = DecodeProxy(upstream.rstrip("/"), from_position, shift)
    apps = background_apps()
    try:
        proxy.url = next(apps)(_app(proxy))
        yield proxy
    finally:
        apps.close()


def compare_through_proxy(
    handle: Any, data_dir: Path, run: Path, *, from_position: int, decode_tokens: int, limit: int
) -> tuple[int, dict[str, Any]]:
    """``evalgate compare`` with the baseline attached to ``handle``'s server and the candidate to
    the same server behind the proxy (a decode-only fault from ``from_position``), drift only:
    (exit code, verdict.json). The arms' keys come from the environment (EVALGATE_*_API_KEY)."""
    from evalgate.cli import main

    with decode_proxy(handle.base_url, from_position=from_position) as proxy:
        code = main(["compare", "--baseline-url", handle.base_url, "--candidate-url", proxy.url,
                     "--same-server-ok", "--suites", "drift", "--limit", str(limit), "--suite-opt",
                     f"drift.decode_tokens={decode_tokens}", "--data-dir", str(data_dir), "--out", str(run)])  # fmt: skip
    return code, json.loads((run / "verdict.json").read_text(encoding="utf-8"))


def assert_decode_block(code: int, verdict: dict[str, Any], *, onset: str) -> list[dict[str, Any]]:
    """The verdict of a decode-only fault: BLOCK on decode rows only, the prefill row's KL about 0,
    the reason naming the decode path and the bucket ``onset``; returns the candidate's rows."""
    rows = [r for r in verdict["drift"][0]["rows"] if r["pair"] == "candidate"]
    prefill = next(r for r in rows if r["path"] == "prefill" and r["measure"] == "kld")
    assert prefill["status"] != "block" and prefill["estimate"] < 1e-4, prefill
    blocked = [r for r in rows if r["status"] == "block"]
    assert code == 1 and blocked and all(r["path"] == "decode" for r in blocked), rows
    assert "decode-path mean KL" in verdict["reason"] and f"starts at positions {onset}" in verdict["reason"]
    return rows
