"""A server that speaks SGLang 0.5.23's HTTP protocol in front of a real llama-server, for CPU tests.

Every number comes from the real model behind it: ``/generate`` prompt logprobs are computed
by forcing the prompt's remaining tokens with a token-id grammar (the trick of
evalgate/engines/llamacpp) and laid out as SGLang lays them out (``input_token_logprobs`` from
``logprob_start_len`` on, the first entry ``None``). It takes SGLang's launch flags, so
``SGLangEngine`` can start it in place of ``sglang.launch_server``:

    python tests/helpers/sglang_shim.py --upstream http://127.0.0.1:8080 --upstream-key K \\
        --model-path M --host 127.0.0.1 --port 30000 --api-key KEY [other sglang flags]

It cannot drift from SGLang where evalgate depends on it (``sglang_shim_protocol``): every
request is validated with SGLang's own request models and answered 400 in SGLang's error shape
when it fails them; ``/server_info`` carries ``startup_time`` and ``launch_command``; chat returns
no ``tool_calls`` without ``--tool-call-parser`` (the calls stay in the text); the checkpoint's
generation_config.json fills the sampling parameters a chat leaves out unless
``--sampling-defaults openai``; a trailing assistant message becomes a user message without
``continue_final_message``; ``/flush_cache`` answers 400 while requests run (after waiting
``?timeout=S`` for idle) and needs ``--admin-api-key`` when one is set (401); the startup log
has SGLang's KV-cache and KV-scale lines.

Known gaps: only ``max_new_tokens: 0`` on ``/generate`` (prompt scoring, what evalgate sends),
and ``skip_special_tokens`` on ``/detokenize`` is not emulated (llama-server renders them).
``/flush_cache`` erases llama-server's slots, which llama-server allows only with --slot-save-path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its sibling module
import sglang_shim_protocol as sgl

__all__ = ["build_app", "main"]

_sglang_settings = sgl.sglang_settings

UPSTREAM: web.AppKey[str] = web.AppKey("upstream")
UPSTREAM_HEADERS: web.AppKey[dict[str, str]] = web.AppKey("upstream_headers")
SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session")
SETTINGS: web.AppKey[dict[str, Any]] = web.AppKey("settings")
STATS: web.AppKey[dict[str, Any]] = web.AppKey("stats")
MODELS: web.AppKey[sgl.SGLang] = web.AppKey("models")
STATE: web.AppKey[dict[str, Any]] = web.AppKey("state")
OPEN = ("/health", "/ready", "/metrics")  # utils/auth.py decide_request_auth: always allowed
ADMIN_OPTIONAL = ("/flush_cache",)  # http_server.py: @auth_level(AuthLevel.ADMIN_OPTIONAL)
BUSY = ("/generate", "/v1/completions", "/v1/chat/completions")


def _pick(value: Any, i: int, default: Any) -> Any:
    """SGLang's batch convention: a per-request value is a scalar for all, or a list by index."""
    if isinstance(value, list):
        return value[i] if i < len(value) else default
    return default if value is None else value


def _bad(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps(sgl.error_body(message)), content_type="application/json")


async def _up(request: web.Request, path: str, payload: dict[str, Any] | None = None) -> Any:
    """llama-server's answer; its 4xx is the request's fault (SGLang: 400), its 5xx a server error."""
    app = request.app
    method = "GET" if payload is None else "POST"
    async with app[SESSION].request(
        method, app[UPSTREAM] + path, json=payload, headers=app[UPSTREAM_HEADERS]
    ) as resp:
        if resp.status >= 400:
            text = f"llama-server {path}: HTTP {resp.status} {await resp.text()}"
            if resp.status < 500:
                raise _bad(text)
            body = sgl.error_body(text, status=500, type_="InternalServerError")
            raise web.HTTPInternalServerError(text=json.dumps(body), content_type="application/json")
        return await resp.json(content_type=None)


def _validated(request: web.Request, model: Any, body: Any) -> Any:
    """``body`` through one of SGLang's request models, or SGLang's 400."""
    try:
        return model.model_validate(body)
    except request.app[MODELS].validation_error as exc:
        raise _bad(sgl.validation_message(exc)) from None


@web.middleware
async def _auth(request: web.Request, handler: Any) -> web.StreamResponse:
    """utils/auth.py ``decide_request_auth``: health is open; admin-optional endpoints take the
    admin key when one is set (the API key is then not accepted); the rest take the API key."""
    settings = request.app[SETTINGS]
    if not request.path.startswith(OPEN):
        admin, key = settings.get("admin_api_key"), settings.get("api_key")
        needed = admin if request.path in ADMIN_OPTIONAL and admin else key
        if needed and request.headers.get("Authorization") != f"Bearer {needed}":
            return web.json_response({"error": "Unauthorized"}, status=401)
    if not request.path.startswith(BUSY):
        return await handler(request)
    state = request.app[STATE]
    state["running"] += 1
    try:
        return await handler(request)
    finally:
        state["running"] -= 1


