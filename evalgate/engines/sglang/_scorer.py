"""Scoring against one SGLang server through its native API.

Loglikelihood uses ``/generate`` with ``input_ids``, ``max_new_tokens: 0``, ``return_logprob``
and ``logprob_start_len``. SGLang returns ``meta_info.input_token_logprobs`` as
``[logprob, token_id, text]`` for every prompt position from ``logprob_start_len`` on, and the
first of those is always ``None`` (the logits that would score it are not computed). So the
request starts one token before the continuation and drops that first entry (SGLang 0.5.23,
``SchedulerLogprobResultProcessor._process_input_token_logprobs``). ``top_logprobs_num: 1``
gives ``input_top_logprobs``, which tells whether each continuation token was greedy.

Token distributions (the drift suite) are the same request with ``top_logprobs_num`` = top k:
``input_top_logprobs`` holds per position a list of ``[logprob, token_id, text]`` best first, None
for the first (``_process_input_top_logprobs``; ``TokenizerManager.detokenize_top_logprobs_tokens``
writes the triples, text None unless ``return_text_in_logprobs``). Prompt positions are not
sampled: their logprobs are the log-softmax of the raw logits, no temperature or sampler
(``InputLogprobProcessor._forward_by_chunk`` and ``get_top_logprobs_chunk`` in
``layers/logprob_processor.py``).

Decode distributions (the drift suite's decode path) are one greedy ``/generate`` with
``logprob_start_len`` -1 and ``top_logprobs_num`` = top k, read from ``output_token_logprobs`` and
``output_top_logprobs`` (``_decode``, which cites the source).

The chat template is observed with ``/tokenize`` given ``messages`` (SGLang renders them as a
chat completion would, then encodes), and ``/detokenize`` with ``skip_special_tokens: false``
turns the ids back into the rendered text. ``messages`` in ``/tokenize`` exists from SGLang 0.5.12
on (0.5.9 has ``/tokenize`` for text only).

A chat whose last message is the assistant's (the tool_calls suite's prefill) is sent with
``continue_final_message: true``: without it SGLang turns that message into a *user* message
(``_handle_last_assistant_message`` in ``sglang/srt/entrypoints/openai/serving_chat.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import aiohttp

from evalgate.engines._decoding import decode_prompt
from evalgate.engines._openai import OpenAIScorer
from evalgate.engines._scoring import (
    check_logprob,
    check_positions,
    forced_split,
    invalid,
    parsing,
    token_ids,
)
from evalgate.engines.api import CacheObservation, Decoded, LogLik, Position, Split
from evalgate.engines.client import RequestFailed
from evalgate.engines.sglang._decode import (
    answered_positions,
    decode_payload,
    logprob_lists,
    one_result,
    read_decoded,
)
from evalgate.engines.sglang._server_info import get_server_info, parse_server_info
from evalgate.errors import PreflightError

__all__ = [
    "FLUSH_RETRY_S",
    "FLUSH_TRIES",
    "FLUSH_WAIT_S",
    "SGLangScorer",
    "distributions_payload",
    "loglikelihood_payload",
    "read_continuation_logprobs",
    "read_positions",
]

FLUSH_WAIT_S = 30.0
"""How long SGLang may wait for idle before it answers a flush (its ``timeout`` query)."""
FLUSH_TRIES = 3
"""Flushes tried before a 400 (busy) is recorded as not flushed."""
FLUSH_RETRY_S = 1.0
"""Pause before the second flush (twice that before the third)."""


class SGLangScorer(OpenAIScorer):
    """Loglikelihood, generation, chat, tokenization and cache control against one SGLang server;
    generation and chat are ``OpenAIScorer``'s (``top_p``, ``top_k``, ``min_p`` are
    ``CompletionRequest`` fields in 0.5.23, and SGLang trims its own stop strings)."""

    label = "SGLang"
    prefill_fields = MappingProxyType({"continue_final_message": True})
    """Without it SGLang turns a final assistant message into a *user* message (module docstring)."""

    # -- tokenizer ---------------------------------------------------------------------------
    async def _tokenize(self, text: str) -> list[int]:
        data = await self.http.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return token_ids(data, self.server)

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self.http.post("/detokenize", {"tokens": tokens})
        return str(data["text"])

    # -- loglikelihood: loglikelihood_many is BatchScorer's -----------------------------------
    async def _score_splits(self, splits: list[Split]) -> list[LogLik]:
        """One ``/generate`` for the whole batch; SGLang's radix cache computes the context once."""
        data = await self.http.post("/generate", loglikelihood_payload(splits))
        outs = data if isinstance(data, list) else [data]
        if len(outs) != len(splits):
            raise invalid(
                self.server,
                f"answered {len(outs)} results for a batch of {len(splits)} "
                "(an SGLang that does not batch /generate input_ids lists: upgrade SGLang)",
            )
        return [
            read_continuation_logprobs(out, cont, server=self.server)
            for out, (_, cont) in zip(outs, splits, strict=True)
        ]

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """Teacher forcing in one ``/generate`` that generates nothing: every position of
        ``tokens`` from ``start`` on, with its top ``top_k`` (module docstring)."""
        _, forced = forced_split(tokens, start, top_k)
        if not forced:
            return []
        data = await self.http.post("/generate", distributions_payload(tokens, start=start, top_k=top_k))
        return read_positions(data, forced, top_k=top_k, server=self.server)

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """One greedy ``/generate`` after the ids ``prompt``: each generated token with its
        logprob and top ``top_k`` from the decode step that produced it (``_decode``)."""
        ids = decode_prompt(prompt, max_tokens=max_tokens, top_k=top_k)
        data = await self.http.post("/generate", decode_payload(ids, max_tokens=max_tokens, top_k=top_k))
        return read_decoded(data, max_tokens=max_tokens, top_k=top_k, server=self.server)

    # -- chat template (generate and chat are OpenAIScorer's) --------------------------------
    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        """The prompt SGLang builds for these messages, exactly as a chat completion would."""
        try:
            data = await self.http.post("/tokenize", {"messages": messages})
        except RequestFailed as exc:
            raise PreflightError(
                f"SGLang would not render a chat prompt through /tokenize ({exc})",
                fix="upgrade SGLang to 0.5.12 or newer (its /tokenize accepts messages)",
            ) from exc
        ids = token_ids(data, self.server)
        text = await self.http.post("/detokenize", {"tokens": ids, "skip_special_tokens": False})
        return str(text["text"])

    # -- server ------------------------------------------------------------------------------
    async def flush_cache(self) -> str:
        """Empty SGLang's radix (prefix) cache, so one suite's prompts do not warm the next's.

        SGLang 0.5.23 (``/flush_cache`` in ``entrypoints/http_server.py``) answers plain text: 200
        when flushed, 400 when it would not (requests running, or another flush pending). With
        ``?timeout=S`` it waits up to S seconds for the server to go idle
        (``managers/scheduler_components/flush_wrapper.py``); older versions ignore the query. A
        400 is tried again; 401/403 means the server has an ``--admin-api-key`` evalgate does not
        hold: nothing to do about it but record it. Returns "flushed" or why not."""
        url = self.handle.base_url.rstrip("/") + f"/flush_cache?timeout={FLUSH_WAIT_S:g}"
        headers = {"Authorization": f"Bearer {self.handle.api_key}"}
        body = ""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FLUSH_WAIT_S + 60)) as session:
            for attempt in range(FLUSH_TRIES):
                if attempt:
                    await asyncio.sleep(FLUSH_RETRY_S * attempt)
                async with session.post(url, headers=headers) as resp:
                    body = " ".join((await resp.text(errors="replace")).split())[:160]
                    status = resp.status
                if status == 200:
                    return "flushed"
                if status in (401, 403):
                    return (
                        f"cannot flush: HTTP {status} (the server has an --admin-api-key); the suite "
                        "ran on a warm prefix cache, which changes speed, not scores"
                    )
                if status != 400:
                    raise RequestFailed(
                        f"POST /flush_cache answered HTTP {status}: {body}",
                        fix="check the API key and that this is an SGLang server",
                    )
        return f"not flushed: HTTP 400 {FLUSH_TRIES} times ({body or 'no reason given'})"

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        """One timed ``/generate`` of ``prompt_ids`` under ``cache_salt``; SGLang 0.5.23 keys every
        radix node by ``(extra_key, cache_salt)`` (``RadixKey`` in ``mem_cache/radix_cache.py``),
        takes the salt on ``GenerateReqInput`` (``managers/io_struct.py``) and reports the prompt
        tokens read from the cache in ``meta_info.cached_tokens`` (``tokenizer_manager.py``)."""
        body: dict[str, Any] = {
            "input_ids": [int(t) for t in prompt_ids],
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0},
        }
        if salt is not None:
            body["cache_salt"] = salt
        start = time.perf_counter()
        data = await self.http.post("/generate", body)
        latency = time.perf_counter() - start
        with parsing(self.server, "/generate meta_info"):
            meta = (data[0] if isinstance(data, list) else data).get("meta_info") or {}
            out = data[0] if isinstance(data, list) else data
            cached, prompt, text = meta.get("cached_tokens"), meta.get("prompt_tokens"), out.get("text")
        return CacheObservation(
            latency,
            int(cached) if cached is not None else None,
            int(prompt) if prompt is not None else None,
            str(text) if text is not None else None,
        )

    async def server_info(self) -> dict[str, Any]:
        """``/server_info`` (``/get_server_info`` before SGLang 0.5.15), secrets masked."""
        raw, why = await asyncio.to_thread(get_server_info, self.handle.base_url, self.handle.api_key)
        if raw is None:
            raise RequestFailed(
                f"SGLang's server info did not answer ({why})",
                fix="check the API key and that this is an SGLang server",
            )
        return parse_server_info(raw, [self.handle.api_key])


