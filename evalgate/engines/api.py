"""The engine contract: what the compare loop, the suites and the preflight may ask of an engine
and of the scorer it gives for one running server. Nothing else is asked, and nothing is probed
with ``getattr``: a call that only some engines need has a default here (an engine or scorer
class inherits it by naming the protocol as its base), so every engine answers every call.

An engine is one package under ``evalgate/engines/`` (``llamacpp``, ``sglang``, ``vllm``,
``attach``, ``gateway`` for N servers of one of them behind smg, plus ``fake`` for tests) holding
its launch, scorer, diagnosis and capacity code.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from evalgate.engines._launcher import LaunchSlot, ServerHandle, flags
from evalgate.errors import ConfigError
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec, Variant

if TYPE_CHECKING:
    from evalgate.engines.client import GatewayRoute

__all__ = [
    "CPU_SMOKE_ITEMS",
    "AttachDialect",
    "CacheObservation",
    "Decoded",
    "DriftPath",
    "Engine",
    "Generation",
    "Get",
    "LaunchSlot",
    "LogLik",
    "NoCacheIsolation",
    "Position",
    "Scorer",
    "ServerHandle",
    "Split",
    "scorer_ignoring_determinism",
]

CPU_SMOKE_ITEMS: Mapping[str, int] = MappingProxyType({"gsm8k": 10, "arc_easy": 90})
"""A CPU engine's smoke run: a 5-shot GSM8K item (~980 prompt tokens, prefilled at a few hundred
tokens/s on 2 cores) costs about eleven ARC-Easy items, and at 50 items its accuracy row can only
see changes of ~25 points; so the CPU smoke run asks 10 of them and 90 ARC-Easy items, the same
150 items with drift's 50 (docs/measurements.md, "The first command against its physical limit")."""

LogLik = tuple[float, bool, int]
"""(sum logprob of the continuation, every token greedy, number of continuation tokens)."""
Split = tuple[list[int], list[int]]
"""(context token ids, continuation token ids)."""
Position = tuple[float, tuple[tuple[int, float], ...]]
"""One teacher-forced position: (logprob of the token that is there, the model's top-k
(token id, logprob) pairs at it, most likely first). The drift suite compares them across arms."""
DriftPath = Literal["prefill", "decode"]
"""Which computation a measured distribution came from: the prompt's forward pass (prefill, the
freshly computed keys and values) or a generation step that reads the KV cache back (decode)."""


@dataclass(frozen=True)
class Decoded:
    """A greedy generation read on the decode path (the drift suite's decode row): the tokens the
    server generated and, per generated token, its logprob and the model's top-k at that step."""

    tokens: tuple[int, ...]
    """The generated token ids, in order (the stop token included when it was generated)."""
    positions: tuple[Position, ...]
    """One per generated token: (its logprob, the top-k (token id, logprob) pairs, best first),
    from the model's raw logits at that step, never a processed or masked distribution. The first
    comes from the prompt's own forward pass; every later one from a decode step that reads the
    keys and values before it back from the KV cache."""
    finish_reason: str
    """"stop" at a stop token (included in ``tokens``), "length" at the token cap (``max_tokens``,
    or the server's context window)."""


@dataclass(frozen=True)
class Generation:
    """How ``Scorer.generate`` samples one completion: one value the suite builds and the layers
    that only route a request (attach's shards, a gateway) pass on unchanged."""

    max_tokens: int
    """Generated tokens at most; ``finish_reason`` is "length" at the cap."""
    stop: tuple[str, ...] = ()
    """Strings that end the completion: every engine cuts at the first (``completion_result``)."""
    temperature: float = 0.0
    seed: int = 0
    sampling: Mapping[str, float] | None = None
    """Further sampler fields (top_p, top_k, min_p), sent under the engine's own names."""


@dataclass(frozen=True)
class CacheObservation:
    """One request timed for the cache-isolation probe (``evalgate probe cache``)."""

    latency_s: float
    """Wall time of the request as the client saw it."""
    cached_tokens: int | None
    """Prompt tokens the server says it read from its prefix cache; None when it reports none."""
    prompt_tokens: int | None = None
    text: str | None = None
    """The greedy completion (the warm/cold answers check compares it)."""


class NoCacheIsolation(ConfigError):
    """The server has no per-tenant cache key: there is no salt to test (exit 2)."""