async def health(request: web.Request) -> web.Response:
    try:
        async with request.app[SESSION].get(request.app[UPSTREAM] + "/health") as resp:
            return web.Response(status=200 if resp.status == 200 else 503)
    except aiohttp.ClientError:
        return web.Response(status=503)


async def server_info(request: web.Request) -> web.Response:
    """http_server.py ``server_info``: ``build_server_info`` (server args, ``launch_command``, the
    scheduler's init info, ``kv_events``) + ``startup_time``, ``internal_states``, ``version``."""
    settings: dict[str, Any] = request.app[SETTINGS]
    state = request.app[STATE]
    info = {
        **settings,
        "launch_command": state["launch_command"],
        "status": "ready",
        "max_total_num_tokens": state["tokens"],
        "max_req_input_len": state["context"],
        "kv_events": None,
        "startup_time": {
            "load_weight": 0.01,
            "kv_cache_allocation": 0.01,
            "scheduler_e2e": state["startup_s"],
        },
        "internal_states": [
            {
                "memory_usage": sgl.memory_usage(settings, state["checkpoint"], tokens=state["tokens"]),
                "startup_time": {"scheduler_e2e": state["startup_s"]},
            }
        ],
        "version": "0.5.23 (shim over llama-server " + state["build"] + ")",
        "frontend": "python",
    }
    return web.json_response(info)


async def flush_cache(request: web.Request) -> web.Response:
    """http_server.py ``flush_cache`` + flush_wrapper.py: waits up to ``?timeout=S`` for idle, then
    400 "Timed out waiting for idle state." (timeout 0 and busy: "Flush cache failed.")."""
    state = request.app[STATE]
    timeout = float(request.query.get("timeout", "0") or 0)
    deadline = time.monotonic() + timeout
    while state["running"] and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if state["running"]:
        request.app[STATS]["busy_flushes"] += 1
        text = "Timed out waiting for idle state." if timeout > 0 else "Flush cache failed.\n"
        return web.Response(text=text, status=400)
    request.app[STATS]["flushes"] += 1
    try:
        for slot in await _up(request, "/slots"):
            await _up(request, f"/slots/{slot['id']}?action=erase", {})
    except web.HTTPException as exc:
        return web.Response(text=f"Flush cache failed: {exc.text}\n", status=400)
    return web.Response(
        text="Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n"
    )


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
            raise web.HTTPInternalServerError(text="llama-server did not follow the forced tokens")
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
    problem = request.app[MODELS].generate_contract_error(body)
    if problem is not None:  # http_server.py generate_request: 400 {"error": contract_error}
        return web.json_response({"error": problem}, status=400)
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
            raise _bad("the shim serves prompt scoring only (max_new_tokens 0)")
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
    req = _validated(request, request.app[MODELS].tokenize, body)
    if req.messages is not None:
        template = {"messages": body["messages"], **({"tools": body["tools"]} if body.get("tools") else {})}
        prompt = (await _up(request, "/apply-template", template))["prompt"]
        tokens = (await _up(request, "/tokenize", {"content": prompt, "add_special": False}))["tokens"]
        return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": -1})
    add = bool(req.add_special_tokens)
    texts = req.prompt if isinstance(req.prompt, list) else [req.prompt]
    lists = [(await _up(request, "/tokenize", {"content": t, "add_special": add}))["tokens"] for t in texts]
    if isinstance(req.prompt, list):
        return web.json_response({"tokens": lists, "count": [len(x) for x in lists], "max_model_len": -1})
    return web.json_response({"tokens": lists[0], "count": len(lists[0]), "max_model_len": -1})


async def detokenize(request: web.Request) -> web.Response:
    tokens = _validated(request, request.app[MODELS].detokenize, await request.json()).tokens
    if tokens and isinstance(tokens[0], list):
        texts = [(await _up(request, "/detokenize", {"tokens": t}))["content"] for t in tokens]
        return web.json_response({"text": texts})
    return web.json_response({"text": (await _up(request, "/detokenize", {"tokens": tokens}))["content"]})


async def completions(request: web.Request) -> web.Response:
    body = await request.json()
    _validated(request, request.app[MODELS].completion, body)
    return web.json_response(await _up(request, request.path, body))


