"""VLLMScorer without a GPU: the ``/v1/completions`` layout it sends and reads, and its requests
against a scripted test double of vLLM's protocol that records what it was sent. The double's
answers follow vLLM 0.33.0's and 0.34.0's response models (test_vllm_parser.py validates them with vLLM's own
pydantic models when vLLM is importable); it tests the client, never stands in for vLLM's numbers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from evalgate.engines import ServerHandle, free_port
from evalgate.engines.api import Generation
from evalgate.engines.client import RetryPolicy
from evalgate.engines.preflight import preflight
from evalgate.engines.vllm import VLLMScorer, diagnose
from evalgate.engines.vllm._scorer import loglikelihood_payload, read_continuation_logprobs
from evalgate.errors import PreflightError, ServerDied

FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02, timeout_s=10)
MODEL = "served-model"
SPECIAL = {"<|im_start|>": 100001, "<|im_end|>": 100002}


# -- a toy tokenizer and language model, in vLLM's response layout (pure) ------------------------------------
def encode(text: str) -> list[int]:
    """One token per character; the chat template's markers are single special tokens."""
    ids: list[int] = []
    i = 0
    while i < len(text):
        mark = next((m for m in SPECIAL if text.startswith(m, i)), None)
        ids.append(SPECIAL[mark] if mark else ord(text[i]))
        i += len(mark) if mark else 1
    return ids


def decode(ids: list[int]) -> str:
    names = {v: k for k, v in SPECIAL.items()}
    return "".join(names.get(t) or chr(t) for t in ids)


def logprob(t: int) -> float:
    """Every token costs about 0.5 nats, so shorter continuations are likelier (preflight's probes)."""
    return -0.5 - (t % 3) * 0.01


def greedy(t: int) -> bool:
    return t % 4 != 0


def position(t: int) -> dict[str, dict[str, Any]]:
    """vLLM's per-position prompt logprobs: the prompt token with its rank, plus the top-1 token."""
    out = {str(t): {"logprob": logprob(t), "rank": 1 if greedy(t) else 2, "decoded_token": chr(t % 0x110000)}}
    if not greedy(t):
        out[str(t + 1)] = {"logprob": logprob(t) + 0.25, "rank": 1, "decoded_token": "x"}
    return out


def fake_completion(body: dict[str, Any]) -> dict[str, Any]:
    """``/v1/completions``: echoed prompt logprobs for token-id prompts, a fixed text for strings."""
    prompt = body["prompt"]
    choices: list[dict[str, Any]] = []
    prompt_tokens = 0
    if isinstance(prompt, str):
        choices.append(
            {"index": 0, "text": " 42\nQuestion: again", "logprobs": None, "finish_reason": "length"}
        )
        prompt_tokens = len(encode(prompt))
    else:
        for i, ids in enumerate(prompt if isinstance(prompt[0], list) else [prompt]):
            tops = [None] + [{f"token_id:{k}": v["logprob"] for k, v in position(t).items()} for t in ids[1:]]
            choices.append(
                {
                    "index": i,
                    "text": decode(ids),
                    "logprobs": {
                        "text_offset": list(range(len(ids))),
                        "token_logprobs": [None] + [logprob(t) for t in ids[1:]],
                        "tokens": [f"token_id:{t}" for t in ids],
                        "top_logprobs": tops,
                    },
                    "finish_reason": "length",
                    "prompt_logprobs": [None] + [position(t) for t in ids[1:]],
                }
            )
            prompt_tokens += len(ids)
    completion = 0 if isinstance(prompt, list) else 4
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": body.get("model", MODEL),
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens,
        },
    }


