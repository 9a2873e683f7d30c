"""Drift: the model's next-token distribution under teacher forcing, compared across the arms.

Accuracy sees a numerics change only when it flips answers, which at a few dozen items it rarely
does provably. The token distribution sees it at every position: the same documents are forced
through both arms and, per position, each arm's log-probability of the token that is there and
its top-k alternatives are recorded. The gate (``evalgate.gate.drift``) pairs the documents and
turns them into the mean per-token KL divergence from the baseline, the share of positions whose
most likely token agrees, and the perplexity ratio, each tested against a budget: these differ
between any two numerics, so the question is whether the drift is provably small, not whether
there is one (the way llama.cpp's ``llama-perplexity --kl-divergence`` reports quantized models).

Documents are GSM8K train problems (never the test split the gsm8k suite answers): the question
is the context, so the KV cache holds it as the candidate stores it, and the first ``max_tokens``
tokens of the reference solution are scored. Both arms must send the same token ids: each record
carries their digest (``sent_hash``) and a pair whose digests differ is an ERROR row.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalgate.config import read_text
from evalgate.errors import ConfigError
from evalgate.suites._base import Item, ItemResult, Scorer, Suite, SuiteOptions, prompt_hash, select_indices

__all__ = ["DriftSettings", "DriftSuite", "drift"]

_TRAIN = "gsm8k/train.jsonl"
_HUB = ("openai/gsm8k", "main")


class DriftSettings(BaseModel):
    """The suite's own options: ``[suites.drift]`` or ``--suite-opt drift.KEY=VALUE``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    top_k: int = Field(20, ge=1, le=20, description="alternatives recorded per position (the KL's buckets)")
    max_tokens: int = Field(
        32, ge=1, le=2048, description="solution tokens scored per document (teacher-forced positions)"
    )
    source: Literal["gsm8k"] = Field("gsm8k", description="documents: GSM8K train question + solution")
    kld_budget: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="the gate's mean KL budget, nats per token (--drift-budget wins; unset: 0.01)",
    )
    ppl_margin: float | None = Field(
        None,
        gt=0,
        description="the gate's perplexity-ratio budget is 1 + this (--drift-budget wins; unset: 0.02)",
    )

    def budget_text(self) -> str | None:
        """The budgets set here, as ``--drift-budget`` spells them; None when none is set."""
        parts = [f"kld={self.kld_budget}"] if self.kld_budget is not None else []
        parts += [f"ppl={self.ppl_margin}"] if self.ppl_margin is not None else []
        return ",".join(parts) or None


@dataclass
class DriftSuite(Suite):
    name: str = "drift"
    version: int = 1
    metrics: tuple[str, ...] = ("loglik", "tokens")
    kind: str = "loglikelihood"
    private: bool = False
    metric_kind: Literal["binary", "continuous", "drift"] = "drift"  # the gate's budget rows
    settings: DriftSettings = field(default_factory=DriftSettings)

    @property
    def drift_budget(self) -> str | None:
        return self.settings.budget_text()

    def size(self, options: SuiteOptions) -> int:
        return len(_documents(_where(options)))

    def source(self, options: SuiteOptions) -> str:
        s = self.settings
        return (
            f"GSM8K train ({_where(options)}): question as context, the first {s.max_tokens} solution "
            f"tokens teacher-forced, top-{s.top_k} logprobs per position"
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
        if not context or not scored:
            raise ConfigError(
                f"drift document {item.item_id} tokenizes to nothing on this server",
                fix="check the server's tokenizer (the preflight's round trip)",
            )
        tokens = [*context, *scored]
        positions = await scorer.token_distributions(tokens, start=len(context), top_k=self.settings.top_k)
        top = [[[int(t), float(lp)] for t, lp in alternatives] for _, alternatives in positions]
        loglik = float(sum(lp for lp, _ in positions))
        digest = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
        return ItemResult(
            response={"top": top},
            extracted=None,
            metrics={"loglik": loglik, "tokens": float(len(positions))},
            tokens={"prompt": len(context), "scored": len(positions)},
            extra={"prompt_tokens": len(tokens), "sent_hash": digest},
        )


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