_SGLANG_ONLY = ("continue_final_message", "separate_reasoning", "stream_reasoning", "chat_template_kwargs")


async def chat(request: web.Request) -> web.Response:
    """serving_chat.py, as far as evalgate can tell: the model's text from llama-server, SGLang's
    sampling defaults and trailing-assistant rule, and calls only through a tool-call parser."""
    body = await request.json()
    req = _validated(request, request.app[MODELS].chat, body)
    settings = request.app[SETTINGS]
    messages, prefix = sgl.handle_last_assistant_message(list(body["messages"]), req.continue_final_message)
    if prefix is not None:
        messages = [*messages, {"role": "assistant", "content": prefix}]  # llama-server continues it
    defaults = sgl.generation_config(settings.get("model_path"), settings.get("sampling_defaults", "model"))
    params = sgl.sampling_params(req, defaults)
    upstream = {k: v for k, v in body.items() if k not in _SGLANG_ONLY}
    upstream.update(messages=messages, **params)
    upstream["repeat_penalty"] = upstream.pop("repetition_penalty")
    request.app[STATS]["chats"].append(
        {"roles": [m.get("role") for m in messages], "continued": prefix is not None, "sampling": params}
    )
    data = await _up(request, "/v1/chat/completions", upstream)
    if not settings.get("tool_call_parser"):
        for choice in data.get("choices") or []:
            _unparse(choice, required=req.tool_choice == "required")
    return web.json_response(data)


def _unparse(choice: dict[str, Any], *, required: bool) -> None:
    """No --tool-call-parser: SGLang never fills ``tool_calls`` (``_tool_call_parsing_active``); with
    tool_choice=required its output is a JSON array of calls in the text, else the model's own
    markup (here Hermes' <tool_call>)."""
    message = choice.get("message") or {}
    calls = message.pop("tool_calls", None) or []
    if not calls:
        return
    parsed = [(c["function"]["name"], json.loads(c["function"].get("arguments") or "{}")) for c in calls]
    if required:
        text = json.dumps([{"name": n, "parameters": a} for n, a in parsed])
    else:
        text = "".join(
            f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in parsed
        )
    message["content"] = (message.get("content") or "") + text
    if choice.get("finish_reason") == "tool_calls":
        choice["finish_reason"] = "stop"


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATS])


def build_app(
    upstream: str,
    *,
    upstream_key: str | None,
    api_key: str | None,
    settings: dict[str, Any] | None = None,
    models: sgl.SGLang,
    state: dict[str, Any] | None = None,
) -> web.Application:
    app = web.Application(middlewares=[_auth])
    app[UPSTREAM] = upstream.rstrip("/")
    app[UPSTREAM_HEADERS] = {"Authorization": f"Bearer {upstream_key}"} if upstream_key else {}
    app[SETTINGS] = {**(settings or {}), "api_key": api_key}
    app[STATS] = {"flushes": 0, "busy_flushes": 0, "generate_batches": [], "chats": []}
    app[MODELS] = models
    app[STATE] = {
        "running": 0,
        "tokens": 0,
        "context": 0,
        "checkpoint": {},
        "launch_command": "",
        "build": "?",
    }
    app[STATE].update(state or {})

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
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/shim/stats", stats)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--upstream", required=True, help="llama-server base URL")
    parser.add_argument("--upstream-key", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--admin-api-key", default=None)
    parser.add_argument("--model-path", default=None)
    args, extra = parser.parse_known_args(argv)
    try:
        models = sgl.load_sglang(sgl.sglang_path())
    except ImportError as exc:
        sys.exit(f"the shim validates requests with SGLang's own models, which do not import ({exc}): run "
                 "`evalgate setup --parsers`, or set EVALGATE_SGLANG_PARSER_PATH")  # fmt: skip
    settings = sgl.sglang_settings(extra, args.model_path)
    settings.setdefault("sampling_defaults", "model")  # SGLang's default (arg_groups/fields/serving.py)
    settings.setdefault("kv_cache_dtype", "auto")
    if args.admin_api_key:
        settings["admin_api_key"] = args.admin_api_key
    state = sgl.startup(args.upstream, args.upstream_key, settings)
    # server_args.py: the raw argv, as asked for; SGLang redacts only watermark keys, so the API keys
    # stay in it (the llama-server key behind the shim is not SGLang's, and is masked)
    state["launch_command"] = " ".join(
        "***" if prev == "--upstream-key" else a for prev, a in zip(["", *sys.argv], sys.argv, strict=False)
    )
    app = build_app(
        args.upstream, upstream_key=args.upstream_key, api_key=args.api_key, settings=settings, models=models,
        state=state,
    )  # fmt: skip
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