def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def fake_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    if "messages" in body:
        ids = encode(render(body["messages"], body.get("add_generation_prompt", True)))
    else:
        ids = encode(body["prompt"])
    return {"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None}


def fake_detokenize(body: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": decode(body["tokens"])}


# -- the scorer over HTTP, against the double ------------------------------------------------------------------
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_route(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Route:
    async def route(request: web.Request) -> web.StreamResponse:
        return web.json_response(answer(await request.json()))

    return route


ROUTES: dict[str, Route] = {
    "/v1/completions": json_route(fake_completion),
    "/tokenize": json_route(fake_tokenize),
    "/detokenize": json_route(fake_detokenize),
    "/v1/chat/completions": json_route(
        lambda b: {"model": b.get("model"), "choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    ),
}


def run_against(
    body: Callable[[VLLMScorer, list[tuple[str, Any]]], Any], routes: dict[str, Route] | None = None
) -> Any:
    """Run ``body(scorer, sent)`` against the double, which records (path, json) of each request."""
    sent: list[tuple[str, Any]] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> Any:
        if request.path.startswith("/v1"):  # vLLM guards /v1 only
            assert request.headers.get("Authorization") == "Bearer eg-key"
        sent.append((request.path, await request.json()))
        return await handler(request)

    async def main() -> Any:
        app = web.Application(middlewares=[record])
        for path, route in {**ROUTES, **(routes or {})}.items():
            app.router.add_route("POST", path, route)
        async with TestServer(app, host="127.0.0.1") as server:
            url = str(server.make_url("")).rstrip("/")
            handle = ServerHandle("arm", url, "eg-key", [], Path("x.log"), info={"served_model": MODEL})
            scorer = VLLMScorer(handle, concurrency=4, retry=FAST)
            try:
                return await body(scorer, sent)
            finally:
                await scorer.aclose()

    return asyncio.run(main())


def expected(cont: str) -> tuple[float, bool, int]:
    ids = encode(cont)
    return sum(logprob(t) for t in ids), all(greedy(t) for t in ids), len(ids)


def test_choices_of_one_question_go_in_one_completions_request() -> None:
    context, choices = "Question: 2+2=", [" 4", " 5", " 22"]
    out, sent = run_against(lambda s, sent: _pair(s.loglikelihood_many(context, choices), sent))
    assert out == [pytest.approx(expected(c)) for c in choices]
    posts = [b for p, b in sent if p == "/v1/completions"]
    assert len(posts) == 1
    assert posts[0]["prompt"] == [encode(context + c) for c in choices] and posts[0]["model"] == MODEL
    assert posts[0]["max_tokens"] == 0 and posts[0]["echo"] is True and posts[0]["prompt_logprobs"] == 1
    tokenized = [b["prompt"] for p, b in sent if p == "/tokenize"]
    assert sorted(tokenized) == sorted([context] + [context + c for c in choices])  # context once
    assert all(b["add_special_tokens"] is False for p, b in sent if p == "/tokenize")


def test_a_non_greedy_token_and_the_trailing_space_rule() -> None:
    # "d" (100) is not greedy in the toy model; the context's trailing space moves to the continuation
    out = run_against(lambda s, sent: s.loglikelihood("a b ", "d"))
    assert out == pytest.approx(expected(" d")) and out[1] is False


async def _pair(coro: Awaitable[Any], sent: list[tuple[str, Any]]) -> tuple[Any, list[tuple[str, Any]]]:
    return await coro, sent


def test_the_openai_logprobs_layout_is_read_when_prompt_logprobs_are_absent() -> None:
    choice = fake_completion({"prompt": [[5, 6, 7, 8, 9]]})["choices"][0]
    with_ranks = read_continuation_logprobs(choice, [5, 6, 7], [8, 9])
    choice.pop("prompt_logprobs")
    assert read_continuation_logprobs(choice, [5, 6, 7], [8, 9]) == pytest.approx(with_ranks)
    assert with_ranks[1] is False  # token 8 is not greedy


def test_misaligned_logprobs_are_a_preflight_error() -> None:
    choice = fake_completion({"prompt": [[5, 6, 7, 8]]})["choices"][0]
    with pytest.raises(PreflightError, match="4 prompt logprobs"):
        read_continuation_logprobs(choice, [5, 6, 7], [8, 9])
    with pytest.raises(PreflightError, match="no logprob for token 10"):
        read_continuation_logprobs(choice, [5, 6, 7], [10])
    choice.pop("prompt_logprobs")
    with pytest.raises(PreflightError, match="where \\[10\\] were sent"):
        read_continuation_logprobs(choice, [5, 6, 7], [10])


def test_payload_is_a_list_of_token_id_prompts() -> None:
    body = loglikelihood_payload([([1, 2], [3]), ([1, 2], [4, 5])], None)
    assert body["prompt"] == [[1, 2, 3], [1, 2, 4, 5]] and "model" not in body
    assert body["logprobs"] == 1 and body["return_tokens_as_token_ids"] is True


def test_tokenize_detokenize_and_render_chat_keep_the_template() -> None:
    async def body(s: VLLMScorer, sent: list[tuple[str, Any]]) -> Any:
        ids = await s.tokenize("café 東京")
        return ids, await s.detokenize(ids), await s.render_chat([{"role": "user", "content": "hi"}]), sent

    ids, back, rendered, sent = run_against(body)
    assert back == "café 東京" and ids == encode("café 東京")
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    chat = [b for p, b in sent if p == "/tokenize" and "messages" in b]
    assert chat == [
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}
    ]


def test_generate_trims_stops_and_chat_names_the_model() -> None:
    async def body(s: VLLMScorer, sent: list[tuple[str, Any]]) -> Any:
        gen = await s.generate("Q: 6*7?", Generation(max_tokens=16, stop=("\nQuestion:",), seed=3))
        return gen, await s.chat({"messages": [{"role": "user", "content": "x"}], "temperature": 0.0}), sent

    gen, chat, sent = run_against(body)
    assert gen == {"text": " 42", "prompt_tokens": 7, "completion_tokens": 4, "finish_reason": "stop"}
    assert chat["model"] == MODEL
    post = next(b for p, b in sent if p == "/v1/completions")
    assert post == {
        "model": MODEL,
        "prompt": "Q: 6*7?",
        "max_tokens": 16,
        "stop": ["\nQuestion:"],
        "temperature": 0.0,
        "seed": 3,
    }


def test_preflight_passes_against_the_double() -> None:
    report = run_against(lambda s, sent: preflight(s, server="candidate"))
    assert all(c["ok"] for c in report.checks) and report.tokenizer_fingerprint


def test_a_server_error_is_retried_then_succeeds() -> None:
    calls = {"n": 0}

    async def flaky(request: web.Request) -> web.StreamResponse:
        calls["n"] += 1
        if calls["n"] == 1:
            return web.json_response({"error": "busy"}, status=500)
        return web.json_response(fake_tokenize(await request.json()))

    assert run_against(lambda s, sent: s.tokenize("ok"), {"/tokenize": flaky}) == encode("ok")
    assert calls["n"] == 2


def test_a_chat_template_error_is_a_preflight_error() -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "no chat template"}}, status=400)

    with pytest.raises(PreflightError, match="would not render a chat prompt"):
        run_against(lambda s, sent: s.render_chat([{"role": "user", "content": "x"}]), {"/tokenize": refuse})


def test_a_dead_server_raises_server_died_with_its_log(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    proc.wait()
    log = tmp_path / "arm.log"
    log.write_text("ERROR [core.py:396] EngineCore failed to start.\n")
    url = f"http://127.0.0.1:{free_port()}"
    handle = ServerHandle(
        "arm", url, "eg-key", ["vllm"], log, proc, diagnose=diagnose
    )  # as launch() makes it

    async def body() -> Any:
        scorer = VLLMScorer(handle, concurrency=1, retry=FAST)
        try:
            return await scorer.loglikelihood("a", "b")
        finally:
            await scorer.aclose()

    with pytest.raises(ServerDied, match="the arm server died") as err:
        asyncio.run(body())
    assert "engine core died" in err.value.fix
