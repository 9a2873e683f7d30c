"""A scripted engine with no process: the compare loop's test double. Not a built-in engine: a
test registers its scripted instance as ``--engine fake`` (``evalgate.engines.registered_engine``,
the tests' ``use`` fixture) for as long as the test runs.

It answers from a script, per arm: ``answer(arm, prompt)`` gives the text of every generation
and chat reply (None: the request fails after retries, as an overloaded server's would; raising
stops the run, as a kill would), and ``logprob(arm, context, continuation)`` scores every
continuation. The default script answers ``"fake"`` and prefers shorter continuations, which
passes the preflight. ``token_distributions`` answers a pseudo-distribution over a small
vocabulary drawn from a hash of the prefix (the same on every arm, in every process), which
``drift(arm)`` perturbs by a known amount per arm; ``decode_distributions`` generates greedily
from the same model, and ``decode_drift(arm, position)`` perturbs only those steps (a decode-only
fault: the teacher-forced distributions stay exact). Launches, grouped by the servers up at the same time, and every request
are recorded, so a test can say which arms ran together and which items each server was asked.

It stands in for the loop's bookkeeping only (resume, errors, --aa, sequential stops, concurrent
arms, sharding over URLs); the end-to-end tests prove the real engines.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from evalgate.engines._decoding import decode_prompt
from evalgate.engines._launcher import LaunchSlot, ServerHandle
from evalgate.engines.api import Decoded, Engine, Generation, LogLik, Position, Scorer
from evalgate.engines.attach import ShardedScorer
from evalgate.engines.client import RequestFailed
from evalgate.variants import LaunchSpec, Variant

__all__ = ["FakeCall", "FakeEngine", "FakeScorer", "decode_drift_from"]

Answer = Callable[[str, str], "str | None"]
"""(arm, prompt) -> the reply text; None: the request fails (RequestFailed)."""
LogProb = Callable[[str, str, str], float]
"""(arm, context, continuation) -> the continuation's log-probability."""
Drift = Callable[[str], float]
"""arm -> the scale of the noise added to its logits at every position (0: the shared model)."""
DecodeDrift = Callable[[str, int], float]
"""(arm, generated position) -> noise added on top of ``Drift`` at that step of a greedy generation."""

FAKE_VOCAB = 256
"""Token ids 0..255 share the fake model's probability; any other id is an unknown token."""
UNKNOWN_LOGPROB = -30.0
"""The logprob of a token outside the fake vocabulary (below every listed one)."""


class FakeCall(NamedTuple):
    """One request a fake server answered."""

    arm: str
    url: str
    kind: str
    """'loglikelihood', 'generate', 'chat', 'token_distributions' or 'decode_distributions' (prompt:
    the ids, comma-joined)."""
    prompt: str
    seed: int | None = None
    """A generation's sampling seed (common random numbers: the same on both arms per repeat)."""
    temperature: float | None = None


def fake_answer(arm: str, prompt: str) -> str | None:
    return "fake"


def no_drift(arm: str) -> float:
    return 0.0


def no_decode_drift(arm: str, position: int) -> float:
    return 0.0


def decode_drift_from(arm: str, position: int, scale: float) -> DecodeDrift:
    """A decode-only fault on ``arm``: noise of ``scale`` on every generated position from
    ``position`` (0-based) on, nothing before it and nothing on the other arms."""

    def drift(on: str, at: int) -> float:
        return scale if on == arm and at >= position else 0.0

    return drift


def fake_logprobs(digest: bytes, arm: str, drift: float) -> np.ndarray:
    """Log-softmax over ``FAKE_VOCAB`` of logits seeded by ``digest`` (the prefix's), plus noise
    of scale ``drift`` seeded by the digest and the arm: a pure function, stable across processes."""
    logits = np.random.default_rng(int.from_bytes(digest[:8], "big")).standard_normal(FAKE_VOCAB) * 3.0
    if drift:
        noise = hashlib.sha256(digest + arm.encode()).digest()
        logits = logits + drift * np.random.default_rng(int.from_bytes(noise[:8], "big")).standard_normal(
            FAKE_VOCAB
        )
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def prefix_digests(tokens: Sequence[int]) -> Iterator[bytes]:
    """The digest of ``tokens[:i]`` for i = 0, 1, ..., len(tokens): a hash chain (hashlib, not
    ``hash()``, so every process agrees)."""
    digest = hashlib.sha256(b"evalgate-fake").digest()
    yield digest
    for t in tokens:
        digest = _then(digest, t)
        yield digest


