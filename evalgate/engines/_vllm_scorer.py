"""Scoring against one vLLM server through its OpenAI-compatible API.

Loglikelihood: ``/v1/completions`` with token-id prompts, ``echo``, ``max_tokens: 0`` and
``prompt_logprobs``. vLLM then answers the prompt's logprobs and generates nothing (0.33.0
``OpenAIServingCompletion.request_output_to_completion_response``): ``choices[i].prompt_logprobs``
holds one ``{token_id: {logprob, rank, decoded_token}}`` per prompt token, the first None, and rank 1
means greedy. A question's choices go as one list of prompts, answered in order by ``index``.

The chat template is observed with ``/tokenize`` given ``messages`` (rendered as a chat completion
would be, then encoded) and ``/detokenize``, which keeps special tokens. vLLM's ``/tokenize``,
``/detokenize``, ``/health`` and ``/version`` are not behind the API key; ``/v1/*`` is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NoReturn

from evalgate.client import HttpClient, RequestFailed, RetryPolicy
from evalgate.engines._vllm_diagnose import TESTED_VERSION
from evalgate.engines.base import ServerHandle
from evalgate.errors import PreflightError

__all__ = ["VLLMScorer", "loglikelihood_payload", "read_continuation_logprobs"]

_SETTINGS = "evalgate.toml [vllm]"


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
    choice: dict[str, Any], ctx: list[int], cont: list[int]
) -> tuple[float, bool, int]:
    """Sum and greedy flag of ``cont`` from one choice: ``prompt_logprobs`` (with ranks), else the
    OpenAI ``logprobs`` layout, whose tokens read "token_id:N" (``return_tokens_as_token_ids``)."""
    k, n = len(ctx), len(ctx) + len(cont)
    prompt = choice.get("prompt_logprobs")
    lp = choice.get("logprobs") or {}
    sent = len(prompt) if prompt is not None else len(lp.get("tokens") or [])
    if sent != n:
        _misaligned(n, f"{sent} prompt logprobs")
    values: list[float] = []
    greedy = True
    if prompt is not None:
        for want, position in zip(cont, prompt[k:n], strict=True):
            picked = (position or {}).get(str(want))
            if picked is None or picked.get("logprob") is None:
                _misaligned(n, f"no logprob for token {want}")
            values.append(float(picked["logprob"]))
            greedy = greedy and _top1(picked, position)
    else:
        tokens, tops = lp["tokens"][k:n], (lp.get("top_logprobs") or [None] * n)[k:n]
        if tokens != [f"token_id:{t}" for t in cont]:
            _misaligned(n, f"tokens {tokens} where {cont} were sent")
        for value, top in zip(lp["token_logprobs"][k:n], tops, strict=True):
            if value is None:
                _misaligned(n, "a None logprob in the continuation")
            values.append(float(value))
            greedy = greedy and bool(top) and value >= max(top.values())
    return sum(values), greedy, len(cont)


def _misaligned(n: int, what: str) -> NoReturn:
    raise PreflightError(
        f"vLLM's prompt logprobs do not line up with the {n} prompt tokens sent ({what})",
        fix=f"this vLLM does not echo prompt logprobs for token-id prompts; install vLLM {TESTED_VERSION}",
    )


def _top1(picked: dict[str, Any], position: dict[str, Any]) -> bool:
    """Greedy: vLLM's rank is 1 (ties count), or without a rank no other candidate scores higher."""
    if picked.get("rank") is not None:
        return int(picked["rank"]) == 1
    return float(picked["logprob"]) >= max(float(v["logprob"]) for v in position.values())


class VLLMScorer:
    """Loglikelihood, generation, chat and tokenization against one vLLM server."""

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, retry: RetryPolicy | None = None
    ) -> None:
        self.handle = handle
        self.concurrency = concurrency
        served = handle.info.get("served_model")
        self.model = str(served) if served else None
        self.http = HttpClient(
            handle.base_url,
            api_key=handle.api_key,
            concurrency=concurrency,
            retry=retry,
            alive=handle.alive,
            on_dead=handle.died,
            seed=seed,
        )
        self._tok_cache: dict[str, asyncio.Future[list[int]]] = {}

    async def aclose(self) -> None:
        await self.http.__aexit__()

    def _with_model(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"model": self.model, **body} if self.model else body

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens (lm-eval's default); one request in flight per text."""
        fut = self._tok_cache.get(text)
        if fut is None:
            fut = self._tok_cache[text] = asyncio.ensure_future(self._tokenize(text))
        try:
            return await asyncio.shield(fut)
        except Exception:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                self._tok_cache.pop(text, None)
            raise

    async def _tokenize(self, text: str) -> list[int]:
        data = await self.http.post(
            "/tokenize", self._with_model({"prompt": text, "add_special_tokens": False})
        )
        return [int(t) for t in data["tokens"]]

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self.http.post("/detokenize", self._with_model({"tokens": tokens}))
        return str(data["prompt"])

    async def split_tokens(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split: trailing context whitespace moves to the continuation, which is what
        follows the context's tokens in the tokenized whole."""
        n_space = len(context) - len(context.rstrip())
        if n_space:
            continuation = context[-n_space:] + continuation
            context = context[:-n_space]
        whole, ctx = await asyncio.gather(self.tokenize(context + continuation), self.tokenize(context))
        return ctx, whole[len(ctx) :]

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        """(sum logprob of continuation given context, all greedy, n continuation tokens)."""
        return (await self.loglikelihood_many(context, [continuation]))[0]

    async def loglikelihood_many(
        self, context: str, continuations: Sequence[str]
    ) -> list[tuple[float, bool, int]]:
        """Every continuation of one context in ONE request (a question's choices, a list of prompts),
        so vLLM's prefix cache computes the shared context once."""
        splits = await asyncio.gather(*(self.split_tokens(context, c) for c in continuations))
        todo = [i for i, (_, cont) in enumerate(splits) if cont]
        results: list[tuple[float, bool, int]] = [(0.0, True, 0)] * len(splits)
        if not todo:
            return results
        if any(not splits[i][0] for i in todo):
            raise PreflightError(
                "cannot score a continuation with an empty context on vLLM",
                fix="the first prompt token has no logprob; give the suite a non-empty context",
            )
        data = await self.http.post(
            "/v1/completions", loglikelihood_payload([splits[i] for i in todo], self.model)
        )
        choices = sorted(data.get("choices") or [], key=lambda c: int(c.get("index", 0)))
        if len(choices) != len(todo):
            raise PreflightError(
                f"vLLM answered {len(choices)} choices for a batch of {len(todo)} prompts",
                fix=f"this vLLM does not batch token-id prompts; install vLLM {TESTED_VERSION}",
            )
        for i, choice in zip(todo, choices, strict=True):
            results[i] = read_continuation_logprobs(choice, *splits[i])
        return results

    async def generate(
        self, prompt: str, *, max_tokens: int, stop: list[str], temperature: float = 0.0, seed: int = 0
    ) -> dict[str, Any]:
        payload = {"prompt": prompt, "max_tokens": max_tokens, "stop": list(stop), "temperature": temperature}
        data = await self.http.post("/v1/completions", self._with_model({**payload, "seed": seed}))
        text = str(data["choices"][0]["text"])
        for s in stop:  # vLLM trims its stop strings already; this keeps every engine identical
            if s and s in text:
                text = text[: text.index(s)]
        usage = data.get("usage") or {}
        return {
            "text": text,
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
        }

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.http.post("/v1/chat/completions", self._with_model(payload)))

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
        return await self.detokenize([int(t) for t in data["tokens"]])
