"""The discordant-item browser's data: every paired item whose primary metric differs by arm.

Regressions are n10 (baseline right, candidate wrong), improvements n01, with the same 0.5
threshold the gate uses, so the counts here equal the suites table's. Private suites keep
ids and outcomes only: their records carry no text, and no prompts file is read for them.
"The arms agree on every item" is said only when the gated values are equal on every item; a
suite the gate did not judge says why, in full (``not_judged``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate import stats
from evalgate.gate import RunData
from evalgate.report import _format as fmt
from evalgate.report._documents import DocView, drift_documents
from evalgate.store.files import entry_exists, read_document
from evalgate.store.records import Pair, Record, safe_name

__all__ = ["MAX_ITEMS_PER_GROUP", "ArmView", "ChoiceView", "ItemView", "SuiteItems", "discordant_items"]

MAX_ITEMS_PER_GROUP = 200
"""Items shown per group; the rest are counted and stay in items/*.jsonl (keeps the file small)."""
PROMPT_CHARS = 2500
"""Prompt tail shown per item: few-shot prompts end with the question; the examples are shared."""
RESPONSE_CHARS = 6000


@dataclass(frozen=True)
class ArmView:
    value: str
    """The primary metric's value for this arm, e.g. '1' or '0.50'."""
    passed: bool
    same: str
    """Response text both arms share from the start (greedy decoding diverges at one token)."""
    rest: str
    """Response text after the arms diverge, highlighted."""
    cut: int
    extracted: str
    answer: str
    """The extracted answer the primary metric scored (one filter's value, or the picked choice)."""


@dataclass(frozen=True)
class ChoiceView:
    label: str
    text: str
    target: bool
    baseline: str
    candidate: str
    baseline_pick: bool
    candidate_pick: bool


@dataclass(frozen=True)
class ItemView:
    item_id: str
    repeat: int
    prompt: str
    prompt_cut: int
    target: str
    target_short: str
    """The target's last line (a GSM8K solution ends in '#### N'), for one-line summaries."""
    choices: list[ChoiceView]
    baseline: ArmView
    candidate: ArmView
    search: str
    """Lower-case text the inline filter matches against (ids, target, answers)."""


@dataclass(frozen=True)
class SuiteItems:
    suite: str
    anchor: str
    metric: str
    kind: str
    private: bool
    n: int
    has_prompts: bool
    regressions: list[ItemView] = field(default_factory=list)
    improvements: list[ItemView] = field(default_factory=list)
    n10: int = 0
    n01: int = 0
    drift: bool = False
    """A drift suite: no answers to flip; ``documents`` holds its documents instead."""
    documents: list[DocView] = field(default_factory=list)
    """A drift suite's documents, the most drifted first (report/_documents.py)."""
    has_kld: bool = False
    """Whether the documents carry distributions (a live drift suite), so a mean KL per document."""
    differ: int = 0
    """Items whose gated values differ between the arms (on either side of the 0.5 line or not)."""
    unusable: int = 0
    """Items whose gated value is missing or not finite on an arm (an item error, a NaN)."""
    not_judged: str = ""
    """Why the gate did not judge this suite (its primary row's reason, in full), or empty."""

    @property
    def agreement(self) -> str:
        """What the item browser says when no item changed sides: never "agree" unless the gated
        values are equal on every item on both arms."""
        if not self.n:
            return "No paired items."
        if not self.differ and not self.unusable:
            return "The arms agree on every item."
        parts = ["No item changed from right to wrong or back"]
        if self.differ:
            parts.append(f"the {self.metric} values differ on {self.differ} of {self.n} items")
        if self.unusable:
            parts.append(
                f"{self.unusable} of {self.n} items have no usable {self.metric} value on an arm "
                "(missing, not finite, or an item error)"
            )
        return "; ".join(parts) + "; all are in items/*.jsonl."

    @property
    def hidden_documents(self) -> int:
        return self.n - len(self.documents)

    @property
    def hidden_regressions(self) -> int:
        return self.n10 - len(self.regressions)

    @property
    def hidden_improvements(self) -> int:
        return self.n01 - len(self.improvements)


def _passed(value: float) -> bool:
    return value >= 0.5


def load_prompts(run_dir: Path, suite: str) -> dict[str, dict[str, Any]]:
    """prompts/<suite>.jsonl by item_id; absent (private suites, old runs) gives {}."""
    for name in dict.fromkeys((safe_name(suite), suite)):
        path = Path(run_dir) / "prompts" / f"{name}.jsonl"
        try:
            if entry_exists(path):  # a FIFO, device or link there is refused, a read is bounded
                rows = [json.loads(line) for line in read_document(path).decode().split("\n") if line.strip()]
                return {str(r.get("item_id")): r for r in rows if isinstance(r, dict)}
        except (OSError, ValueError, json.JSONDecodeError):
            return {}
    return {}


def _gated(record: Record, metric: str) -> float | None:
    """The record's gated value, or None when it has none usable (missing, not a number, NaN)."""
    value = record.metrics.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def discordant_items(run: RunData, suite: str, anchor: str, *, not_judged: str = "") -> SuiteItems:
    """The suite's changed items; ``not_judged``: why the gate did not judge it (shown in full)."""
    meta = run.manifest.suites[suite]
    metric = meta.metrics[0]
    private = meta.private and not run.manifest.request.reveal_private
    prompts = {} if private else load_prompts(run.dir, suite)
    if meta.metric_kind == "drift":  # documents, not answers: no regressions or improvements to list
        pairs = run.pairs.get(suite, [])
        docs, has_kld = drift_documents(pairs, prompts, private=private, limit=MAX_ITEMS_PER_GROUP)
        return SuiteItems(
            suite=fmt.clean(suite), anchor=anchor, metric=fmt.clean(metric), kind=meta.kind, private=private,
            n=len(pairs), has_prompts=bool(prompts), drift=True, documents=docs, has_kld=has_kld,
            not_judged=not_judged,
        )  # fmt: skip
    groups: dict[str, list[Pair]] = {"n10": [], "n01": []}
    differ = unusable = 0
    for pair in run.pairs.get(suite, []):
        x, y = _gated(pair.baseline, metric), _gated(pair.candidate, metric)
        if x is None or y is None:  # the gate leaves it out too (gate/_rows.py paired_values)
            unusable += 1
            continue
        differ += x != y
        b = _passed(pair.baseline.metrics.get(metric, 0.0))
        c = _passed(pair.candidate.metrics.get(metric, 0.0))
        if b != c:
            groups["n10" if b else "n01"].append(pair)
    for group in groups.values():  # the largest divergence first: where a reviewer should look
        group.sort(key=lambda p: (-divergence(p), p.item_id))

    def views(pairs: list[Pair]) -> list[ItemView]:
        return [_item(p, metric, private, prompts.get(p.item_id)) for p in pairs[:MAX_ITEMS_PER_GROUP]]

    return SuiteItems(
        suite=fmt.clean(suite),
        anchor=anchor,
        metric=fmt.clean(metric),
        kind=meta.kind,
        private=private,
        n=len(run.pairs.get(suite, [])),
        has_prompts=bool(prompts),
        regressions=views(groups["n10"]),
        improvements=views(groups["n01"]),
        n10=len(groups["n10"]),
        n01=len(groups["n01"]),
        differ=differ,
        unusable=unusable,
        not_judged=not_judged,
    )


def divergence(pair: Pair) -> float:
    """How far apart the arms are on this item: KL of the choice distributions for multiple
    choice, else the fraction of the longer response that is not a shared prefix."""
    lb, lc = _logliks(pair.baseline.response), _logliks(pair.candidate.response)
    if lb and lc and len(lb) == len(lc):
        return float(stats.choice_kl(lb, lc))
    b, c = pair.baseline.response, pair.candidate.response
    if isinstance(b, str) and isinstance(c, str) and (b or c):
        common = next((i for i, (x, y) in enumerate(zip(b, c, strict=False)) if x != y), min(len(b), len(c)))
        return 1.0 - common / max(len(b), len(c))
    return 0.0


def _item(pair: Pair, metric: str, private: bool, prompt: dict[str, Any] | None) -> ItemView:
    b, c = pair.baseline, pair.candidate
    if private:
        arms = [_arm(r, metric, "", "", 0) for r in (b, c)]
        return ItemView(
            fmt.clean(pair.item_id), pair.repeat, "", 0, "", "", [], *arms, fmt.clean(pair.item_id).lower()
        )
    text, cut = fmt.tail(fmt.clean(str((prompt or {}).get("prompt") or "")), PROMPT_CHARS)
    choices = _choices(b, c, (prompt or {}).get("choices"))
    if choices:
        arms = [_arm(r, metric, "", "", 0) for r in (b, c)]
    else:
        arms = _texts(b, c, metric)
    target = _target(b.target, choices)
    lines = [ln.strip() for ln in target.splitlines() if ln.strip()]
    short = lines[-1] if lines else ""
    search = " ".join([pair.item_id, short, arms[0].answer, arms[1].answer]).lower()
    return ItemView(fmt.clean(pair.item_id), pair.repeat, text, cut, target, short, choices, *arms, search)


def _arm(r: Record, metric: str, same: str, rest: str, cut: int) -> ArmView:
    value = float(r.metrics.get(metric, 0.0))
    shown = f"{value:g}" if value in (0.0, 1.0) else f"{value:.3f}"
    return ArmView(
        shown, _passed(value), same, rest, cut, fmt.compact(r.extracted), _answer(r.extracted, metric)
    )


def _answer(extracted: Any, metric: str) -> str:
    """lm-eval names a metric 'metric,filter' and suites key extracted answers by filter; multiple
    choice records hold 'pred' (acc) and 'pred_norm' (acc_norm) as choice indices."""
    if not isinstance(extracted, dict):
        return fmt.compact(extracted)
    key = metric.split(",", 1)[1] if "," in metric else {"acc": "pred", "acc_norm": "pred_norm"}.get(metric)
    if key not in extracted:
        return fmt.compact(extracted)
    value = extracted[key]
    if key in ("pred", "pred_norm") and isinstance(value, int) and 0 <= value < 26:
        return chr(65 + value)
    return fmt.compact(value)


def _texts(b: Record, c: Record, metric: str) -> list[ArmView]:
    """Generated (or chat) responses, split where the two arms' texts first differ."""
    tb, tc = (fmt.clean(r.response) if isinstance(r.response, str) else _pretty(r.response) for r in (b, c))
    k = 0
    while k < min(len(tb), len(tc)) and tb[k] == tc[k]:
        k += 1
    out = []
    for r, t in ((b, tb), (c, tc)):
        cut = max(0, len(t) - RESPONSE_CHARS)
        shown = t[: len(t) - cut]
        out.append(_arm(r, metric, shown[:k], shown[k:], cut))
    return out


def _pretty(value: Any) -> str:
    if value is None:
        return ""
    return fmt.clean(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, default=str))


def _logliks(response: Any) -> list[float] | None:
    """Choice logliks from a loglikelihood record: [[ll, greedy], ...] or [ll, ...]."""
    if not isinstance(response, list) or not response:
        return None
    out = []
    for x in response:
        v = x[0] if isinstance(x, (list, tuple)) and x else x
        if not isinstance(v, (int, float)):
            return None
        out.append(float(v))
    return out


def _pick(r: Record) -> int | None:
    e = r.extracted
    if isinstance(e, dict) and isinstance(e.get("pred"), int):
        return int(e["pred"])
    ll = _logliks(r.response)
    return max(range(len(ll)), key=ll.__getitem__) if ll else None


def _choices(b: Record, c: Record, texts: Any) -> list[ChoiceView]:
    lb, lc = _logliks(b.response), _logliks(c.response)
    if lb is None or lc is None:
        return []
    texts = texts if isinstance(texts, list) else []
    pb, pc = _pick(b), _pick(c)
    out = []
    for i in range(max(len(lb), len(lc))):
        out.append(
            ChoiceView(
                label=chr(65 + i) if i < 26 else str(i),
                text=fmt.compact(texts[i]) if i < len(texts) else "",
                target=b.target == i,
                baseline=f"{lb[i]:.3f}" if i < len(lb) else "",
                candidate=f"{lc[i]:.3f}" if i < len(lc) else "",
                baseline_pick=pb == i,
                candidate_pick=pc == i,
            )
        )
    return out


def _target(target: Any, choices: list[ChoiceView]) -> str:
    if choices and isinstance(target, int) and 0 <= target < len(choices):
        ch = choices[target]
        return f"{ch.label}. {ch.text}" if ch.text else ch.label
    return fmt.compact(target)