def _then(digest: bytes, token: int) -> bytes:
    return hashlib.sha256(digest + int(token).to_bytes(8, "big", signed=True)).digest()


def shorter_is_likelier(arm: str, context: str, continuation: str) -> float:
    """Passes the preflight (" Paris" scores above " potato") without a model."""
    return -float(len(continuation.strip()) or 1)


@dataclass
class FakeScorer(Scorer):
    """One fake server: answers from its engine's script and records each request."""

    engine: FakeEngine
    arm: str
    url: str
    concurrency: int = 4
    token_offset: int = 0
    """Shifts every token id: a server whose tokenizer differs from the others'."""
    closed: bool = False

    def _ask(self, kind: str, prompt: str) -> str:
        self.engine.calls.append(FakeCall(self.arm, self.url, kind, prompt))
        text = self.engine.answer(self.arm, prompt)
        if text is None:
            raise RequestFailed(f"the fake {self.arm} server failed {kind} after 3 tries", fix="")
        return text

    async def loglikelihood(self, context: str, continuation: str) -> LogLik:
        self.engine.calls.append(FakeCall(self.arm, self.url, "loglikelihood", context + continuation))
        return self.engine.logprob(self.arm, context, continuation), False, max(1, len(continuation.split()))

    async def token_distributions(self, tokens: Sequence[int], *, start: int, top_k: int) -> list[Position]:
        """Teacher forcing against the fake model (``fake_logprobs``): per position from ``start``,
        the forced token's logprob (``UNKNOWN_LOGPROB`` outside the vocabulary) and the top
        ``top_k`` (at most ``FAKE_VOCAB``), the arm's ``drift`` applied."""
        if start < 1 or start > len(tokens) or top_k < 1:
            raise ValueError(f"start={start}, top_k={top_k} for {len(tokens)} tokens")
        self.engine.calls.append(FakeCall(self.arm, self.url, "token_distributions", _ids_text(tokens)))
        scale = self.engine.drift(self.arm)
        out: list[Position] = []
        for i, digest in enumerate(prefix_digests(tokens[: len(tokens) - 1])):
            if i < start:
                continue
            lps = fake_logprobs(digest, self.arm, scale)
            best = np.argsort(-lps, kind="stable")[: min(top_k, FAKE_VOCAB)]
            tok = int(tokens[i])
            forced = float(lps[tok]) if 0 <= tok < FAKE_VOCAB else UNKNOWN_LOGPROB
            out.append((forced, tuple((int(t), float(lps[t])) for t in best)))
        return out

    async def decode_distributions(self, prompt: Sequence[int], *, max_tokens: int, top_k: int) -> Decoded:
        """Greedy generation from the fake model: each step's distribution is the one
        ``token_distributions`` reads at that prefix, plus the arm's ``decode_drift`` at that
        position; it stops after the engine's ``eos`` (finish "stop") or at ``max_tokens``."""
        ids = decode_prompt(prompt, max_tokens=max_tokens, top_k=top_k)
        self.engine.calls.append(FakeCall(self.arm, self.url, "decode_distributions", _ids_text(ids)))
        *_, digest = prefix_digests(ids)
        tokens: list[int] = []
        positions: list[Position] = []
        for i in range(max_tokens):
            lps = fake_logprobs(
                digest, self.arm, self.engine.drift(self.arm) + self.engine.decode_drift(self.arm, i)
            )
            best = np.argsort(-lps, kind="stable")[: min(top_k, FAKE_VOCAB)]
            tok = int(best[0])
            tokens.append(tok)
            positions.append((float(lps[tok]), tuple((int(t), float(lps[t])) for t in best)))
            if tok == self.engine.eos:
                return Decoded(tuple(tokens), tuple(positions), "stop")
            digest = _then(digest, tok)
        return Decoded(tuple(tokens), tuple(positions), "length")

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        if gen.temperature > 0 and self.engine.sampled is not None:  # a sampled answer: seed and arm decide
            self.engine.calls.append(
                FakeCall(self.arm, self.url, "generate", prompt, gen.seed, gen.temperature)
            )
            text = self.engine.sampled(self.arm, prompt, gen.seed)
            if text is None:
                raise RequestFailed(f"the fake {self.arm} server failed generate after 3 tries", fix="")
        else:
            text = self._ask("generate", prompt)
        for s in gen.stop:
            if s and s in text:
                text = text[: text.index(s)]
        return {"text": text, "prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The reply to the last user message (a final assistant message is a prefill the reply
        continues); sampled when the payload's temperature is above 0 and the script samples.
        ``reasoning`` in the script puts text in ``message.reasoning_content``, as a server with a
        reasoning parser does."""
        user = [m for m in payload["messages"] if m.get("role") != "assistant"] or payload["messages"]
        prompt = str(user[-1].get("content") or "")
        seed, temperature = payload.get("seed"), payload.get("temperature")
        self.engine.chats.append((self.arm, dict(payload)))
        if (temperature or 0) > 0 and self.engine.sampled is not None:
            self.engine.calls.append(FakeCall(self.arm, self.url, "chat", prompt, seed, temperature))
            text = self.engine.sampled(self.arm, prompt, int(seed or 0))
            if text is None:
                raise RequestFailed(f"the fake {self.arm} server failed chat after 3 tries", fix="")
        else:
            text = self._ask("chat", prompt)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        thought = self.engine.reasoning(self.arm, prompt) if self.engine.reasoning else None
        if thought is not None:
            message["reasoning_content"] = thought
        return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages) + "<|assistant|>"

    async def tokenize(self, text: str) -> list[int]:
        return [ord(ch) + self.token_offset for ch in text]

    async def detokenize(self, tokens: list[int]) -> str:
        return "".join(chr(t - self.token_offset) for t in tokens)

    async def context_length(self) -> int | None:
        return self.engine.context

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class FakeEngine(Engine):
    """Arms answered from a script; ``urls`` > 1 shards each arm over that many fake servers,
    as attach mode shards an arm over its URLs."""

    answer: Answer = fake_answer
    logprob: LogProb = shorter_is_likelier
    drift: Drift = no_drift
    """arm -> noise scale on its token distributions (``fake_logprobs``); 0 on every arm by default."""
    decode_drift: DecodeDrift = no_decode_drift
    """(arm, generated position) -> extra noise on ``decode_distributions`` only (``decode_drift_from``)."""
    eos: int | None = None
    """The token id that ends a greedy generation (finish "stop"); None: each runs to ``max_tokens``."""
    sampled: Callable[[str, str, int], str | None] | None = None
    """(arm, prompt, seed) -> the reply to a generation sampled at temperature > 0; None: ``answer``."""
    reasoning: Callable[[str, str], str | None] | None = None
    """(arm, prompt) -> a chat reply's ``reasoning_content`` (None: the reply has none)."""
    concurrent: bool = False
    """Baseline and candidate up at the same time, as on a machine with GPUs for each."""
    urls: int = 1
    concurrency: int = 4
    odd_tokenizer: str = ""
    """An arm (or ``arm/N`` for one of its URLs) whose tokenizer differs."""
    context: int | None = None
    """Tokens of context a fake server reports, and its slot context before launch (None: unknown)."""
    name: str = "fake"
    launched: list[list[str]] = field(default_factory=list)
    """Arms launched, grouped by the servers that were up at the same time."""
    calls: list[FakeCall] = field(default_factory=list)
    chats: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(arm, payload) of every chat request, as sent: seeds, sampling, chat_template_kwargs."""
    scorers: list[FakeScorer] = field(default_factory=list)
    up: set[str] = field(default_factory=set)

    @property
    def concurrent_arms(self) -> bool:
        return self.concurrent

    def version(self) -> str:
        return "fake 1"

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        model = variant.model or f"fake-{variant.weights}"
        args = (("--kv", variant.kv), *variant.args)
        return LaunchSpec(self.name, model, args, tuple(sorted(variant.env)), frozenset({"model", "--kv"}))

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[ServerHandle]:
        name, log_dir = slot.name, slot.log_dir
        if not self.up:
            self.launched.append([])
        self.launched[-1].append(name)
        self.up.add(name)
        log = log_dir / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"fake server {name}\n", encoding="utf-8")
        urls = self._urls(name)
        try:
            yield ServerHandle(name, urls[0], "", ["fake-server", name], log, info={"urls": urls})
        finally:
            self.up.discard(name)

    def slot_context(self, spec: LaunchSpec) -> int | None:
        return self.context

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> Scorer:
        urls: Sequence[str] = handle.info["urls"]  # type: ignore[assignment]
        shards = [
            FakeScorer(
                self, handle.name, url, self.concurrency, int(self.odd_tokenizer in (handle.name, url))
            )
            for url in urls
        ]
        self.scorers += shards
        return shards[0] if len(shards) == 1 else ShardedScorer(shards, urls)

    def _urls(self, arm: str) -> list[str]:
        return [f"{arm}/{i}" for i in range(self.urls)] if self.urls > 1 else [arm]


def _ids_text(tokens: Sequence[int]) -> str:
    return ",".join(str(int(t)) for t in tokens)
