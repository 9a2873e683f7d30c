"""A server that speaks SGLang's HTTP protocol in front of a real llama-server, for CPU tests.

Every number comes from the real model behind it: ``/generate`` prompt logprobs are computed
by forcing the prompt's remaining tokens with a token-id grammar (the trick of
evalgate/engines/llamacpp.py) and laid out as SGLang lays them out (SGLang 0.5.23:
``input_token_logprobs`` from ``logprob_start_len`` on, the first entry ``None``). It takes
SGLang's launch flags, so ``SGLangEngine`` can start it in place of ``sglang.launch_server``:

    python tests/sglang_shim.py --upstream http://127.0.0.1:8080 --upstream-key K \\
        --model-path M --host 127.0.0.1 --port 30000 --api-key KEY [other sglang flags]

Known gaps: only ``max_new_tokens: 0`` on ``/generate`` (prompt scoring, what evalgate sends),
and ``skip_special_tokens`` on ``/detokenize`` is not emulated (llama-server renders them).
``/flush_cache`` erases llama-server's slots, which llama-server allows only with --slot-save-path.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["build_app", "main"]

UPSTREAM: web.AppKey[str] = web.AppKey("upstream")
UPSTREAM_HEADERS: web.AppKey[dict[str, str]] = web.AppKey("upstream_headers")
SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session")
SETTINGS: web.AppKey[dict[str, Any]] = web.AppKey("settings")
STATS: web.AppKey[dict[str, Any]] = web.AppKey("stats")


def _pick(value: Any, i: int, default: Any) -> Any:
    """SGLang's batch convention: a per-request value is a scalar for all, or a list by index."""
    if isinstance(value, list):
        return value[i] if i < len(value) else default
    return default if value is None else value


async def _up(request: web.Request, path: str, payload: dict[str, Any] | None = None) -> Any:
    app = request.app
    method = "GET" if payload is None else "POST"
    async with app[SESSION].request(
        method, app[UPSTREAM] + path, json=payload, headers=app[UPSTREAM_HEADERS]
    ) as resp:
        if resp.status >= 400:
            raise web.HTTPBadGateway(text=f"llama-server {path}: HTTP {resp.status} {await resp.text()}")
        return await resp.json(content_type=None)


@web.middleware
async def _auth(request: web.Request, handler: Any) -> web.StreamResponse:
    """SGLang's rule: /health* is open, everything else needs ``Authorization: Bearer KEY``."""
    key = request.app[SETTINGS].get("api_key")
    if key and not request.path.startswith("/health"):
        if request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
    return await handler(request)


async def health(request: web.Request) -> web.Response:
    try:
        async with request.app[SESSION].get(request.app[UPSTREAM] + "/health") as resp:
            return web.Response(status=200 if resp.status == 200 else 503)
    except aiohttp.ClientError:
        return web.Response(status=503)


async def server_info(request: web.Request) -> web.Response:
    """Shaped like SGLang's: server args (api_key and launch command included, as SGLang does)."""
    props = await _up(request, "/props")
    n_ctx = int((props.get("default_generation_settings") or {}).get("n_ctx", 0))
    slots = int(props.get("total_slots", 1))
    settings: dict[str, Any] = request.app[SETTINGS]
    tokens = n_ctx * slots
    info = {
        **settings,
        "launch_command": " ".join(sys.argv),
        "status": "ready",
        "max_total_num_tokens": tokens,
        "max_req_input_len": n_ctx,
        "internal_states": [{"memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": tokens}}],
        "version": "shim (llama-server " + str(props.get("build_info", "?")) + ")",
    }
    return web.json_response(info)


async def flush_cache(request: web.Request) -> web.Response:
    """Erase llama-server's slot caches (it needs --slot-save-path for that); SGLang answers plain text."""
    request.app[STATS]["flushes"] += 1
    try:
        for slot in await _up(request, "/slots"):
            await _up(request, f"/slots/{slot['id']}?action=erase", {})
    except web.HTTPException as exc:
        return web.Response(text=f"Flush cache failed: {exc.text}\n", status=400)
    return web.Response(text="Cache flushed.\nPlease check backend logs for more details.\n")


async def _forced_logprobs(request: web.Request, ids: list[int], start: int, top: int) -> dict[str, Any]:
    """SGLang's meta_info for prompt scoring: entries for ids[start:], the first one None."""
    forced = ids[start + 1 :]
    entries: list[list[Any]] = [[None, ids[start], None]]
    tops: list[Any] = [None]
    if forced:
        payload = {
            "prompt": ids[: start + 1],
            "max_tokens": len(forced),
            "temperature": 0.0,
            "logprobs": max(1, top),
            "n_probs": max(1, top),
            "grammar": "root ::= " + " ".join(f"<[{t}]>" for t in forced),
            "cache_prompt": True,
        }
        data = await _up(request, "/v1/completions", payload)
        content = data["choices"][0]["logprobs"]["content"]
        if [int(c["id"]) for c in content] != forced:
            raise web.HTTPBadGateway(text="llama-server did not follow the forced tokens")
        for c in content:
            entries.append([float(c["logprob"]), int(c["id"]), None])
            tops.append([[float(t["logprob"]), int(t["id"]), None] for t in c.get("top_logprobs", [])[:top]])
    meta: dict[str, Any] = {"input_token_logprobs": entries, "output_token_logprobs": []}
    if top > 0:
        meta["input_top_logprobs"] = tops
        meta["output_top_logprobs"] = []
    return meta


