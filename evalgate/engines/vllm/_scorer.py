"""Scoring against one vLLM server through its OpenAI-compatible API.

Loglikelihood: ``/v1/completions`` with token-id prompts, ``echo``, ``max_tokens: 0`` and
``prompt_logprobs``. vLLM then answers the prompt's logprobs and generates nothing (0.33.0 and
0.34.0 ``OpenAIServingCompletion.request_output_to_completion_response``):
``choices[i].prompt_logprobs`` holds one ``{token_id: {logprob, rank, decoded_token}}`` per prompt
token, the first None. Greedy is rank 1, or a logprob equal to the best listed: vLLM's rank counts
the tokens at least as likely (``_ranks_kernel``, ``logits >= x``, in
``v1/worker/gpu/sample/logprob.py``, the GPU model runner's in 0.33 and its only one in 0.34, which
dropped ``v1/sample/`` and ``gpu_model_runner.py``), so a token tied for best (bf16 logits tie
exactly) has rank 2 or more. A question's choices go as one list of prompts, answered in order by
``index``.

The chat template is observed with ``/tokenize`` given ``messages`` (rendered as a chat completion
would be, then encoded) and ``/detokenize``, which keeps special tokens. vLLM's ``/tokenize``,
``/detokenize``, ``/health`` and ``/version`` are not behind the API key; ``/v1/*`` is.

A chat ending in the assistant's message (the tool_calls prefill) is sent with
``continue_final_message: true`` and ``add_generation_prompt: false``. Without the first, vLLM opens
a new assistant turn after the prefill; the first with the default ``add_generation_prompt: true``
is refused, by the request's validator when both are sent ("Cannot set both", 0.33.0 and 0.34.0
``chat_completion/protocol.py`` ``check_generation_prompt``) and by the tokenizer's
``apply_chat_template`` when only the first is.

Token distributions (the drift suite): the same request with ``prompt_logprobs`` = top k and no
``logprobs``. Per position, vLLM (0.33.0, 0.34.0) puts the prompt token first with its own rank,
then the top k with ranks 1..k (``append_logprobs_for_next_position`` in ``vllm/logprobs.py``, a
dict, so a prompt token inside the top k is listed once): the top k are the entries of rank <= k,
and a prompt token outside them has rank > k (the rank counts the tokens at least as likely). The
values are the log-softmax of the raw logits (``PromptLogprobsWorker.compute_prompt_logprobs``,
``v1/worker/gpu/sample/prompt_logprob.py`` with the default ``logprobs_mode`` raw_logprobs; a server
started with ``raw_logits`` answers logits, which the check refuses), -inf written as -9999.0
(``clamp_prompt_logprobs``). A top k above the server's ``--max-logprobs`` (default 20) is refused
by vLLM (``SamplingParams``).

Decode distributions (the drift suite's decode path): one greedy ``/v1/completions`` with
``logprobs`` = top k and the tokens as ids, read from ``choices[0].logprobs`` (``_decode``, which
cites the source).

Speed, not scores: ``prompt_logprobs`` turns off reading the prefix cache for the request (0.33.0
and 0.34.0 ``sampling_params.py``: ``skip_reading_prefix_cache``), so the choices of one question
each prefill their context again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, NoReturn

from evalgate.engines._decoding import decode_prompt
from evalgate.engines._launcher import ServerHandle
from evalgate.engines._openai import OpenAIScorer
from evalgate.engines._scoring import (
    check_logprob,
    check_positions,
    completion_observation,
    forced_split,
    invalid,
    parsing,
    token_ids,
)
from evalgate.engines.api import CacheObservation, Decoded, LogLik, Position, Split
from evalgate.engines.client import RequestFailed, RetryPolicy
from evalgate.engines.vllm._decode import decode_payload, read_decoded
from evalgate.engines.vllm._diagnose import TESTED_VERSION
from evalgate.errors import PreflightError

__all__ = [
    "VLLMScorer",
    "distributions_payload",
    "loglikelihood_payload",
    "read_continuation_logprobs",
    "read_positions",
]

_SETTINGS = "evalgate.toml [vllm]"

_OVER_MAX = re.compile(
    r"Requested (?:prompt |sample )?logprobs of (\d+), which is greater than max allowed: (\d+)"
)
"""vLLM's refusal of more logprobs per position than its ``--max-logprobs`` (0.32.0 to 0.34.0
``SamplingParams._validate_logprobs``), quoted in the 400's body."""


def loglikelihood_payload(splits: Sequence[tuple[list[int], list[int]]], model: str | None) -> dict[str, Any]:
    """The ``/v1/completions`` body scoring each (context ids, continuation ids) pair; pure for tests."""
    body: dict[str, Any] = {
        "prompt": [ctx + cont for ctx, cont in splits],
        "max_tokens": 0,  # with echo: the prompt's logprobs, nothing generated
        "echo": True,
        "logprobs": 1,
        "prompt_logprobs": 1,  # adds each prompt token's rank: 1 means greedy
        "temperature": 0.0,
        "return_tokens_as_token_ids": True,  # echo tokens as "token_id:N", exact for the fallback
    }
    return {"model": model, **body} if model else body


