"""LlamaCppScorer.generate sizes the prompt against the server's context (never lm-eval's 2048
default), against a llama-server test double: the HTTP contract only, no model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.engines import ServerHandle
from evalgate.engines.api import Generation
from evalgate.engines.llamacpp import LlamaCppScorer
from tests.helpers.background import background_apps

N_CTX = 64


def _app(seen: list[tuple[str, Any]]) -> web.Application:
    """One token per character, so token counts are easy to reason about."""

    async def props(request: web.Request) -> web.Response:
        return web.json_response({"default_generation_settings": {"n_ctx": N_CTX}})

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(("tokenize", body["content"]))
        return web.json_response({"tokens": [ord(c) for c in body["content"]]})

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(("completions", body["prompt"]))
        return web.json_response(
            {"choices": [{"text": " 42"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        )

    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    return app


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ServerHandle, list[tuple[str, Any]]]]:
    seen: list[tuple[str, Any]] = []
    apps = background_apps()
    url = next(apps)(_app(seen))
    yield ServerHandle("double", url, "key", ["llama-server"], tmp_path / "log"), seen
    apps.close()


def generate(handle: ServerHandle, prompt: str, max_tokens: int) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        scorer = LlamaCppScorer(handle, concurrency=1)
        try:
            return await scorer.generate(prompt, Generation(max_tokens=max_tokens))
        finally:
            await scorer.aclose()

    return asyncio.run(go())


def test_a_prompt_that_fits_is_sent_as_text_without_tokenizing(server: Any) -> None:
    handle, seen = server
    out = generate(handle, "x" * 40, max_tokens=16)  # 40 bytes + 1 <= 64 - 16
    assert out["truncated_tokens"] == 0 and out["text"] == " 42"
    assert seen == [("completions", "x" * 40)]


def test_a_long_prompt_keeps_its_last_tokens(server: Any) -> None:
    handle, seen = server
    prompt = "".join(chr(ord("a") + i % 26) for i in range(100))
    out = generate(handle, prompt, max_tokens=16)
    room = N_CTX - 16
    assert out["truncated_tokens"] == 100 - room
    assert seen[-1] == ("completions", [ord(c) for c in prompt[-room:]])  # lm-eval's left truncation


def test_a_prompt_near_the_limit_is_counted_then_sent_whole(server: Any) -> None:
    handle, seen = server
    out = generate(handle, "y" * 48, max_tokens=16)  # 49 > 48 bytes of room: count, but it fits
    assert out["truncated_tokens"] == 0
    assert seen == [("tokenize", "y" * 48), ("completions", "y" * 48)]
