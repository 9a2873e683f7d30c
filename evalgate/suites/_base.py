"""What a suite is, the one registry of suites, and deterministic item selection.

Run-wide knobs (data folder, seed, generation cap, engine) reach every suite as ``SuiteOptions``.
A suite's own options are its ``settings`` field, a pydantic model the suite declares next to
its code; ``configure`` fills it from ``[suites.<name>]`` in evalgate.toml and ``--suite-opt``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel

from evalgate.engines import DEFAULT_ENGINE
from evalgate.engines.api import Scorer
from evalgate.errors import ConfigError, validated
from evalgate.stats import stable_seed
from evalgate.store.facts import RecordExtra

__all__ = [
    "PRESETS",
    "Item",
    "ItemResult",
    "Registry",
    "Scorer",
    "Suite",
    "SuiteOptions",
    "SuitePreflight",
    "configure",
    "prompt_hash",
    "select_indices",
    "stable_seed",
]

# Items per suite for each preset; None means every test item.
PRESETS: dict[str, int | None] = {"smoke": 50, "quick": 500, "full": None}


@dataclass(frozen=True)
class SuiteOptions:
    """Run-wide knobs a suite may read; both arms always get the same options."""

    data_dir: Path | None = None
    seed: int = 1234
    max_gen_tokens: int | None = None
    """Cap on generated tokens (smoke presets on CPU); None keeps the task's own limit."""
    engine: str = DEFAULT_ENGINE
    reveal_private: bool = False
    temperature: float | None = None
    """Sampling temperature for generation; None keeps the task's own (greedy)."""
    sampling: tuple[tuple[str, float], ...] = ()
    """Further sampling settings sent as they are (top_p, top_k, min_p), the same on both arms."""
    context_lengths: tuple[int, ...] = ()
    """Target prompt lengths in tokens for long_context (--context-lengths); () = its default."""
    thinking: bool | None = None
    """``--thinking on|off``: the chat template's ``enable_thinking`` for chat suites; None sends nothing."""


@dataclass
class Item:
    """One scored unit: the same prompt goes to both arms, identified by ``prompt_hash``."""

    item_id: str
    prompt_hash: str
    target: Any
    payload: Any
    """Suite-private: what ``run`` needs (lm-eval instances, a tool case, ...)."""
    extra: RecordExtra = field(default_factory=RecordExtra)
    """What the item is, written into each of its records (``RecordExtra``: subject, task, ...)."""
    display: dict[str, Any] = field(default_factory=dict)
    """What a reviewer reads in the report: ``prompt`` (str) and ``choices`` (list or None).
    Written once per run to ``prompts/<suite>.jsonl``, never for private suites."""
    secrets: tuple[str, ...] = ()
    """Texts no artifact may hold (a private item's prompt, answer and system prompt): masked in
    every error stored or printed (``evalgate.redact``)."""
    repeat: int = 0
    """Which sample of the item this is (``--repeats``); its seed is the same on both arms."""


@dataclass
class ItemResult:
    response: Any
    extracted: Any
    metrics: dict[str, float]
    tokens: dict[str, int] = field(default_factory=dict)
    extra: RecordExtra = field(default_factory=RecordExtra)
    """Facts about the answer (``RecordExtra``: empty, finish_reason, ...), over the item's own."""


class Suite(Protocol):
    """What the plan, the gate and the CLI may ask of a suite, and all they ask: the optional facts
    below carry their defaults here, so callers read them as they are and never probe a suite
    (``getattr``) or test for a concrete class (``tests/suites/test_contract.py`` holds that). The
    built-in suites subclass this protocol explicitly to inherit the defaults (PEP 544); a suite
    overrides only the facts that differ."""

    name: str
    version: int
    metrics: tuple[str, ...]
    """Metric names, primary first: the primary one is what the gate tests."""
    kind: str
    """'loglikelihood', 'generate' or 'chat': how the report shows responses."""
    private: bool

    samples: bool = False
    """Its requests can be sampled (``--repeats``, ``--temperature``): generation can; log-likelihoods
    and a suite's own fixed requests cannot, so ``--repeats`` refuses the suite."""
    metric_kind: Literal["binary", "continuous", "drift"] = "binary"
    """How the gate tests the primary metric: McNemar for 0/1, a sign-flip test for a graded one;
    drift: no difference test at all, the token-distribution budget rows (``gate/_drift.py``)."""
    settings: BaseModel | None = None
    """The suite's own options (``[suites.<name>]``, ``--suite-opt``); None: it takes none."""
    needs_tool_parser: bool = False
    """Its answers are the server's parsed ``tool_calls``: each arm must run a tool-call parser,
    checked before launch (``Engine.require_tool_parser``), else both arms score no calls and pass."""
    plans_lengths: bool = False
    """It runs at ``--context-lengths``, which the plan settles against each arm's slot before
    launch (``plan_lengths``); a run without such a suite refuses the flag."""

    @property
    def drift_budget(self) -> str | None:
        """The drift budgets this suite's own options set (``[suites.drift]``), spelled as
        ``--drift-budget`` takes them; the flag wins. None: it sets none."""
        return None

    @property
    def takes_thinking(self) -> bool:
        """``--thinking on|off`` reaches it (the chat template's ``enable_thinking``): a chat suite
        unless it says otherwise; a run whose suites take none refuses the flag."""
        return self.kind == "chat"

    def decode_plan(self, options: SuiteOptions) -> tuple[int, bool]:
        """(greedy tokens per document, on every engine): what a drift suite's plan promises its
        records hold (the manifest keeps it, the reader holds each record to it); (0, False): none."""
        return 0, False

    async def read_texts(
        self, item: Item, response: Any, texts: Sequence[tuple[Sequence[int], bool]], scorer: Scorer
    ) -> Any:
        """``response`` with this server's teacher-forced reads of ``texts`` (the other arms'
        greedy generations, each with whether it ended at a stop token) added: the second pass a
        drift suite's cross rows need, which the loop runs once the other arm's records exist
        (``run/reads.py``). The default adds nothing."""
        return response

    def size(self, options: SuiteOptions) -> int: ...

    def source(self, options: SuiteOptions) -> str: ...

    def load(self, options: SuiteOptions, n: int | None) -> list[Item]: ...

    async def run(self, item: Item, scorer: Scorer, options: SuiteOptions) -> ItemResult: ...


