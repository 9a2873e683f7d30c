"""Drift: the model's next-token distribution under teacher forcing, compared across the arms.

Accuracy sees a numerics change only when it flips answers, which at a few dozen items it rarely
does provably. The token distribution sees it at every position: the same documents are forced
through both arms and, per position, each arm's log-probability of the token that is there and
its top-k alternatives are recorded. The gate (``evalgate.gate._drift``) pairs the documents and
turns them into the mean per-token KL divergence from the baseline, the share of positions whose
most likely token agrees, and the perplexity ratio, each tested against a budget: these differ
between any two numerics, so the question is whether the drift is provably small, not whether
there is one (the way llama.cpp's ``llama-perplexity --kl-divergence`` reports quantized models).

Documents are GSM8K train problems (never the test split the gsm8k suite answers): the question
is the context, so the KV cache holds it as the candidate stores it, and the first ``max_tokens``
tokens of the reference solution are scored. Both arms must send the same token ids: each record
carries their digest (``sent_hash``) and a pair whose digests differ is an ERROR row.

Two paths, because quantized KV caches fail where the cache is read back. Forcing the solution
(``Scorer.token_distributions``) reads prompt logprobs on SGLang and vLLM: the prefill pass, which
on a GPU attends over keys and values it has just computed in BF16, so an FP8 KV cache that breaks
generation (sglang#22671, TensorRT-LLM#16916, sglang#25790) looks perfect there. Where the forced
path is prefill (``Scorer.forced_path``), each document is therefore also decoded greedily for
``decode_tokens`` tokens (``Scorer.decode_distributions``): every step reads the cache, and the
gate compares the arms position by position on the shared prefix of their two generations, up to
and including the first position where they part. On llama.cpp the forced tokens are generated
one step at a time through a token-id grammar, so the forced path is already the decode path; it
decodes greedily too when ``decode_tokens`` is set.

After the parting the two arms condition on different text, so what stays comparable is how each
generation reads to the other arm: each arm's text is read teacher-forced on the other arm
(``read_texts``, a second pass the loop runs once both arms have generated: ``run/reads.py``), and
on a prefill engine each arm also re-reads its own text right after generating it (the prefill
path against what its decode said: the within-arm row). A stop token cannot be forced on every
engine (llama.cpp's grammar refuses an end-of-generation token until it is complete), so a text
that ended at a stop is forced up to it and the stop token's logprob is read from a one-token
greedy step after it (``"stop": true``; where the stop token is not in that step's top-k, the
lowest listed logprob, an upper bound).

Record (suite version 3): ``response = {"path": "prefill"|"decode", "ids": [forced ids], "lp":
[their logprobs], "top": [[[id, logprob], ...] per position], "decode": {"ids", "lp", "top",
"finish"}, "reads": [{"of": text digest, "lp": [...], "top": [...] (own text only), "stop":
bool}]}``, ``decode`` where the forced path is prefill or ``decode_tokens`` is set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalgate.engines.api import Position
from evalgate.errors import ConfigError, InvalidResponse
from evalgate.store.drift_records import text_digest
from evalgate.store.facts import RecordExtra
from evalgate.suites._base import Item, ItemResult, Scorer, Suite, SuiteOptions, prompt_hash, select_indices
from evalgate.user_files import read_text

__all__ = ["DriftSettings", "DriftSuite", "drift"]

_TRAIN = "gsm8k/train.jsonl"
DECODE_TOKENS = 512
"""Greedy decode steps per document on an engine without a generation cap (a GPU): FP8-KV
failures grow with output length (TensorRT-LLM#16916 decayed from 92 to 74 over its outputs and
looked fine at 96 tokens), so the decode row must reach past the first bucket."""
CAPPED_DECODE_TOKENS = 64
"""The same on an engine that caps generation (a CPU engine's smoke-sized runs)."""
_HUB = ("openai/gsm8k", "main")


class DriftSettings(BaseModel):
    """The suite's own options: ``[suites.drift]`` or ``--suite-opt drift.KEY=VALUE``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    top_k: int = Field(20, ge=1, le=20, description="alternatives recorded per position (the KL's buckets)")
    max_tokens: int = Field(
        32, ge=1, le=2048, description="solution tokens scored per document (teacher-forced positions)"
    )
    source: Literal["gsm8k"] = Field("gsm8k", description="documents: GSM8K train question + solution")
    kld_budget: float | None = Field(  # strict: true is no budget (pydantic reads it as 1.0)
        None,
        gt=0,
        allow_inf_nan=False,
        strict=True,
        description="the gate's mean KL budget, nats per token (--drift-budget wins; unset: 0.01)",
    )
    ppl_margin: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,  # refused here, naming [suites.drift], not as the --drift-budget it becomes
        strict=True,
        description="the gate's perplexity-ratio budget is 1 + this (--drift-budget wins; unset: 0.02)",
    )
    decode_tokens: int | None = Field(
        None,
        ge=0,
        le=4096,
        description=(
            "greedy tokens decoded per document; unset: only where the forced path is prefill (SGLang, "
            f"vLLM), {DECODE_TOKENS} without a generation cap, {CAPPED_DECODE_TOKENS} with one (CPU); set: "
            "on every engine (llama.cpp too, whose forced path already decodes); 0: none"
        ),
    )

    def budget_text(self) -> str | None:
        """The budgets set here, as ``--drift-budget`` spells them; None when none is set."""
        parts = [f"kld={self.kld_budget}"] if self.kld_budget is not None else []
        parts += [f"ppl={self.ppl_margin}"] if self.ppl_margin is not None else []
        return ",".join(parts) or None


@dataclass
class DriftSuite(Suite):
    name: str = "drift"
    version: int = 3
    metrics: tuple[str, ...] = ("loglik", "tokens")
    kind: str = "loglikelihood"
    private: bool = False
    metric_kind: Literal["binary", "continuous", "drift"] = "drift"  # the gate's budget rows
    settings: DriftSettings = field(default_factory=DriftSettings)

    @property
    def drift_budget(self) -> str | None:
        return self.settings.budget_text()

    def decode_tokens(self, options: SuiteOptions) -> int:
        """Greedy decode steps per document (``decode_tokens``, or its engine-sized default)."""
        if self.settings.decode_tokens is not None:
            return self.settings.decode_tokens
        if options.max_gen_tokens is None:
            return DECODE_TOKENS
        return min(CAPPED_DECODE_TOKENS, options.max_gen_tokens)

    def decode_plan(self, options: SuiteOptions) -> tuple[int, bool]:
        return self.decode_tokens(options), self.settings.decode_tokens is not None

    def size(self, options: SuiteOptions) -> int:
        return len(_documents(_where(options)))

    def source(self, options: SuiteOptions) -> str:
        s = self.settings
        decode = self.decode_tokens(options)
        return (
            f"GSM8K train ({_where(options)}): question as context, the first {s.max_tokens} solution "
            f"tokens teacher-forced, top-{s.top_k} logprobs per position"
            + (f"; where that is prefill, {decode} greedy tokens decoded" if decode else "")
        )

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]:
        docs = _documents(_where(options))
        items = []
        for i in select_indices(len(docs), n, seed=options.seed, suite=self.name):
            question, answer = docs[i]
            request = {
                "doc": [question, answer],
                "top_k": self.settings.top_k,
                "max_tokens": self.settings.max_tokens,
                "decode_tokens": self.decode_tokens(options),
            }
            items.append(
                Item(
                    item_id=f"train/{i:05d}",
                    prompt_hash=prompt_hash(request),
                    target=None,
                    payload=(question, answer),
                    display={"prompt": f"{question}\n{answer}", "choices": None},
                )
            )
        return items

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        question, answer = item.payload
        context = await scorer.tokenize(question + "\n")
        scored = (await scorer.tokenize(answer))[: self.settings.max_tokens]
        if not context or not scored:  # the server's answer, not the user's input: an item error
            raise InvalidResponse(
                f"the server tokenized drift document {item.item_id}'s "
                f"{'question' if not context else 'solution'} to no tokens",
                fix="check the server's tokenizer (the preflight's round trip); the item is retried, then "
                "recorded as an error and never scored (--resume retries it)",
            )
        tokens = [*context, *scored]
        top_k = self.settings.top_k
        positions = await scorer.token_distributions(tokens, start=len(context), top_k=top_k)
        response: dict[str, Any] = {"path": scorer.forced_path, "ids": list(scored), **_lists(positions)}
        counts = {"prompt": len(context), "scored": len(positions)}
        steps, everywhere = self.decode_plan(options)
        if steps and (everywhere or scorer.forced_path == "prefill"):
            decoded = await scorer.decode_distributions(context, max_tokens=steps, top_k=top_k)
            response["decode"] = {
                "ids": list(decoded.tokens),
                **_lists(decoded.positions),
                "finish": decoded.finish_reason,
            }
            counts["decoded"] = len(decoded.tokens)
            if scorer.forced_path == "prefill":  # the prefill path re-reads what decode wrote
                stop = decoded.finish_reason == "stop"
                response["reads"] = [await _read(scorer, context, list(decoded.tokens), stop, top_k=top_k)]
        loglik = float(sum(lp for lp, _ in positions))
        digest = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
        return ItemResult(
            response=response,
            extracted=None,
            metrics={"loglik": loglik, "tokens": float(len(positions))},
            tokens=counts,
            extra=RecordExtra(prompt_tokens=len(tokens), sent_hash=digest),
        )

    async def read_texts(
        self, item: Item, response: Any, texts: Sequence[tuple[Sequence[int], bool]], scorer: Scorer
    ) -> Any:
        """The other arms' greedy texts read on this server (lp only: the cross rows need no
        top-k), added to ``response["reads"]``; ``stop``: the text ended at a stop token (its
        generator's ``finish``)."""
        question, _ = item.payload
        context = await scorer.tokenize(question + "\n")
        reads = list(response.get("reads") or [])
        for ids, stop in texts:
            reads.append(await _read(scorer, context, list(ids), bool(stop), top_k=1, keep_top=False))
        return {**response, "reads": reads}


async def _read(
    scorer: Scorer, context: list[int], ids: list[int], stop: bool, *, top_k: int, keep_top: bool = True
) -> dict[str, Any]:
    """One teacher-forced read of ``ids`` after ``context``: each token's logprob (and top-k). A
    stop token is read from a one-token greedy step after the text before it (module docstring)."""
    forced = ids[:-1] if stop else ids
    positions = (
        list(await scorer.token_distributions([*context, *forced], start=len(context), top_k=top_k))
        if forced
        else []
    )
    if stop:
        step = await scorer.decode_distributions([*context, *forced], max_tokens=1, top_k=max(top_k, 20))
        _, alternatives = step.positions[0]
        listed = dict(alternatives)
        last = listed.get(ids[-1], min(listed.values()))
        positions.append((float(last), tuple(alternatives[:top_k])))
    read: dict[str, Any] = {"of": text_digest(ids), **_lists(positions), "stop": stop}
    if not keep_top:
        del read["top"]
    return read


def _lists(positions: Sequence[Position]) -> dict[str, Any]:
    """Positions as the record stores them: each token's logprob (``lp``) and its top-k (``top``)."""
    return {
        "lp": [float(lp) for lp, _ in positions],
        "top": [[[int(t), float(v)] for t, v in alternatives] for _, alternatives in positions],
    }


def drift(name: str = "drift") -> DriftSuite:
    return DriftSuite(name=name)


def _where(options: SuiteOptions) -> str:
    return str(Path(options.data_dir) / _TRAIN) if options.data_dir else f"the Hub: {' '.join(_HUB)} train"


@cache
def _documents(where: str) -> tuple[tuple[str, str], ...]:
    """(question, solution) per GSM8K train row, from the local file or the Hub."""
    if where.startswith("the Hub"):
        rows = _hub_rows()
    else:
        path = Path(where)
        if not path.is_file():
            raise ConfigError(
                f"drift reads GSM8K train from {path}, which is not there",
                fix="pass --data-dir laid out like shared/data (gsm8k/train.jsonl), or drop drift",
            )
        rows = [json.loads(line) for line in read_text(path).splitlines() if line.strip()]
    docs = tuple((str(r["question"]).strip(), str(r["answer"]).strip()) for r in rows)
    return tuple(d for d in docs if d[0] and d[1])


def _hub_rows() -> list[dict[str, Any]]:
    import datasets  # an optional download path: only without --data-dir

    return list(datasets.load_dataset(*_HUB, split="train"))
