"""SGLangScorer without a GPU: the ``/generate`` layout it sends and reads, and its requests
against a scripted test double that records what it was sent (client behaviour only; the real
numbers are checked in test_e2e_sglang_shim.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from evalgate.engines import ServerHandle
from evalgate.engines.sglang import SGLangScorer
from evalgate.engines.sglang._scorer import loglikelihood_payload, read_continuation_logprobs
from evalgate.errors import PreflightError


# -- loglikelihood requests and responses (pure) -----------------------------------------------------
def meta(ids: list[int], start: int, logprobs: list[float], tops: list[int]) -> dict[str, Any]:
    """A /generate result the way SGLang lays it out: entries from ``start``, the first None."""
    entries = [[None, ids[start], None]] + [
        [lp, t, None] for lp, t in zip(logprobs, ids[start + 1 :], strict=True)
    ]
    top = [None] + [[[-0.1, t, None]] for t in tops]
    return {"text": "", "meta_info": {"input_token_logprobs": entries, "input_top_logprobs": top}}


def test_payload_starts_one_token_before_the_continuation() -> None:
    payload = loglikelihood_payload([([5, 6, 7], [8, 9]), ([5, 6, 7], [10])])
    assert payload["input_ids"] == [[5, 6, 7, 8, 9], [5, 6, 7, 10]]
    assert payload["logprob_start_len"] == [2, 2] and payload["top_logprobs_num"] == 1
    assert payload["sampling_params"]["max_new_tokens"] == 0 and payload["return_logprob"] is True


def test_continuation_logprobs_are_summed_with_the_greedy_flag() -> None:
    out = meta([5, 6, 7, 8, 9], 2, [-1.25, -0.5], tops=[8, 9])
    assert read_continuation_logprobs(out, [8, 9]) == (-1.75, True, 2)
    out = meta([5, 6, 7, 8, 9], 2, [-1.25, -0.5], tops=[8, 4])
    assert read_continuation_logprobs(out, [8, 9]) == (-1.75, False, 2)


def test_misaligned_logprobs_are_a_preflight_error() -> None:
    with pytest.raises(PreflightError, match="2 prompt logprobs for 1"):
        read_continuation_logprobs(meta([5, 6, 7, 8, 9], 2, [-1.0, -2.0], tops=[8, 9]), [9])
    with pytest.raises(PreflightError, match="scored token 8"):
        read_continuation_logprobs(meta([5, 6, 7, 8], 2, [-1.0], tops=[8]), [9])


# -- the scorer over HTTP, against a scripted double ------------------------------------------------
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def run_against(
    routes: Mapping[str, Route], body: Callable[[SGLangScorer, list[tuple[str, Any]]], Any]
) -> Any:
    """Run ``body(scorer, sent)`` against a double that records (path, json) of each request."""
    sent: list[tuple[str, Any]] = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> Any:
        assert request.headers.get("Authorization") == "Bearer eg-key"
        sent.append((request.path, await request.json() if request.can_read_body else None))
        return await handler(request)

    async def main() -> Any:
        app = web.Application(middlewares=[record])
        for path, route in routes.items():
            app.router.add_route("*", path, route)
        async with TestServer(app, host="127.0.0.1") as server:
            handle = ServerHandle("arm", str(server.make_url("")).rstrip("/"), "eg-key", [], Path("x.log"))
            scorer = SGLangScorer(handle, concurrency=4)
            try:
                return await body(scorer, sent)
            finally:
                await scorer.aclose()

    return asyncio.run(main())


VOCAB = {"Q:": 1, " A": 2, " B": 3, " yes": 4}


async def tokenize_route(request: web.Request) -> web.Response:
    text = (await request.json())["prompt"]
    ids, rest = [], text
    while rest:
        piece = max((p for p in VOCAB if rest.startswith(p)), key=len)
        ids.append(VOCAB[piece])
        rest = rest[len(piece) :]
    return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": 2048})


async def generate_route(request: web.Request) -> web.Response:
    body = await request.json()
    outs = [
        meta(ids, start, [-1.0 - k for k in range(len(ids) - start - 1)], ids[start + 1 :])
        for ids, start in zip(body["input_ids"], body["logprob_start_len"], strict=True)
    ]
    return web.json_response(outs)


def test_choices_of_one_question_go_in_one_generate_request() -> None:
    async def body(scorer: SGLangScorer, sent: list[tuple[str, Any]]) -> Any:
        return await scorer.loglikelihood_many("Q:", [" A", " B yes", ""])

    routes = {"/tokenize": tokenize_route, "/generate": generate_route}
    results = run_against(routes, body)
    assert results == [(-1.0, True, 1), (-3.0, True, 2), (0.0, True, 0)]


def test_single_loglikelihood_and_request_shapes() -> None:
    async def body(scorer: SGLangScorer, sent: list[tuple[str, Any]]) -> Any:
        out = await scorer.loglikelihood("Q: ", "A")  # trailing space moves to the continuation
        return out, [s for s in sent if s[0] == "/generate"]

    out, generates = run_against({"/tokenize": tokenize_route, "/generate": generate_route}, body)
    assert out == (-1.0, True, 1)
    assert len(generates) == 1 and generates[0][1]["input_ids"] == [[1, 2]]
    assert generates[0][1]["logprob_start_len"] == [0]


def test_render_chat_tokenizes_messages_and_keeps_special_tokens() -> None:
    async def tok(request: web.Request) -> web.Response:
        assert (await request.json())["messages"][0]["content"] == "hi"
        return web.json_response({"tokens": [7, 8, 9], "count": 3, "max_model_len": 2048})

    async def detok(request: web.Request) -> web.Response:
        body = await request.json()
        assert body == {"tokens": [7, 8, 9], "skip_special_tokens": False}
        return web.json_response({"text": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"})

    async def body(scorer: SGLangScorer, sent: list[tuple[str, Any]]) -> Any:
        return await scorer.render_chat([{"role": "user", "content": "hi"}])

    assert "<|im_start|>user\nhi" in run_against({"/tokenize": tok, "/detokenize": detok}, body)


def test_flush_cache_reads_plain_text_and_server_info_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """#18.6: 200 is flushed; a 400 (busy) is tried again, then recorded; 401/403 (an admin key
    evalgate does not hold) is "cannot flush", never an abort. ``?timeout=`` asks SGLang 0.5.23 to
    wait for idle first (flush_wrapper.py)."""
    monkeypatch.setattr("evalgate.engines.sglang._scorer.FLUSH_RETRY_S", 0.0)
    answers = iter([(200, "Cache flushed.\n"), (400, "Timed out waiting for idle state."), (200, "Cache flushed.\n")]
                   + [(400, "Flush cache failed.\n")] * 3 + [(401, '{"error": "Unauthorized"}')])  # fmt: skip
    queries: list[str] = []

    async def flush(request: web.Request) -> web.Response:
        queries.append(request.query_string)
        status, text = next(answers)
        return web.Response(text=text, status=status)

    async def old_info(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.4.10", "api_key": "eg-key", "max_total_num_tokens": 5})

    async def body(scorer: SGLangScorer, sent: list[tuple[str, Any]]) -> Any:
        return [await scorer.flush_cache() for _ in range(4)], await scorer.server_info()

    flushes, info = run_against({"/flush_cache": flush, "/get_server_info": old_info}, body)
    assert flushes[0] == "flushed" and flushes[1] == "flushed"  # the busy 400 was tried again
    assert flushes[2].startswith("not flushed: HTTP 400 3 times") and "Flush cache failed" in flushes[2]
    assert flushes[3].startswith("cannot flush: HTTP 401") and "--admin-api-key" in flushes[3]
    assert set(queries) == {"timeout=30"}
    assert info == {"version": "0.4.10", "max_total_num_tokens": 5, "capacity": info["capacity"]}


def test_a_prefilled_chat_is_continued_not_turned_into_a_user_message() -> None:
    """#18.7: without continue_final_message SGLang makes the trailing assistant message a user one."""

    async def chat(request: web.Request) -> web.Response:
        message = {"role": "assistant", "content": "ok"}
        return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>\n"}]

    async def body(scorer: SGLangScorer, sent: list[tuple[str, Any]]) -> Any:
        await scorer.chat({"messages": prefill, "max_tokens": 4})
        await scorer.chat({"messages": prefill[:1], "max_tokens": 4})
        return [payload for _, payload in sent]

    continued, plain = run_against({"/v1/chat/completions": chat}, body)
    assert continued["continue_final_message"] is True and continued["messages"] == prefill
    assert "continue_final_message" not in plain


def test_shim_reads_sglang_flags_the_way_server_info_names_them() -> None:
    from tests.helpers.sglang_shim import _sglang_settings

    assert _sglang_settings(["--kv-cache-dtype", "fp8_e4m3", "--enable-x"], "m") == {
        "model_path": "m",
        "kv_cache_dtype": "fp8_e4m3",
        "enable_x": True,
    }
