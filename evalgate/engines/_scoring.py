"""What the HTTP scorers (llama.cpp, SGLang, vLLM) share, so that every engine tokenizes, splits
and reports a completion by the same rules and a difference between arms is the server's alone.
SGLang's and vLLM's scorers also share their batching of a question's choices (BatchScorer).

Every answer is checked where it is read, item by item and not only in the preflight: a body that
is not JSON, no choices, a text that is not a string, a logprob that is not a finite number <= 0,
or not one logprob per token raises ``InvalidResponse`` naming the server. The loop retries such
an item and then records it as an error: garbage never becomes a score.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any, ClassVar

from evalgate.engines._launcher import ServerHandle
from evalgate.engines._tokens import TokenCache
from evalgate.engines.api import CacheObservation, LogLik, Position, Scorer, Split
from evalgate.engines.client import GatewayRoute, HttpClient, RetryPolicy
from evalgate.errors import InvalidResponse, PreflightError

__all__ = [
    "LOGPROB_TOLERANCE",
    "TOP_TOLERANCE",
    "BatchScorer",
    "TokenCache",
    "check_chat",
    "check_logprob",
    "check_positions",
    "completion_observation",
    "completion_result",
    "first_choice",
    "forced_split",
    "invalid",
    "lm_eval_split",
    "parsing",
    "server_client",
    "token_ids",
]

LOGPROB_TOLERANCE = 1e-4
"""How far above 0 a logprob may be (a server's float rounding); more is not a log-probability."""


def invalid(server: str, what: str) -> InvalidResponse:
    """``the <server> server <what>``, with the fix; the loop records the item as an error."""
    return InvalidResponse(
        f"the {server} server {what}",
        fix=f"check the {server} server (engine build, model files, numerics of its quantization); an item "
        "so answered is retried, then recorded as an error and never scored (--resume retries it)",
    )


class _JsonClient(HttpClient):
    """The scorers' client: an answer that is not a JSON value is an InvalidResponse naming the server."""

    def __init__(self, *args: Any, server: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server = server

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        try:
            data = await super().request(method, path, *args, **kwargs)
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError: a 200 whose body is not JSON
            raise invalid(self.server, f"answered {method} {path} with a body that is not JSON") from exc
        if data is None:
            raise invalid(self.server, f"answered {method} {path} with an empty body")
        return data


def server_client(
    handle: ServerHandle, *, concurrency: int, seed: int, retry: RetryPolicy | None = None
) -> HttpClient:
    """The client for one launched server: its key, its log tail when a request finds it dead, and
    an InvalidResponse naming ``handle.name`` for a body that is not JSON. An arm behind smg
    (``handle.info["gateway"]``, engines/gateway) is reached through the gateway, with its workers'
    requests in flight (``concurrency`` each)."""
    gateway = handle.info.get("gateway")
    route = None
    if isinstance(gateway, dict) and gateway.get("direct_url"):
        route = GatewayRoute(direct_url=str(gateway["direct_url"]), model=str(gateway.get("model") or ""))
        concurrency *= max(1, len(gateway.get("workers") or ()))
    return _JsonClient(
        handle.base_url,
        api_key=handle.api_key,
        gateway=route,
        concurrency=concurrency,
        retry=retry or handle.retry,
        alive=handle.alive,
        on_dead=handle.died,
        seed=seed,
        server=handle.name,
    )


def _show(value: Any) -> str:
    """A value as an error names it, never quoting the server's text (it may hold private items)."""
    if value is None:
        return "null"
    if isinstance(value, (bool, int, float)):
        return repr(value)
    return f"a {type(value).__name__}"


@contextlib.contextmanager
def parsing(server: str, what: str) -> Iterator[None]:
    """Reading ``what`` from an answer: a field missing or of the wrong type is an InvalidResponse."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        # OverflowError: int() of an infinite count (``cached_tokens: Infinity``)
        raise invalid(server, f"answered {what} in an unexpected shape ({type(exc).__name__})") from exc


def check_logprob(value: Any, server: str, what: str) -> float:
    """A log-probability as answered: a finite number <= 0 (``LOGPROB_TOLERANCE`` of rounding)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(server, f"answered a logprob of {_show(value)} for {what}")
    v = float(value)
    if not math.isfinite(v) or v > LOGPROB_TOLERANCE:
        raise invalid(server, f"answered a logprob of {v!r} for {what}: not a finite number <= 0")
    return v


TOP_TOLERANCE = 1e-3
"""How far a top list may be out of order, or the forced token's logprob from its own entry in
the list (float32 rounding on the server); more is not one distribution."""


def forced_split(tokens: Sequence[int], start: int, top_k: int) -> tuple[list[int], list[int]]:
    """(context, forced) of a teacher-forcing request: ``tokens[:start]`` and ``tokens[start:]``.
    ``start >= 1`` (the first token has no context to be scored from) and ``top_k >= 1``; a bad
    value is the caller's mistake (ValueError), never the server's."""
    if start < 1 or start > len(tokens):
        raise ValueError(f"start={start} is outside 1..{len(tokens)} for {len(tokens)} tokens")
    if top_k < 1:
        raise ValueError(f"top_k={top_k} must be at least 1")
    return [int(t) for t in tokens[:start]], [int(t) for t in tokens[start:]]


def _token_id(value: Any, server: str, what: str) -> int:
    """A vocabulary index: a whole number from 0 to 2**31 - 1 (a negative id, or 2**53 and 2**53 + 1,
    which float64 would make one id, is no token: #43)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise invalid(server, f"answered a token id of {_show(value)} for {what}")
    return value


def token_ids(data: Any, server: str, path: str = "/tokenize") -> list[int]:
    """The ``tokens`` of a ``/tokenize`` answer: a list of whole numbers >= 0, else an
    InvalidResponse (never ``int()`` of a string, a float or a bool: 1.5 and true are no token)."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise invalid(server, f"answered {path} with {_show(tokens)} as the tokens")
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise invalid(server, f"answered {path} with a token id of {_show(t)}")
    return tokens


def check_positions(
    answered: Sequence[tuple[Any, Any, Any]],
    forced: Sequence[int],
    server: str,
    *,
    top_k: int,
    kind: str = "forced",
) -> list[Position]:
    """Teacher-forced positions as a server answered them, each ``(token id or None when the
    answer does not say, logprob of the forced token, [(id, logprob), ...] best first)``, checked
    and turned into ``Position``s; anything else is an InvalidResponse naming ``server``.

    One entry per forced token, the id (when given) the one forced; every logprob a finite number
    <= 0; exactly ``top_k`` alternatives with whole-number ids, no id twice, most likely first,
    their probabilities summing to at most 1; and the forced token's logprob the same as its own
    entry in the list, or no higher than the last entry when it is not listed (a server that left
    it at a default such as 0 for a token outside the top k). ``kind`` names the tokens in errors
    ("forced", or "generated" for the decode path's, ``engines._decoding``)."""
    if len(answered) != len(forced):
        raise invalid(server, f"returned {len(answered)} positions for {len(forced)} {kind} tokens")
    out: list[Position] = []
    for i, (want, (got, logprob, top)) in enumerate(zip(forced, answered, strict=True)):
        what = f"{kind} token {want} at position {i}"
        if got is not None and _token_id(got, server, what) != want:
            raise invalid(server, f"answered token {got} at position {i} where {want} was {kind}")
        lp = check_logprob(logprob, server, what)
        if not isinstance(top, (list, tuple)) or len(top) != top_k:
            shown = len(top) if isinstance(top, (list, tuple)) else _show(top)
            raise invalid(server, f"answered {shown} alternatives at position {i} where {top_k} were asked")
        with parsing(server, f"the alternatives at position {i}"):
            pairs = tuple(
                (
                    _token_id(t, server, f"an alternative at position {i}"),
                    check_logprob(v, server, f"token {t}"),
                )
                for t, v in top
            )
        ids = [t for t, _ in pairs]
        if len(set(ids)) != len(ids):
            raise invalid(server, f"listed a token twice among the alternatives at position {i}")
        values = [v for _, v in pairs]
        if any(b > a + TOP_TOLERANCE for a, b in pairwise(values)):
            raise invalid(server, f"answered alternatives out of order at position {i}")
        if math.fsum(math.exp(v) for v in values) > 1 + TOP_TOLERANCE:
            raise invalid(server, f"answered alternatives whose probabilities sum above 1 at position {i}")
        listed = dict(pairs).get(want)
        if (listed is not None and abs(listed - lp) > TOP_TOLERANCE) or (
            listed is None and lp > values[-1] + TOP_TOLERANCE
        ):
            raise invalid(
                server,
                f"answered a logprob of {lp!r} for {what} that disagrees with its alternatives "
                "(not one distribution)",
            )
        out.append((lp, pairs))
    return out


def first_choice(data: Any, server: str, path: str) -> dict[str, Any]:
    """``choices[0]`` of an OpenAI answer; none (``choices: []``, null, missing) is an InvalidResponse."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        shown = "[]" if choices == [] else _show(choices)
        raise invalid(server, f"answered {path} with no choice (choices: {shown})")
    return choices[0]


def check_chat(data: Any, server: str) -> dict[str, Any]:
    """A ``/v1/chat/completions`` answer with a first choice holding a message whose content is a
    string, and whose tool calls are a list if any. Null content is no text only beside tool calls
    or reasoning (vLLM's for a model cut off while thinking); alone it is no answer, an
    InvalidResponse like null ``text`` (never graded as an empty answer)."""
    message = first_choice(data, server, "/v1/chat/completions").get("message")
    if not isinstance(message, dict):
        raise invalid(server, f"answered /v1/chat/completions with {_show(message)} as the message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise invalid(server, f"answered /v1/chat/completions with {_show(content)} as the content")
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise invalid(server, f"answered /v1/chat/completions with {_show(calls)} as the tool calls")
    thought = any(isinstance(message.get(k), str) and message[k] for k in ("reasoning_content", "reasoning"))
    if content is None and not calls and not thought:
        raise invalid(server, "answered /v1/chat/completions with null as the content (no tool calls)")
    return dict(data)


def _count(value: Any) -> int:
    """A token count from ``usage``; anything but a whole number >= 0 reads as 0 (it is not scored)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def lm_eval_split(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's rule: the context's trailing whitespace moves to the start of the continuation."""
    n_space = len(context) - len(context.rstrip())
    if n_space:
        return context[:-n_space], context[-n_space:] + continuation
    return context, continuation


class BatchScorer(Scorer):
    """A scorer whose server scores a question's choices in ONE request (SGLang, vLLM), so its
    prefix cache computes the shared context once.

    A subclass names its engine (``label``), tokenizes through its server (``_tokenize``, without
    special tokens) and scores a batch (``_score_splits``: one result per split, in order)."""

    label: ClassVar[str]

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, retry: RetryPolicy | None = None
    ) -> None:
        self.handle = handle
        self.server = handle.name
        """Who an InvalidResponse names: the arm (and URL, for an attached shard)."""
        self.concurrency = concurrency
        self.http = server_client(handle, concurrency=concurrency, seed=seed, retry=retry)
        self._tokens = TokenCache(self._tokenize)

    async def aclose(self) -> None:
        await self._tokens.aclose()
        await self.http.__aexit__()

    def gateway_route(self) -> GatewayRoute | None:
        return self.http.gateway

    async def _tokenize(self, text: str) -> list[int]:
        raise NotImplementedError

    async def _score_splits(self, splits: list[Split]) -> list[LogLik]:
        raise NotImplementedError

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens (lm-eval's default); one request in flight per text."""
        return await self._tokens.get(text)

    async def context_length(self) -> int | None:
        """``max_model_len`` of the served model in ``/v1/models`` (SGLang: the model's context_len
        or --context-length; vLLM: --max-model-len or the model's), None when absent."""
        data = await self.http.get("/v1/models")
        cards = data.get("data") if isinstance(data, dict) else None
        value = cards[0].get("max_model_len") if cards and isinstance(cards[0], dict) else None
        return int(value) if isinstance(value, int) and value > 0 else None

    async def split_tokens(self, context: str, continuation: str) -> Split:
        """lm-eval's split: the continuation is what follows the context's tokens in the tokenized
        whole (after ``lm_eval_split``); both are tokenized at once."""
        context, continuation = lm_eval_split(context, continuation)
        whole, ctx = await asyncio.gather(self.tokenize(context + continuation), self.tokenize(context))
        return ctx, whole[len(ctx) :]

    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        """(sum logprob of continuation given context, all greedy, n continuation tokens)."""
        return (await self.loglikelihood_many(context, [continuation]))[0]

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        """Every continuation of one context in ONE ``_score_splits`` call (a question's choices);
        an empty continuation scores (0.0, True, 0) and is not sent."""
        splits = await asyncio.gather(*(self.split_tokens(context, c) for c in continuations))
        todo = [i for i, (_, cont) in enumerate(splits) if cont]
        results: list[LogLik] = [(0.0, True, 0)] * len(splits)
        if not todo:
            return results
        if any(not splits[i][0] for i in todo):
            raise PreflightError(
                f"cannot score a continuation with an empty context on {self.label}",
                fix="the first prompt token has no logprob; give the suite a non-empty context",
            )
        for i, result in zip(todo, await self._score_splits([splits[i] for i in todo]), strict=True):
            results[i] = result
        return results


def completion_result(data: Any, stop: Sequence[str], server: str = "inference") -> dict[str, Any]:
    """Text, token counts and finish reason of a ``/v1/completions`` answer, the text cut at the
    first stop string; a text that is not a string (null) is an InvalidResponse, never "None".

    Servers trim their own stop strings, but not alike (llama-server takes only four), so every
    engine cuts here too and the arms' texts end by the same rule. ``finish_reason`` is the
    server's ("length": the completion hit ``max_tokens``), or "stop" where the cut found a stop."""
    choice = first_choice(data, server, "/v1/completions")
    text = choice.get("text")
    if not isinstance(text, str):
        raise invalid(server, f"answered /v1/completions with {_show(text)} as the text")
    finish = choice.get("finish_reason")
    for s in stop:
        if s and s in text:
            text, finish = text[: text.index(s)], "stop"
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return {
        "text": text,
        "prompt_tokens": _count(usage.get("prompt_tokens", 0)),
        "completion_tokens": _count(usage.get("completion_tokens", 0)),
        "finish_reason": finish if isinstance(finish, str) else None,
    }


def completion_observation(data: Any, latency: float, server: str) -> CacheObservation:
    """A ``/v1/completions`` answer as the cache probes read it: the latency, the cached and prompt
    tokens of OpenAI's ``usage`` (``prompt_tokens_details.cached_tokens``; None when the server
    reports none) and the text, shared by the engines that speak that dialect."""
    with parsing(server, "/v1/completions usage"):
        usage = data.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        prompt = usage.get("prompt_tokens")
        text = ((data.get("choices") or [{}])[0] or {}).get("text")
        return CacheObservation(
            latency,
            int(cached) if cached is not None else None,
            int(prompt) if prompt is not None else None,
            str(text) if text is not None else None,
        )
