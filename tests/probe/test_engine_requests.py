"""``Scorer.cached_request`` on SGLang and vLLM against a double that records what it was sent:
the salt where each engine reads it, and the cached tokens where each reports them (SGLang 0.5.23
``meta_info.cached_tokens``; vLLM 0.33.0 ``usage.prompt_tokens_details.cached_tokens``, null
without --enable-prompt-tokens-details). The llama.cpp launch flags of llama.cpp#27148."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from evalgate.config import LlamaCppConfig
from evalgate.engines import ServerHandle
from evalgate.engines.api import CacheObservation
from evalgate.engines.sglang import SGLangScorer
from evalgate.engines.vllm import VLLMScorer
from evalgate.variants import Variant


def ask(make: Any, path: str, answer: dict[str, Any], salt: str | None) -> tuple[CacheObservation, Any]:
    sent: list[Any] = []

    async def route(request: web.Request) -> web.Response:
        sent.append(await request.json())
        return web.json_response(answer)

    async def main() -> CacheObservation:
        app = web.Application()
        app.router.add_post(path, route)
        async with TestServer(app, host="127.0.0.1") as server:
            handle = ServerHandle("arm", str(server.make_url("")).rstrip("/"), "eg-key", [], Path("x.log"))
            scorer = make(handle, concurrency=1)
            try:
                return await scorer.cached_request([5, 6, 7], salt=salt)
            finally:
                await scorer.aclose()

    obs = asyncio.run(main())
    (body,) = sent
    return obs, body


def test_sglang_sends_the_salt_on_generate_and_reads_meta_info() -> None:
    answer = {"text": "x", "meta_info": {"cached_tokens": 2, "prompt_tokens": 3}}
    obs, body = ask(SGLangScorer, "/generate", answer, "ab12")
    assert body["input_ids"] == [5, 6, 7] and body["cache_salt"] == "ab12"
    assert body["sampling_params"] == {"max_new_tokens": 1, "temperature": 0.0}
    assert obs.cached_tokens == 2 and obs.prompt_tokens == 3 and obs.latency_s > 0 and obs.text == "x"
    _, body = ask(SGLangScorer, "/generate", answer, None)
    assert "cache_salt" not in body  # the shared namespace


def test_vllm_sends_the_salt_on_completions_and_reads_prompt_tokens_details() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    obs, body = ask(VLLMScorer, "/v1/completions", {"choices": [{"text": "x"}], "usage": usage}, "ff" * 16)
    assert body["prompt"] == [5, 6, 7] and body["cache_salt"] == "ff" * 16 and body["max_tokens"] == 1
    assert obs.cached_tokens == 0 and obs.prompt_tokens == 3 and obs.text == "x"
    off = {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3, "prompt_tokens_details": None}}
    obs, _ = ask(VLLMScorer, "/v1/completions", off, None)
    assert obs.cached_tokens is None  # the server was started without --enable-prompt-tokens-details


def test_llamacpp_arms_launch_without_the_ram_prompt_cache_unless_configured(monkeypatch: Any) -> None:
    from evalgate.engines.llamacpp import _engine

    monkeypatch.setattr(_engine, "derived_gguf", lambda weights, quantize: Path("/m.gguf"))
    monkeypatch.setattr(_engine, "find_binary", lambda name="llama-server": Path("/bin") / name)

    def args(config: LlamaCppConfig, kv: str = "bf16") -> dict[str, str | None]:
        return dict(_engine.LlamaCppEngine(config).launch_spec(Variant("x", kv=kv)).args)

    default = LlamaCppConfig(wait_policy="default")
    base, cand = args(default), args(default, "fp8")
    assert base["--cache-ram"] == cand["--cache-ram"] == "0"
    assert "--no-cache-idle-slots" in base and "--no-cache-idle-slots" in cand
    kept = args(LlamaCppConfig(wait_policy="default", cache_ram_mib=8192, cache_idle_slots=True))
    assert kept["--cache-ram"] == "8192" and "--no-cache-idle-slots" not in kept


def test_llamacpp_warm_requests_cache_the_prompt_cold_ones_turn_it_off_and_a_salt_is_refused() -> None:
    """llama-server 0.6.0-dev, as installed: ``cache_prompt: true`` read 19 of 20 prompt tokens
    from the slot, ``cache_prompt: false`` on the same prompt 0 (``usage.prompt_tokens_details``)."""
    from evalgate.engines.api import NoCacheIsolation
    from evalgate.engines.llamacpp import LlamaCppScorer

    usage = {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 2}}
    answer = {"choices": [{"text": "x"}], "usage": usage, "timings": {"cache_n": 2}}
    obs, body = ask(LlamaCppScorer, "/v1/completions", answer, None)
    assert body["prompt"] == [5, 6, 7] and body["cache_prompt"] is True and body["max_tokens"] == 1
    assert "cache_salt" not in body and obs.cached_tokens == 2 and obs.text == "x"

    sent: list[Any] = []

    async def route(request: web.Request) -> web.Response:
        sent.append(await request.json())
        return web.json_response({"choices": [{"text": "y"}], "usage": {"prompt_tokens": 3}})

    async def main() -> tuple[CacheObservation, Exception | None]:
        app = web.Application()
        app.router.add_post("/v1/completions", route)
        async with TestServer(app, host="127.0.0.1") as server:
            handle = ServerHandle("arm", str(server.make_url("")).rstrip("/"), "eg-key", [], Path("x.log"))
            scorer = LlamaCppScorer(handle, concurrency=1)
            try:
                cold = await scorer.cold_request([5, 6, 7], max_tokens=4)
                try:
                    await scorer.cached_request([5], salt="ab")
                except NoCacheIsolation as exc:
                    return cold, exc
                return cold, None
            finally:
                await scorer.aclose()

    cold, refused = asyncio.run(main())
    assert sent == [{"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0.0, "cache_prompt": False}]
    assert cold.cached_tokens is None and cold.text == "y"
    assert isinstance(refused, NoCacheIsolation) and refused.exit_code == 2  # one request only: no salt sent


def test_the_default_cold_request_is_a_request_under_a_salt_of_its_own() -> None:
    from evalgate.engines.api import Scorer

    class Recorder(Scorer):
        concurrency = 1

        def __init__(self) -> None:
            self.salts: list[str | None] = []

        async def cached_request(
            self, prompt_ids: Any, *, salt: str | None, max_tokens: int = 1
        ) -> CacheObservation:
            self.salts.append(salt)
            return CacheObservation(0.1, 0)

    r = Recorder()
    asyncio.run(r.cold_request([1]))
    asyncio.run(r.cold_request([1]))
    assert len(set(r.salts)) == 2 and all(s and len(s) == 32 for s in r.salts)