def read_continuation_logprobs(
    choice: Any, ctx: list[int], cont: list[int], *, server: str = "vLLM"
) -> LogLik:
    """Sum and greedy flag of ``cont`` from one choice: ``prompt_logprobs`` (with ranks), else the
    OpenAI ``logprobs`` layout, whose tokens read "token_id:N" (``return_tokens_as_token_ids``).
    One finite logprob <= 0 per continuation token, else an InvalidResponse naming ``server``."""
    with parsing(server, "/v1/completions prompt logprobs"):
        return _read(choice, ctx, cont, server)


def _read(choice: Any, ctx: list[int], cont: list[int], server: str) -> LogLik:
    k, n = len(ctx), len(ctx) + len(cont)
    prompt = choice.get("prompt_logprobs")
    lp = choice.get("logprobs") or {}
    sent = len(prompt) if prompt is not None else len(lp.get("tokens") or [])
    if sent != n:
        _misaligned(server, n, f"{sent} prompt logprobs")
    values: list[float] = []
    greedy = True
    if prompt is not None:
        for want, position in zip(cont, prompt[k:n], strict=True):
            picked = (position or {}).get(str(want))
            if picked is None or picked.get("logprob") is None:
                _misaligned(server, n, f"no logprob for token {want}")
            values.append(check_logprob(picked["logprob"], server, f"continuation token {want}"))
            greedy = greedy and _top1(picked, position)
    else:
        tokens, tops = lp["tokens"][k:n], (lp.get("top_logprobs") or [None] * n)[k:n]
        if tokens != [f"token_id:{t}" for t in cont]:
            _misaligned(server, n, f"tokens {tokens} where {cont} were sent")
        for want, value, top in zip(cont, lp["token_logprobs"][k:n], tops, strict=True):
            if value is None:
                _misaligned(server, n, "a None logprob in the continuation")
            values.append(check_logprob(value, server, f"continuation token {want}"))
            greedy = greedy and bool(top) and value >= max(top.values())
    return sum(values), greedy, len(cont)


def distributions_payload(tokens: Sequence[int], *, top_k: int, model: str | None) -> dict[str, Any]:
    """The ``/v1/completions`` body for the prompt logprobs of ``tokens`` with the top ``top_k``
    per position (echo with ``max_tokens: 0`` generates nothing: 0.33.0 and 0.34.0
    ``CompletionRequest.to_sampling_params``); pure for tests."""
    body: dict[str, Any] = {
        "prompt": [int(t) for t in tokens],
        "max_tokens": 0,
        "echo": True,
        "prompt_logprobs": top_k,
        "temperature": 0.0,
    }
    return {"model": model, **body} if model else body


def read_positions(
    choice: Any, tokens: Sequence[int], start: int, *, top_k: int, server: str = "vLLM"
) -> list[Position]:
    """The positions of ``tokens[start:]`` from one choice's ``prompt_logprobs`` (module
    docstring): the forced token's own entry, and the entries of rank <= ``top_k`` best first."""
    forced = [int(t) for t in tokens[start:]]
    with parsing(server, "/v1/completions prompt logprobs"):
        prompt = choice.get("prompt_logprobs")
        if not isinstance(prompt, list) or len(prompt) != len(tokens):
            _misaligned(
                server, len(tokens), f"{len(prompt) if isinstance(prompt, list) else 0} prompt logprobs"
            )
        answered = []
        for want, position in zip(forced, prompt[start:], strict=True):
            entries = {int(k): v for k, v in (position or {}).items()}
            if want not in entries:
                _misaligned(server, len(tokens), f"no logprob for token {want}")
            ranked = sorted(
                (int(v["rank"]), t, v["logprob"]) for t, v in entries.items() if int(v["rank"]) <= top_k
            )
            answered.append((want, entries[want]["logprob"], [(t, lp) for _, t, lp in ranked]))
    return check_positions(answered, forced, server, top_k=top_k)


def _misaligned(server: str, n: int, what: str) -> NoReturn:
    raise invalid(
        server,
        f"answered prompt logprobs that do not line up with the {n} prompt tokens sent ({what}); "
        f"a vLLM that does not echo prompt logprobs for token-id prompts does this: install vLLM {TESTED_VERSION}",
    )


def _top1(picked: dict[str, Any], position: dict[str, Any]) -> bool:
    """Greedy: vLLM's rank is 1, or no candidate listed at this position scores higher. The second
    is needed because vLLM ranks a token tied for best 2 or more (module docstring)."""
    if picked.get("rank") is not None and int(picked["rank"]) == 1:
        return True
    return float(picked["logprob"]) >= max(float(v["logprob"]) for v in position.values())


