"""Long context: RULER-style retrieval and tracking at controlled lengths (Hsieh et al. 2024,
"RULER: What's the Real Context Size of Your Long-Context Language Models?"). An FP8 or 4-bit KV
cache errs most over long attention spans; every other suite is short. Items are generated
(``_haystack``), nothing is downloaded; the qa task and natural filler read the local GSM8K files.

The plan has no server, so an item holds its spec and its prompt hash covers the spec; ``run``
builds the text with the server's own tokenizer (both arms share it: the preflight checks), so
the prompt plus the answer room is within a few tokens of the target length. The record's extra
says how many tokens were sent (``prompt_tokens``) and a digest of the exact text
(``sent_hash``): both arms must show the same. ``--context-lengths`` sets the lengths (default:
powers of two up to a slot's context, capped by the preset); ``--limit n`` is n items per length.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalgate.engines.api import Generation
from evalgate.errors import ConfigError
from evalgate.store.facts import RecordExtra
from evalgate.suites import _haystack as hs
from evalgate.suites._base import Item, ItemResult, Scorer, Suite, SuiteOptions, prompt_hash, stable_seed

__all__ = [
    "DEFAULT_LENGTHS",
    "PRESET_CAP",
    "LongContextSettings",
    "LongContextSuite",
    "default_lengths",
    "long_context",
    "plan_lengths",
    "require_fits",
]

DEFAULT_LENGTHS = (1024, 2048, 4096)
"""When no slot context is known at plan time."""
PRESET_CAP: dict[str, int | None] = {"smoke": 4096, "quick": 32768, "full": None}
FULL_PER_LENGTH = 500
"""Items per length for the full preset (RULER's count per task and length)."""
MAX_ROUNDS = 24
"""Tokenizations of the whole prompt at most: estimates first, then bisection (usually 2-4)."""
ANSWER_ROOM = 64
"""Tokens generated at most, and kept free in the target length for them."""
_PLACEHOLDER = "\x00LONG-CONTEXT\x00"
_FIX = (
    "raise the slot's context ([llamacpp] ctx_per_slot, [sglang] context_length, [vllm] "
    "max_model_len), or lower --context-lengths"
)


_QA_FIX = "pass --data-dir (layout of shared/data), or choose other tasks"


class LongContextSettings(BaseModel):
    """The suite's own options: ``[suites.long_context]`` or ``--suite-opt long_context.KEY=VALUE``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    chat: bool = Field(
        True, description="wrap each prompt in the server's chat template (false: a plain completion)"
    )
    tasks: tuple[str, ...] = Field(
        hs.TASKS, description="the tasks to rotate through, comma-separated (qa needs --data-dir)"
    )
    filler: Literal["auto", "noise", "text"] = Field(
        "auto",
        description="haystack: text (GSM8K questions from --data-dir), noise (one paragraph repeated, "
        "RULER's noise haystack), auto (text when --data-dir is given)",
    )

    @field_validator("tasks", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """``"niah_single,vt"`` (as --suite-opt gives it) or a list; each a known task, once."""
        names = [t.strip() for t in value.split(",")] if isinstance(value, str) else list(value)
        unknown = [t for t in names if t not in hs.TASKS]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"tasks are one or more of {', '.join(hs.TASKS)}, each once (got {value!r})")
        return tuple(names)


def default_lengths(slot: int | None, preset: str) -> tuple[int, ...]:
    """Powers of two from 1024 up to what a slot holds, capped by the preset; 1k,2k,4k unknown."""
    if slot is None:
        return DEFAULT_LENGTHS
    cap = PRESET_CAP.get(preset)
    top = slot if cap is None else min(slot, cap)
    out = tuple(2**p for p in range(10, 40) if 2**p <= top)
    if not out:
        raise ConfigError(
            f"a slot holds {slot} tokens, less than the shortest long_context length (1024)", fix=_FIX
        )
    return out


def require_fits(lengths: tuple[int, ...], slot: int | None, *, server: str) -> None:
    """Refuse (exit 2) a server whose slot cannot hold the longest length (prompt plus answer)."""
    if slot is not None and lengths and max(lengths) > slot:
        raise ConfigError(
            f"long_context at {max(lengths)} tokens does not fit the {server}: a slot holds {slot} tokens",
            fix=_FIX,
        )


def plan_lengths(
    requested: tuple[int, ...] | None, slots: Mapping[str, int | None], preset: str
) -> tuple[int, ...]:
    """The run's lengths: those asked for, else the default for the smallest known slot; each
    arm's slot must hold the longest (``require_fits``), before anything launches."""
    known = [n for n in slots.values() if n is not None]
    lengths = tuple(requested) if requested else default_lengths(min(known) if known else None, preset)
    for arm, slot in slots.items():
        require_fits(lengths, slot, server=arm)
    return lengths


@dataclass
class LongContextSuite(Suite):
    name: str = "long_context"
    version: int = 1
    metrics: tuple[str, ...] = ("string_match_all",)
    kind: str = "generate"
    private: bool = False
    settings: LongContextSettings = field(default_factory=LongContextSettings)
    plans_lengths = True  # not a field: a fact of the suite (Suite.plans_lengths)

    def tasks(self, options: SuiteOptions) -> tuple[str, ...]:
        """The chosen tasks; qa only with the GSM8K text in ``--data-dir`` (else left out, or
        refused when it is the only one chosen)."""
        tasks = tuple(t for t in self.settings.tasks if options.data_dir or t != "qa")
        if not tasks:
            raise ConfigError("long_context.tasks=qa needs the GSM8K text in --data-dir", fix=_QA_FIX)
        return tasks

    def lengths(self, options: SuiteOptions) -> tuple[int, ...]:
        return tuple(options.context_lengths) or DEFAULT_LENGTHS

    def size(self, options: SuiteOptions) -> int:
        return FULL_PER_LENGTH * len(self.lengths(options))

    def source(self, options: SuiteOptions) -> str:
        tasks = ", ".join(self.tasks(options))
        shown = ",".join(_k(n) for n in self.lengths(options))
        lengths = shown if options.context_lengths else f"{shown} (or powers of two up to a slot's context)"
        filler = f"GSM8K questions in {options.data_dir}/gsm8k" if self._natural(options) else "noise"
        if not options.data_dir:
            filler += " (qa needs --data-dir)"
        mode = "chat template" if self.settings.chat else "plain completion"
        return f"generated (RULER-style) {tasks}; lengths {lengths}; filler {filler}; {mode}"

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]:
        tasks = self.tasks(options)
        text = _local_text(str(options.data_dir)) if options.data_dir else None
        natural = self._natural(options)
        per_length = FULL_PER_LENGTH if n is None else n
        items = []
        for length in self.lengths(options):
            counts = {t: len(range(i, per_length, len(tasks))) for i, t in enumerate(tasks)}
            for j in range(per_length):
                task, index = tasks[j % len(tasks)], j // len(tasks)
                item_id = f"{task}/{length}/{index:04d}"
                rng = np.random.default_rng(stable_seed(options.seed, self.name, item_id))
                depth = (index + 0.5) / counts[task]
                spec = hs.make_spec(
                    task,
                    length,
                    depth,
                    rng,
                    filler=text.filler if text and natural else None,
                    passages=text.passages if text else (),
                    source=text.digest if text else "",
                )
                request = {
                    "spec": spec.as_dict(),
                    "chat": self.settings.chat,
                    "max_tokens": self._room(options),
                }
                items.append(
                    Item(
                        item_id=item_id,
                        prompt_hash=prompt_hash(request),
                        target=list(spec.answers),
                        payload=spec,
                        extra=RecordExtra(context_length=length, task=task, depth=spec.depth),
                        display={
                            "prompt": f"[{task}, {length} tokens, depth {_depth(spec.depth)}] {spec.question}",
                            "choices": None,
                            "expected": list(spec.answers),
                        },
                    )
                )
        return items

    def _natural(self, options: SuiteOptions) -> bool:
        """Natural filler text (else the noise paragraph); text without --data-dir is refused."""
        if self.settings.filler == "text" and not options.data_dir:
            raise ConfigError(
                "long_context.filler=text needs the GSM8K questions in --data-dir",
                fix="pass --data-dir (layout of shared/data), or use filler=noise",
            )
        return self.settings.filler == "text" or (
            self.settings.filler == "auto" and options.data_dir is not None
        )

    def _room(self, options: SuiteOptions) -> int:
        cap = options.max_gen_tokens
        return ANSWER_ROOM if cap is None else min(ANSWER_ROOM, cap)

    async def preflight(self, scorer: Scorer, options: SuiteOptions, *, server: str) -> dict[str, Any] | None:
        """The server's real per-slot context must hold the longest length (exit 2 if not)."""
        slot = (await scorer.context_length()) or None  # llama.cpp says 0 when /props has none
        lengths = self.lengths(options)
        if slot is None:
            return {"check": "context fits", "ok": True, "detail": "the server does not report its context"}
        require_fits(lengths, slot, server=f"{server} server")
        return {"check": "context fits", "ok": True, "detail": f"{max(lengths)} <= {slot} tokens per slot"}

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult:
        spec: hs.Spec = item.payload
        room = self._room(options)
        text, n_tokens = await build_prompt(spec, scorer, budget=spec.length - room, chat=self.settings.chat)
        out = await scorer.generate(text, Generation(max_tokens=room, seed=options.seed))
        response = str(out["text"])
        score = hs.string_match_all(response, spec.answers)
        extra = RecordExtra(  # None: not said, not written
            prompt_tokens=n_tokens,
            sent_hash=hashlib.sha256(text.encode()).hexdigest()[:16],
            empty=not response.strip(),
            finish_reason=out.get("finish_reason"),
            truncated_tokens=int(out["truncated_tokens"]) if out.get("truncated_tokens") else None,
        )
        tokens = {"prompt": out.get("prompt_tokens", 0), "completion": out.get("completion_tokens", 0)}
        found = [a for a in spec.answers if a.lower() in response.lower()]
        return ItemResult(response, found, {"string_match_all": score}, tokens, extra=extra)


