"""A scripted stub of llama-server's HTTP API that misbehaves on purpose, for failure-path tests of
`evalgate compare` in attach mode (tests/gate/test_hostile.py). Never a stand-in for the real server.

It speaks enough of the dialect for attach mode and the preflight to accept it: ``/v1/models``,
``/props``, ``/health``, ``/tokenize`` and ``/detokenize`` (one token per character, id = code
point; ``bad_tokens`` spoils /tokenize only after the preflight's two /detokenize round trips), ``/apply-template``, and ``/v1/completions`` both for forced-token log-likelihoods (the
token-id grammar evalgate sends; every forced token scores -1) and for generation, plus
``/v1/chat/completions``. Its first ``grace`` scoring requests (the preflight's six probes) are
answered well; from then on it answers per ``mode`` (``MODES``). Every request is recorded
(path and JSON body) in ``seen``. Deterministic: no randomness, no clock (``delay_s`` only
slows every POST, so a test can stop a run while requests are in flight).

``python tests/helpers/hostile_server.py MODE [--delay S] [--answer TEXT]`` serves one stub in its own
process on a free loopback port and prints its URL: a server a test can kill like a real one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["MODES", "Hostile", "hostile_app"]

MODES = (
    "good",
    "http500",  # HTTP 500 for every third request (the same ones on every try), with a hostile body
    "invalid_json",  # HTTP 200 with a body that is not JSON
    "empty_body",  # HTTP 200 with nothing in it
    "nan",  # forced-token logprobs NaN
    "inf",  # +Infinity
    "neg_inf",  # -Infinity
    "positive",  # +0.5: not a log-probability
    "null_logprob",  # "logprob": null
    "missing_logprobs",  # a choice without "logprobs"
    "short_logprobs",  # one logprob fewer than the forced tokens
    "no_choices",  # "choices": []
    "empty_text",  # generation and chat answer ""
    "null_text",  # "text": null, chat "content": null
    "huge_text",  # 300 000 characters, finish_reason "length"
    "truncated",  # the usual answer, finish_reason "length"
    "script_text",  # markup, script and bidi controls as the answer
    "redirect",  # HTTP 307 to ``redirect_to`` (another server's same path)
    "huge_length",  # a Content-Length of 3 GiB, a few bytes sent, then the connection closed
    "padded_body",  # the usual answer, then ``pad_bytes`` of whitespace, chunked (no Content-Length)
    "bad_tokens",  # /tokenize answers ``bad_token`` as the first id once the preflight's round trip is done
)

SCRIPT = '<script>alert("x")</script>[/bold][red]\u202e\u2066 ]]> {{7}} <img src=x onerror=1>\u202c'
PROPS = {
    "default_generation_settings": {"n_ctx": 4096, "params": {"temperature": 0.8, "top_k": 40}},
    "total_slots": 8,
    "model_alias": "stub",
    "model_path": "/models/stub.gguf",
    "chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}",
    "build_info": "b6000-hostile",
}


@dataclass
class Hostile:
    """One stub server: its misbehaviour, its usual answer, and what it was sent."""

    mode: str = "good"
    answer: str = " The answer is 7."
    """Generation and chat text in the good modes."""
    grace: int = 6
    """Scoring requests answered well before ``mode`` applies (the preflight's probes)."""
    delay_s: float = 0.0
    """Seconds every POST waits before it is answered."""
    marker: str = ""
    """/props ``media_marker``, which llama-server draws at random per start (none when empty)."""
    answer_for: dict[str, str] = field(default_factory=dict)
    """Generation text per prompt (the last ``{"prompt"}`` key that ends the prompt), else ``answer``."""
    redirect_to: str = ""
    """``redirect``: the base URL its 307s point at (the path kept)."""
    pad_bytes: int = 2 * 2**20
    """``padded_body``: whitespace after the answer."""
    bad_token: Any = "7"
    """``bad_tokens``: what /tokenize answers in place of the first token id."""
    url: str = ""
    seen: list[tuple[str, Any]] = field(default_factory=list)
    scoring: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; one of {', '.join(MODES)}")

    def sent(self, path: str) -> list[Any]:
        """The JSON bodies of every request to ``path``."""
        return [body for p, body in self.seen if p == path]


def _forced(grammar: str) -> list[int]:
    return [int(t) for t in re.findall(r"<\[(\d+)\]>", grammar)]


def _text(prompt: Any) -> str:
    return "".join(map(chr, prompt)) if isinstance(prompt, list) else str(prompt)


def hostile_app(h: Hostile) -> web.Application:
    """The aiohttp app of stub ``h``."""

    def raw(body: str, status: int = 200) -> web.Response:
        return web.Response(text=body, status=status, content_type="application/json")

    def dump(data: Any) -> web.Response:
        return raw(json.dumps(data))  # allow_nan: NaN and Infinity go out as JSON-ish literals

    async def read(request: web.Request) -> Any:
        body = await request.json() if request.can_read_body else None
        h.seen.append((request.path, body))
        if h.delay_s and request.method == "POST":
            await asyncio.sleep(h.delay_s)
        return body

    def const(data: dict[str, Any]) -> Any:
        async def handler(request: web.Request) -> web.Response:
            await read(request)
            return dump(data)

        return handler

    async def tokenize(request: web.Request) -> web.Response:
        body = await read(request)
        tokens: list[Any] = [ord(c) for c in body["content"]]
        if h.mode == "bad_tokens" and len(h.sent("/detokenize")) >= 2 and tokens:
            tokens[0] = h.bad_token
        return dump({"tokens": tokens})

    async def detokenize(request: web.Request) -> web.Response:
        body = await read(request)
        return dump({"content": "".join(map(chr, body["tokens"]))})

    async def template(request: web.Request) -> web.Response:
        body = await read(request)
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
        return dump({"prompt": turns + "<|im_start|>assistant\n"})

    def misbehaving(body: Any) -> str:
        """The mode for this scoring request ("good" within the grace, or for the spared 500s)."""
        h.scoring += 1
        if h.scoring <= h.grace:
            return "good"
        if h.mode == "http500":
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
            return "http500" if digest[0] % 3 == 0 else "good"
        return h.mode

    def broken(mode: str, request: web.Request) -> web.Response | None:
        """The answer of the modes that break any scoring request alike."""
        if mode == "redirect":
            return web.Response(status=307, headers={"Location": h.redirect_to + request.path_qs})
        if mode == "http500":
            return raw('{"error": "[/bold] <script>boom</script> internal error"}', status=500)
        if mode == "invalid_json":
            return raw('{"choices": [{"text": "7"')
        if mode == "empty_body":
            return raw("")
        if mode == "no_choices":
            return dump({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}})
        return None

    def said(mode: str, prompt: str = "") -> tuple[Any, str]:
        """(text, finish_reason) of a generation or chat answer in ``mode``."""
        answer = next((a for end, a in h.answer_for.items() if prompt.endswith(end)), h.answer)
        return {
            "empty_text": ("", "stop"),
            "null_text": (None, "stop"),
            "huge_text": ("7 " * 150_000, "length"),
            "truncated": (answer, "length"),
            "script_text": (SCRIPT, "stop"),
        }.get(mode, (answer, "stop"))

    async def oversized(request: web.Request, mode: str, good: web.Response) -> web.StreamResponse:
        """``huge_length`` and ``padded_body``: a body past any sane cap; else ``good``."""
        if mode not in ("huge_length", "padded_body"):
            return good
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if mode == "huge_length":
            resp.content_length = 3 * 2**30
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        assert isinstance(good.body, bytes)
        await resp.write(good.body)
        if mode == "huge_length":  # the 3 GiB never come: the connection ends
            assert request.transport is not None
            request.transport.close()
            return resp
        chunk = b" " * 2**16
        for _ in range(h.pad_bytes // len(chunk)):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await read(request)
        mode = misbehaving(body)
        bad = broken(mode, request)
        if bad is not None:
            return bad
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": 1}
        if "grammar" in body:  # a forced-token log-likelihood
            forced = _forced(body["grammar"])
            value = {"nan": float("nan"), "inf": float("inf"), "neg_inf": float("-inf"), "positive": 0.5}
            lp: Any = None if mode == "null_logprob" else value.get(mode, -1.0)
            content = [{"id": t, "logprob": lp, "top_logprobs": [{"id": t, "logprob": lp}]} for t in forced]
            if mode == "short_logprobs":
                content = content[:-1]
            choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": "length"}
            if mode != "missing_logprobs":
                choice["logprobs"] = {"content": content}
            return await oversized(request, mode, dump({"choices": [choice], "usage": usage}))
        text, finish = said(mode, _text(body["prompt"]))
        answer = dump({"choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": usage})
        return await oversized(request, mode, answer)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await read(request)
        bad = broken(mode := misbehaving(body), request)
        if bad is not None:
            return bad
        text, finish = said(mode)
        message = {"role": "assistant", "content": text}
        usage = {"prompt_tokens": 10, "completion_tokens": 1}
        answer = dump(
            {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
        )
        return await oversized(request, mode, answer)

    app = web.Application(client_max_size=16 * 2**20)
    app.router.add_get("/health", const({"status": "ok"}))
    app.router.add_get("/props", const({**PROPS, "media_marker": h.marker} if h.marker else PROPS))
    models = {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "llamacpp"}]}
    app.router.add_get("/v1/models", const(models))
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/apply-template", template)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _serve(h: Hostile) -> None:
    runner = web.AppRunner(hostile_app(h))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()  # until killed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="serve one hostile llama-server stub until killed")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds every POST waits")
    parser.add_argument("--answer", default=Hostile.answer)
    args = parser.parse_args(argv)
    asyncio.run(_serve(Hostile(args.mode, answer=args.answer, delay_s=args.delay)))


if __name__ == "__main__":
    sys.exit(main())