class Scorer(Protocol):
    """The engine-neutral calls made on one server: by suites (loglikelihood, generate, chat), by
    the preflight (tokenize, detokenize, render_chat) and by the loop (flush_cache, aclose)."""

    concurrency: int
    """Requests this server gets in flight at once (the loop's semaphore)."""

    forced_path: DriftPath = "prefill"
    """What ``token_distributions`` measures on this engine: ``prefill`` where the forced tokens
    are prompt tokens (SGLang's ``input_top_logprobs``, vLLM's ``prompt_logprobs``: the forward pass
    over the prompt, which on a GPU attends over keys and values just computed, not read back from
    an FP8 cache), ``decode`` where they are generated one step at a time (llama.cpp's token-id
    grammar). The drift suite adds ``decode_distributions`` where this is ``prefill``."""

    async def loglikelihood(self, context: str, continuation: str) -> LogLik: ...

    async def loglikelihood_many(self, context: str, continuations: Sequence[str]) -> list[LogLik]:
        """Every continuation of one context (a question's choices); engines that score them in one
        request (SGLang, vLLM) override this, the default scores them one by one, concurrently."""
        return list(await asyncio.gather(*(self.loglikelihood(context, c) for c in continuations)))

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """Teacher forcing: for each i in ``range(start, len(tokens))`` (``start >= 1``), the model's
        next-token distribution given ``tokens[:i]``: the logprob of ``tokens[i]`` and the top
        ``top_k`` alternatives, read from the model's logits (never a grammar- or sampler-masked
        distribution). Each engine checks its answer where it reads it (``engines._scoring``).
        The default refuses: an engine that cannot teacher-force cannot run the drift suite."""
        raise ConfigError(
            f"{type(self).__name__} cannot return teacher-forced token distributions",
            fix="drop the drift suite from --suites for this engine",
        )

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """The decode path: greedy generation of up to ``max_tokens`` tokens after the token ids
        ``prompt``, each generated token with its logprob and the top ``top_k`` alternatives from
        the model's raw logits at that step (no temperature, penalty or grammar applied), checked
        where it is read (``engines._scoring``). The drift suite pairs the arms on the shared
        prefix of their generations. The default refuses: such an engine's drift reads one path."""
        raise ConfigError(
            f"{type(self).__name__} cannot return per-step distributions of a greedy generation",
            fix="drop the drift suite from --suites for this engine",
        )

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        """``{"text", "prompt_tokens", "completion_tokens", "finish_reason"}`` (and ``truncated_tokens``
        if any); ``finish_reason`` "length" when the completion hit ``gen.max_tokens``. An answer that
        cannot be scored raises ``InvalidResponse`` (``engines._scoring``)."""
        ...

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI ``/v1/chat/completions`` answer for ``payload``."""
        ...

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        """The prompt text the server's chat template makes of ``messages``."""
        ...

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens."""
        ...

    async def detokenize(self, tokens: list[int]) -> str: ...

    async def flush_cache(self) -> str | None:
        """Empty the server's prefix cache so one suite does not warm the next: "flushed", or why
        not (the loop records it per suite); None when the server has no cache to flush (the default)."""
        return None

    async def cached_request(
        self, prompt_ids: Sequence[int], *, salt: str | None, max_tokens: int = 1
    ) -> CacheObservation:
        """Send ``prompt_ids`` under the cache namespace ``salt`` (None: the shared one), greedy,
        ``max_tokens`` out, and time it. The default refuses: a server without a per-request cache
        salt shares its prefix cache among every request it serves (llama-server's slots and its
        host-memory prompt cache), so tenants are isolated only by a server each or no cache."""
        raise NoCacheIsolation(
            f"{type(self).__name__}'s server takes no cache salt: its prefix cache is one pool shared by "
            "every request, so one tenant's prompts warm the cache for all",
            fix="give each tenant its own server, or turn prompt caching off; the probe tests SGLang and vLLM salts",
        )

    async def cold_request(self, prompt_ids: Sequence[int], *, max_tokens: int = 1) -> CacheObservation:
        """``prompt_ids`` answered greedily with nothing read from the prefix cache: the cold
        condition of ``evalgate probe warm-cold``. The default sends it under a salt of its own, a
        namespace nothing else has written (refused where the server takes no salt); an engine with
        a per-request cache switch (llama-server's ``cache_prompt``) overrides it."""
        return await self.cached_request(prompt_ids, salt=secrets.token_hex(16), max_tokens=max_tokens)

    async def server_info(self) -> dict[str, Any]:
        """The server's own account of its settings, secrets masked; {} when it gives none."""
        return {}

    async def context_length(self) -> int | None:
        """Tokens of context one request may use (a llama.cpp slot, SGLang's or vLLM's model
        length), as the running server reports it; None when it does not say."""
        return None

    def set_prompt_cache(self, on: bool) -> bool | None:
        """Turn the server's prompt cache on or off for this scorer's later requests (llama-server's
        per-request ``cache_prompt``) and return the setting before; None where the server has no
        such switch (the default), and then nothing changes. A gateway's fixed probe turns it off."""
        return None

    def gateway_route(self) -> GatewayRoute | None:
        """How this scorer's requests reach an smg gateway (its client's ``GatewayRoute``, which
        refuses an answer from an unlisted worker and counts the others); None for one server."""
        return None

    def gateway_facts(self) -> tuple[dict[str, dict[str, Any]], dict[str, int]] | None:
        """An arm behind smg: each worker's answer to the fixed probe (by URL) and the answers per
        worker, for the manifest (``arm_routed``); None for one server (the default)."""
        return None

    async def aclose(self) -> None:
        """Release the client's connections."""
        return None


class Engine(Protocol):
    """One inference engine: its launch settings per variant, a launcher, and a scorer per server.

    ``launch`` is a context manager that stops the server on every exit path (``launch_server``
    in ``_launcher`` does it for engines that start a process)."""

    name: str
    """Recorded in the manifest; a resumed run must use the same engine."""

    def version(self) -> str: ...

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        """Everything that decides how ``variant``'s server starts, in comparable form."""
        ...

    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> contextlib.AbstractContextManager[ServerHandle]:
        """Start ``spec``'s server where ``slot`` says (its name, log folder, port, and worker of
        an arm behind a gateway)."""
        ...

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> Scorer: ...

    @property
    def concurrent_arms(self) -> bool:
        """Baseline and candidate may run at the same time (each has its own GPUs)."""
        return False

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        """The KV pool the running server reports (tokens, MiB, types), or None."""
        return None

    def diagnose(self, log: str) -> str | None:
        """One line naming the cause and the fix of a failure seen in the server's log."""
        return None

    def pressure(self, handle: ServerHandle) -> dict[str, Any] | None:
        """What the server's log says of its KV pool so far (``engines.pressure``: retractions or
        preemptions, peak usage), or None where the engine has no such log."""
        return None

    def diagnose_signal(self, sig: signal.Signals, log: str) -> str | None:
        """What a fatal signal means for this engine's server, beyond ``SIGNAL_CAUSES``."""
        return None

    def settle_host(self, *, previous_env: Sequence[tuple[str, str]] | None = None) -> dict[str, Any] | None:
        """Choose the launch settings that depend on this machine, once per pair and before the
        launch specs (the CPU engine's OpenMP wait policy follows the measured load). A resumed run
        passes the original baseline's environment, so the original choice is kept. Returns what
        was measured and chosen, for the manifest's ``host``; None when nothing depends on it."""
        return None

    def check_pair(self, *, allow: Iterable[str] = ()) -> None:
        """Refuse a pair that differs beyond quantization in settings only the servers can tell
        (attach mode reads them back); launched pairs are checked on their LaunchSpecs already."""
        return None

    def launch_command(self, spec: LaunchSpec, *, name: str, port: int, api_key: str) -> list[str]:
        """The command ``launch`` would run for ``spec`` (``evalgate compare --dry-run`` prints it);
        the default names the engine and the spec's flags."""
        return [f"<{spec.engine}>", spec.model, *flags(spec.args)]

    def describe(self, spec: LaunchSpec) -> str | None:
        """What the arm's server computes in, named as it runs (weights and KV cache), not as the
        variant is called: a reader of "bf16 vs fp8kv" on the CPU default must learn that the
        weights are F16 expanded from Q4_1 and the cache llama.cpp's q8_0. None where the launch
        settings do not tell (an attached server: evalgate launched nothing)."""
        return None

    def provenance(self, handle: ServerHandle) -> Provenance:
        """What the running server reports it runs (KV dtype and scales, attention backend, weight
        format, linear kernel, batch invariance, speculative decoding), read from its own log and
        info endpoints after readiness, never from the flags it was given. The default: nothing
        reported (every value None)."""
        return Provenance()

    def plan_notes(self, spec: LaunchSpec) -> list[str]:
        """What this engine pins or decides for ``spec`` that a reader of the command should know
        (--dry-run): e.g. the KV dtype made explicit, or where the KV scales come from."""
        return []

    def require_tool_parser(self, arm: str, spec: LaunchSpec) -> None:
        """Refuse (exit 2, naming the setting to add) an arm whose server will not turn a model's
        output into ``tool_calls``: the tool_calls suite would score no calls on both arms and pass.
        The default: the server always parses calls (llama-server's --jinja)."""
        return None

    def slot_context(self, spec: LaunchSpec) -> int | None:
        """Tokens of context one request may use on the server ``spec`` launches, known before
        launch (a llama.cpp slot; SGLang's or vLLM's configured length); None when unknown."""
        return None

    def default_gen_cap(self, preset: str) -> int | None:
        """A cap on generated tokens per item for ``preset`` when the user sets none (a CPU
        engine cannot afford long chains of thought in a smoke run); None: the suite's own."""
        return None

    def default_items(self, preset: str) -> Mapping[str, int]:
        """Items per suite for ``preset`` where this engine's costs call for other counts than the
        preset's when the user sets no ``--limit`` (a CPU smoke run spends its minutes on items
        that decide something); empty: the preset's count for every suite."""
        return {}

    def resuming(self) -> None:
        """``compare --resume`` continues a run with this engine (an arm behind smg then routes
        every item by its key, as the first session did); the default changes nothing."""
        return None

    def request_timeout_s(self) -> float:
        """How long one try of one request may take when ``[client] timeout_s`` is unset: short
        enough that a stalled server fails the run within minutes, long enough for one slow
        generation on this engine."""
        return 60.0


Get = Callable[[str], Any]
"""GET ``path`` on one server: its JSON, or None when it has no such endpoint."""


@dataclass(frozen=True)
class AttachDialect:
    """How attach mode recognises one engine's running server and reads its settings back; each
    engine package defines its own, so attach mode holds no engine's endpoints or fields."""

    name: str
    endpoint: str
    """The endpoint that identifies the engine (named in errors)."""
    read: Callable[[Get], dict[str, Any] | None]
    """The endpoint's answer if it proves the server is this engine, else None."""
    fingerprint: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], dict[str, Any]]
    """What is recorded, from that answer and the ``/v1/models`` cards."""
    settings: Callable[[Mapping[str, Any]], dict[str, Any]]
    """The recorded settings as flat comparable values."""
    concurrency: Callable[[Mapping[str, Any]], int]
    """Requests in flight per URL when the user gives none."""
    scorer: Callable[..., Scorer]
    """``scorer(handle, *, concurrency, seed, deterministic)``."""
    replica_keys: frozenset[str] = frozenset()
    """Settings that differ between replicas of one deployment: never compared."""
    quant_keys: frozenset[str] = frozenset()
    """Settings that may differ between the arms (besides the model and kernel backends)."""
    provenance: Callable[[Mapping[str, Any]], Provenance] = lambda fp: Provenance()
    """What the server ran, read from its fingerprint (``Engine.provenance``); nothing by default."""
    instance: Callable[[Mapping[str, Any]], str | None] = lambda fp: None
    """What tells this running server from every other, read from its fingerprint, or None where
    the engine reports nothing of the kind: two URLs with one instance reach one server."""


def scorer_ignoring_determinism(cls: Callable[..., Scorer]) -> Callable[..., Scorer]:
    """An ``AttachDialect.scorer`` for an engine whose requests have no switch --deterministic
    turns (SGLang, vLLM; llama-server's ``cache_prompt`` is one): there it changes only the
    concurrency, which attach mode sets itself."""

    def make(handle: ServerHandle, *, concurrency: int, seed: int, deterministic: bool) -> Scorer:
        del deterministic
        return cls(handle, concurrency=concurrency, seed=seed)

    return make