@runtime_checkable
class SuitePreflight(Protocol):
    """A suite that must prove something on each server before its items run (tool_calls: that a
    call comes back parsed); the loop calls it once per arm, after the cache flush."""

    async def preflight(self, scorer: Scorer, options: SuiteOptions, *, server: str) -> dict[str, Any] | None:
        """A preflight row ``{"check", "ok", "detail"}`` (None: nothing to check here), or PreflightError."""
        ...


def select_indices(
    n_total: int, n: int | None, *, seed: int, suite: str, strata: Sequence[str] | None = None
) -> list[int]:
    """A seeded subset, identical for both arms and independent of which other suites run.

    With ``strata`` (e.g. MMLU subjects) the subset takes items from every stratum in
    proportion, by largest remainder, so a small run still covers all subjects.
    The result is sorted, so records and prompts come out in dataset order.
    """
    rng = np.random.default_rng(stable_seed(seed, suite))
    if n is None or n >= n_total:
        return list(range(n_total))
    if not strata:
        return sorted(int(i) for i in rng.permutation(n_total)[:n])
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(strata):
        groups.setdefault(s, []).append(i)
    names = sorted(groups)
    quotas = {g: n * len(groups[g]) / n_total for g in names}
    take = {g: int(quotas[g]) for g in names}
    by_remainder = sorted(names, key=lambda g: (-(quotas[g] - take[g]), g))
    for g in by_remainder[: n - sum(take.values())]:
        take[g] += 1
    chosen: list[int] = []
    for g in names:
        members = groups[g]
        chosen += [members[int(i)] for i in rng.permutation(len(members))[: take[g]]]
    return sorted(chosen)


def configure(suite: Suite, table: Mapping[str, Any] | None) -> Suite:
    """``suite`` with its own options set from ``table``, checked against its ``settings`` model
    (a suite without ``settings`` takes none)."""
    if not table:
        return suite
    current = suite.settings
    if current is None:
        raise ConfigError(
            f"suite {suite.name} has no options (given: {', '.join(table)})",
            fix="drop them; `evalgate suites list` shows each suite's options",
        )
    model = type(current)
    settings = validated(
        model,
        dict(table),
        at=lambda where: f"suite option {suite.name}.{where}",
        fix=lambda where: (
            f"set it in evalgate.toml's [suites.{suite.name}] {where} or with --suite-opt "
            f"{suite.name}.KEY=VALUE; {suite.name} takes: {', '.join(options_help(model))}"
        ),
    )
    return dataclasses.replace(suite, settings=settings)  # type: ignore[type-var]


def options_help(model: type[BaseModel]) -> list[str]:
    """``name=default (description)`` per option of a suite's settings model."""
    return [
        f"{name}={info.get_default()} ({info.description})"
        if info.description
        else f"{name}={info.get_default()}"
        for name, info in model.model_fields.items()
    ]


def prompt_hash(obj: Any) -> str:
    """Hash of exactly what is sent (prompts and request options), to prove both arms got it."""
    data = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


class Registry:
    """Name -> suite factory. Unknown names get a 'did you mean' error; no import-time magic."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[[str], Suite]] = {}
        self._prefixes: dict[str, Callable[[str], Suite]] = {}

    def register(self, name: str, factory: Callable[[str], Suite], *, prefix: bool = False) -> None:
        table = self._prefixes if prefix else self._factories
        if name in table:
            raise ValueError(f"suite {name!r} registered twice")
        table[name] = factory

    def names(self) -> list[str]:
        return list(self._factories) + [f"{p}:PATH" for p in self._prefixes]

    def get(self, spec: str, *, options: Mapping[str, Any] | None = None) -> Suite:
        """The suite ``spec``, configured with its own ``options`` (see ``configure``)."""
        if spec in self._factories:
            return configure(self._factories[spec](spec), options)
        head, sep, _ = spec.partition(":")
        if sep and head in self._prefixes:
            return configure(self._prefixes[head](spec), options)
        near = difflib.get_close_matches(spec, list(self._factories) + list(self._prefixes), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"unknown suite {spec!r}", fix=f"{hint}known suites: {', '.join(self.names())}")