class VLLMScorer(OpenAIScorer):
    """Loglikelihood, generation, chat and tokenization against one vLLM server; generation and
    chat are ``OpenAIScorer``'s with the served model named (``top_p``, ``top_k``, ``min_p`` are
    vLLM's sampling fields on the completions request, and vLLM trims its own stop strings)."""

    label = "vLLM"
    prefill_fields = MappingProxyType({"continue_final_message": True, "add_generation_prompt": False})
    """Continue the final assistant message, and open no new turn: vLLM refuses the first with the
    default ``add_generation_prompt: true`` (module docstring)."""

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, retry: RetryPolicy | None = None
    ) -> None:
        served = handle.info.get("served_model")
        self.model = str(served) if served else None
        super().__init__(handle, concurrency=concurrency, seed=seed, retry=retry)

    def _with_model(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` naming the served model, as ``/v1/models`` named it at readiness."""
        return {"model": self.model, **body} if self.model else body

    async def _tokenize(self, text: str) -> list[int]:
        data = await self.http.post(
            "/tokenize", self._with_model({"prompt": text, "add_special_tokens": False})
        )
        return token_ids(data, self.server)

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self.http.post("/detokenize", self._with_model({"tokens": tokens}))
        return str(data["prompt"])

    async def _logprobs(self, body: dict[str, Any]) -> Any:
        """``/v1/completions`` asking for logprobs; vLLM's refusal of more than its ``--max-logprobs``
        gets a fix naming that flag, which evalgate does not set (vLLM's default is 20)."""
        try:
            return await self.http.post("/v1/completions", body)
        except RequestFailed as exc:
            over = _OVER_MAX.search(str(exc))
            if over is None:
                raise
            fewer = f", or lower [suites.drift] top_k to {over[2]} or less" if int(over[2]) > 0 else ""
            raise RequestFailed(
                str(exc),
                fix=f"this vLLM serves at most {over[2]} logprobs per position: start it with "
                f"--max-logprobs {over[1]} or more (a variant's args in evalgate.toml, or the attached "
                f"server's own flags){fewer}",
                detail=exc.detail,
            ) from exc

    async def _score_splits(self, splits: list[Split]) -> list[LogLik]:
        """One ``/v1/completions`` with a list of prompts, so vLLM's prefix cache computes the
        context once; the choices come back in any order, each with its ``index``."""
        data = await self._logprobs(loglikelihood_payload(splits, self.model))
        with parsing(self.server, "/v1/completions choices"):
            choices = sorted(data.get("choices") or [], key=lambda c: int(c.get("index", 0)))
        if len(choices) != len(splits):
            raise invalid(
                self.server,
                f"answered {len(choices)} choices for a batch of {len(splits)} prompts "
                f"(a vLLM that does not batch token-id prompts: install vLLM {TESTED_VERSION})",
            )
        return [
            read_continuation_logprobs(c, *split, server=self.server)
            for c, split in zip(choices, splits, strict=True)
        ]

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """Teacher forcing as prompt logprobs: one ``/v1/completions`` over all of ``tokens``,
        read from ``start`` on (module docstring)."""
        _, forced = forced_split(tokens, start, top_k)
        if not forced:
            return []
        data = await self._logprobs(distributions_payload(tokens, top_k=top_k, model=self.model))
        with parsing(self.server, "/v1/completions choices"):
            choices = data.get("choices") or []
        if len(choices) != 1:
            raise invalid(self.server, f"answered {len(choices)} choices for one prompt")
        return read_positions(choices[0], tokens, start, top_k=top_k, server=self.server)

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """One greedy ``/v1/completions`` after the ids ``prompt``: each generated token with its
        logprob and top ``top_k`` from the decode step that produced it (``_decode``)."""
        ids = decode_prompt(prompt, max_tokens=max_tokens, top_k=top_k)
        data = await self._logprobs(decode_payload(ids, max_tokens=max_tokens, top_k=top_k, model=self.model))
        return read_decoded(data, max_tokens=max_tokens, top_k=top_k, server=self.server)

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        """One timed ``/v1/completions`` of ``prompt_ids`` under ``cache_salt``. vLLM 0.33.0 and 0.34.0 mix
        the salt into the first block's hash (``v1/core/kv_cache_utils.py``; a hit is whole blocks, 16
        tokens by default in 0.33, 64 in 0.34) and refuses one over 128
        characters or holding ``@ / \\`` or NUL (``validate_cache_salt`` in
        ``entrypoints/generate/base/protocol.py``); it reports
        ``usage.prompt_tokens_details.cached_tokens`` only with ``--enable-prompt-tokens-details``
        (``PromptTokenUsageInfo``; else None here)."""
        body: dict[str, Any] = {
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        if salt is not None:
            body["cache_salt"] = salt
        start = time.perf_counter()
        data = await self.http.post("/v1/completions", self._with_model(body))
        return completion_observation(data, time.perf_counter() - start, self.server)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        """The prompt vLLM builds for these messages: ``/tokenize`` renders them as a chat completion
        would, and ``/detokenize`` keeps the template's special tokens."""
        try:
            data = await self.http.post(
                "/tokenize", self._with_model({"messages": messages, "add_generation_prompt": True})
            )
        except RequestFailed as exc:
            raise PreflightError(
                f"vLLM would not render a chat prompt through /tokenize ({exc})",
                fix="the model needs a chat template: set chat_template in " + _SETTINGS,
            ) from exc
        return await self.detokenize(token_ids(data, self.server))