def loglikelihood_payload(splits: Sequence[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """The ``/generate`` body scoring each (context ids, continuation ids) pair; pure for tests."""
    return {
        "input_ids": [ctx + cont for ctx, cont in splits],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        # start one token early: SGLang's first input logprob is always None
        "logprob_start_len": [len(ctx) - 1 for ctx, _ in splits],
        "top_logprobs_num": 1,
    }


def read_continuation_logprobs(out: Any, cont: list[int], *, server: str = "SGLang") -> LogLik:
    """Sum and greedy flag of ``cont`` from one ``/generate`` result (see the module docstring);
    one finite logprob <= 0 per continuation token, else an InvalidResponse naming ``server``."""
    with parsing(server, "/generate prompt logprobs"):
        entries, tops = logprob_lists(out.get("meta_info") or {}, "input")
        if len(entries) != len(cont):
            raise invalid(
                server,
                f"returned {len(entries)} prompt logprobs for {len(cont)} continuation tokens "
                "(an SGLang that ignores logprob_start_len: upgrade SGLang)",
            )
        total, greedy = 0.0, True
        for k, (want, entry) in enumerate(zip(cont, entries, strict=True)):
            logprob, token_id = entry[0], int(entry[1])
            if token_id != want or logprob is None:
                raise invalid(
                    server,
                    f"scored token {token_id} (logprob {logprob}) where {want} was sent "
                    "(prompt logprobs not lined up with the input ids: upgrade SGLang)",
                )
            total += check_logprob(logprob, server, f"continuation token {want}")
            top = tops[k] if k < len(tops) else None
            if top and int(top[0][1]) != want:
                greedy = False
    return total, greedy, len(cont)


def distributions_payload(tokens: Sequence[int], *, start: int, top_k: int) -> dict[str, Any]:
    """The ``/generate`` body for the positions of ``tokens`` from ``start`` on; pure for tests."""
    return {
        "input_ids": [int(t) for t in tokens],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": start - 1,  # one early: SGLang's first input logprob is always None
        "top_logprobs_num": top_k,
    }


def read_positions(out: Any, forced: list[int], *, top_k: int, server: str = "SGLang") -> list[Position]:
    """The positions of ``forced`` from one ``/generate`` result: ``input_token_logprobs``
    (``[logprob, id, text]``) and ``input_top_logprobs`` (a list of those per position), each
    without its leading None, checked by ``check_positions``."""
    with parsing(server, "/generate prompt logprobs"):
        entries, tops = logprob_lists(one_result(out).get("meta_info") or {}, "input")
        answered = answered_positions(entries, tops, len(forced), server, side="input")
    return check_positions(answered, forced, server, top_k=top_k)