async def generate(request: web.Request) -> web.Response:
    body = await request.json()
    batched = isinstance(body.get("text"), list) or (
        isinstance(body.get("input_ids"), list)
        and body["input_ids"]
        and isinstance(body["input_ids"][0], list)
    )
    if body.get("input_ids") is not None:
        prompts = body["input_ids"] if batched else [body["input_ids"]]
    else:
        texts = body["text"] if batched else [body["text"]]
        prompts = [
            (await _up(request, "/tokenize", {"content": t, "add_special": True}))["tokens"] for t in texts
        ]
    request.app[STATS]["generate_batches"].append(len(prompts))

    async def one(i: int, ids: list[int]) -> dict[str, Any]:
        params = _pick(body.get("sampling_params"), i, {}) or {}
        if int(params.get("max_new_tokens", 128)) != 0:
            raise web.HTTPBadRequest(text="the shim serves prompt scoring only (max_new_tokens 0)")
        meta: dict[str, Any] = {}
        if _pick(body.get("return_logprob"), i, False):
            start = int(_pick(body.get("logprob_start_len"), i, -1))
            top = int(_pick(body.get("top_logprobs_num"), i, 0))
            if start >= 0:
                meta = await _forced_logprobs(request, [int(t) for t in ids], start, top)
            else:
                meta = {"input_token_logprobs": [], "output_token_logprobs": []}
        meta.update(
            {
                "id": uuid.uuid4().hex,
                "finish_reason": {"type": "length", "length": 0},
                "prompt_tokens": len(ids),
                "completion_tokens": 0,
                "cached_tokens": 0,
            }
        )
        return {"text": "", "output_ids": [], "meta_info": meta}

    outs = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
    return web.json_response(list(outs) if batched else outs[0])


async def tokenize(request: web.Request) -> web.Response:
    body = await request.json()
    if body.get("messages") is not None:
        template = {"messages": body["messages"], **({"tools": body["tools"]} if body.get("tools") else {})}
        prompt = (await _up(request, "/apply-template", template))["prompt"]
        tokens = (await _up(request, "/tokenize", {"content": prompt, "add_special": False}))["tokens"]
        return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": -1})
    add = bool(body.get("add_special_tokens", True))
    texts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    lists = [(await _up(request, "/tokenize", {"content": t, "add_special": add}))["tokens"] for t in texts]
    if isinstance(body["prompt"], list):
        return web.json_response({"tokens": lists, "count": [len(x) for x in lists], "max_model_len": -1})
    return web.json_response({"tokens": lists[0], "count": len(lists[0]), "max_model_len": -1})


async def detokenize(request: web.Request) -> web.Response:
    tokens = (await request.json())["tokens"]
    if tokens and isinstance(tokens[0], list):
        texts = [(await _up(request, "/detokenize", {"tokens": t}))["content"] for t in tokens]
        return web.json_response({"text": texts})
    return web.json_response({"text": (await _up(request, "/detokenize", {"tokens": tokens}))["content"]})


async def passthrough(request: web.Request) -> web.Response:
    """OpenAI-compatible routes: llama-server answers these itself (tools via its --jinja parser)."""
    return web.json_response(await _up(request, request.path, await request.json()))


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATS])


def build_app(
    upstream: str, *, upstream_key: str | None, api_key: str | None, settings: dict[str, Any] | None = None
) -> web.Application:
    app = web.Application(middlewares=[_auth])
    app[UPSTREAM] = upstream.rstrip("/")
    app[UPSTREAM_HEADERS] = {"Authorization": f"Bearer {upstream_key}"} if upstream_key else {}
    app[SETTINGS] = {**(settings or {}), "api_key": api_key}
    app[STATS] = {"flushes": 0, "generate_batches": []}

    async def session_ctx(app: web.Application) -> Any:
        app[SESSION] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session_ctx)
    for path in ("/health", "/health_generate"):
        app.router.add_get(path, health)
    for path in ("/server_info", "/get_server_info"):
        app.router.add_get(path, server_info)
    app.router.add_route("*", "/flush_cache", flush_cache)
    app.router.add_post("/generate", generate)
    for prefix in ("", "/v1"):
        app.router.add_post(prefix + "/tokenize", tokenize)
        app.router.add_post(prefix + "/detokenize", detokenize)
    app.router.add_post("/v1/completions", passthrough)
    app.router.add_post("/v1/chat/completions", passthrough)
    app.router.add_get("/shim/stats", stats)
    return app


def _sglang_settings(extra: list[str], model_path: str | None) -> dict[str, Any]:
    """SGLang-style flags as /server_info names them (``--kv-cache-dtype X`` -> kv_cache_dtype)."""
    out: dict[str, Any] = {"model_path": model_path}
    i = 0
    while i < len(extra):
        if extra[i].startswith("--"):
            key = extra[i][2:].replace("-", "_")
            if i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                out[key] = extra[i + 1]
                i += 2
                continue
            out[key] = True
        i += 1
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="llama-server base URL")
    parser.add_argument("--upstream-key", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--model-path", default=None)
    args, extra = parser.parse_known_args(argv)
    app = build_app(
        args.upstream,
        upstream_key=args.upstream_key,
        api_key=args.api_key,
        settings=_sglang_settings(extra, args.model_path),
    )
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