async def build_prompt(spec: hs.Spec, scorer: Scorer, *, budget: int, chat: bool) -> tuple[str, int]:
    """The prompt with as many filler words as fit ``budget`` tokens of ``scorer``'s tokenizer
    (the most words that fit: within a word of it, never over), and its token count.

    The filler's tokens per word is estimated from a sample; the whole prompt is then tokenized
    and words added or removed by that estimate, bisecting between the most words known to fit
    and the fewest known not to when an estimate overshoots. Same spec and tokenizer, same text."""
    if chat:
        rendered = await scorer.render_chat([{"role": "user", "content": _PLACEHOLDER}])
        head, _, tail = rendered.partition(_PLACEHOLDER)
        tail += spec.answer_prefix
    else:
        head, tail = "", "\n" + spec.answer_prefix

    async def count(k: int) -> tuple[str, int]:
        text = head + hs.assemble(spec, k).text + tail
        return text, len(await scorer.tokenize(text))

    text, n = await count(0)
    if n > budget:
        raise ConfigError(
            f"long_context at {spec.length} tokens leaves no room for a haystack ({n} tokens without one)",
            fix="use --context-lengths of 1k or more",
        )
    sample = " ".join(" ".join(spec.filler[i % len(spec.filler)] for i in range(8)).split(" ")[:400])
    per_word = max(len(await scorer.tokenize(sample)), 1) / max(len(sample.split(" ")), 1)
    fits, over = (0, text, n), None  # the most words known to fit, the fewest known not to
    k = int((budget - n) / per_word)
    for _ in range(MAX_ROUNDS):
        text, n = await count(k)
        if n <= budget:
            fits = max(fits, (k, text, n))
        else:
            over = k if over is None else min(over, k)
        if n == budget or (over is not None and over - fits[0] <= 1):
            break
        step = (budget - n) / per_word  # at least one word either way: never the same k twice
        guess = k + max(1, int(np.floor(step))) if n <= budget else k - max(1, int(np.ceil(-step)))
        top = over - 1 if over is not None else guess
        k = guess if fits[0] < guess <= top else (fits[0] + top + 1) // 2  # else bisect what is left
    return fits[1], fits[2]


@dataclass(frozen=True)
class _Text:
    filler: tuple[str, ...]
    passages: tuple[tuple[str, str, str], ...]
    digest: str


@cache
def _local_text(data_dir: str) -> _Text:
    """GSM8K train questions as filler sentences, test problems with solutions as qa passages."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for split in ("train", "test"):
        path = Path(data_dir) / "gsm8k" / f"{split}.jsonl"
        if not path.exists():
            raise ConfigError(
                f"long_context reads its filler and qa passages from {path}, which does not exist",
                fix="point --data-dir at a folder laid out like shared/data, or omit it (noise filler, no qa)",
            )
        with open(path, encoding="utf-8") as f:
            rows[split] = [json.loads(line) for line in f if line.strip()]
    filler = tuple(" ".join(r["question"].split()) for r in rows["train"])
    passages = tuple(hs.gsm8k_passage(r["question"], r["answer"]) for r in rows["test"])
    return _Text(filler, passages, "gsm8k:" + hs.digest([*filler, *(p for t in passages for p in t)]))


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _depth(depth: float | None) -> str:
    return "spread" if depth is None else f"{depth:.2f}"


def long_context(name: str = "long_context") -> LongContextSuite:
    return LongContextSuite(name=name)
