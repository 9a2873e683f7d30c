"""The long-context panel of each suite with rows per context length (verdict.json ``lengths``).

One panel puts what the candidate buys beside what it costs: the KV capacity of both arms,
where the run recorded it, and the flip rate at the longest length, which the gate tests. The
capacity comes from the run folder alone: throughput.json's (``compare --with-throughput``),
else the one each engine read at launch (the arm's ``server`` facts: a ``capacity`` or
``kv_capacity`` block, or the KV buffers' MiB for a pool of fixed size). Returns plain
headers, rows and text in a ``Section`` of its own (``_view`` is not imported back: no cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalgate.gate import LengthRow, LengthTrend, SuiteLengths, Verdict
from evalgate.report import _format as fmt
from evalgate.report._sections import Section
from evalgate.report.lengths_svg import length_label, lengths_chart
from evalgate.store.capacity import capacity_ratio
from evalgate.store.manifest import Manifest, ServerFacts

__all__ = ["HEADERS", "LengthPanel", "kv_capacity", "length_cells", "length_panels", "trend_text"]

HEADERS = ["context length", "n", "baseline", "candidate", "delta", "flips", "n10 / n01", "p (two-sided)"]


@dataclass(frozen=True, kw_only=True)
class LengthPanel(Section):
    """One suite's panel: a ``Section`` (its table, note and chart) with what JUnit and Markdown read."""

    suite: str
    metric: str
    trend: LengthTrend | None
    """The gated longest-length row (JUnit makes it a test case)."""


def length_cells(r: LengthRow) -> list[str]:
    """One length's table row, formatted as every renderer shows it."""
    return [
        f"{length_label(r.context_length)} ({r.context_length:,} tokens)",
        str(r.n),
        fmt.score(r.baseline),
        fmt.score(r.candidate),
        fmt.points(r.delta),
        f"{r.flips} ({fmt.pct(r.flip_rate)})",
        f"{r.n10} / {r.n01}",
        fmt.p(r.p_value),
    ]


def trend_text(s: SuiteLengths) -> str:
    """The gated row in one sentence (or why there is none)."""
    t = s.trend
    if t is None:
        return fmt.clean(s.note)
    gated = f"Holm p = {fmt.p(t.p_adjusted)}" if t.gated else "shown, not gated (--sequential)"
    text = (
        f"Longest length, {length_label(t.context_length)} tokens ({t.status.upper()}): {t.n10} item(s) lost, "
        f"{t.n01} gained of {t.n}, one-sided McNemar mid-p = {fmt.p(t.p_value)}, {gated}"
    )
    if t.trend_p is not None:
        text += f"; trend of regressions with length (exact, not gated): p = {fmt.p(t.trend_p)}"
    return fmt.clean(text + (f". {s.note}" if s.note else "."))


def _kv_of(manifest: Manifest, arm: str) -> dict[str, Any] | None:
    doc = manifest.throughput or {}
    found = ((doc.get("capacity") or {}).get(arm)) if isinstance(doc, Mapping) else None
    if isinstance(found, Mapping) and (found.get("kv_tokens") or found.get("kv_mib")):
        return dict(found)
    info = manifest.arms.get(arm)
    server = info.server if info is not None else ServerFacts()
    for pool in server.kv_pools():
        if pool.kv_tokens or pool.kv_mib:
            return pool.to_dict()
    total = (server.kv_buffers_mib or {}).get("total")
    return {"kv_mib": float(total), "same_pool": True} if total is not None else None


def kv_capacity(manifest: Manifest) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(baseline, candidate) KV capacity as the run recorded it, or None for an arm without."""
    return _kv_of(manifest, "baseline"), _kv_of(manifest, "candidate")


def _buys(b: dict[str, Any] | None, c: dict[str, Any] | None) -> str:
    if not b or not c:
        return "KV capacity: not recorded for both arms (compare --with-throughput records it)"
    if b.get("kv_tokens") and c.get("kv_tokens"):
        ratio = capacity_ratio(b, c)
        extra = int(c["kv_tokens"]) - int(b["kv_tokens"])
        text = (
            f"KV capacity: baseline {int(b['kv_tokens']):,} tokens, candidate {int(c['kv_tokens']):,} "
            f"({extra:+,} tokens of KV"
        )
        if ratio.get("ratio") is not None:
            text += f", {ratio['ratio']:.2f}x by {ratio['basis']}"
        return text + ")"
    if b.get("kv_mib") and c.get("kv_mib"):
        # the pool's tokens are the same on both arms (fixed by the launch, which must match)
        return (
            f"KV memory for the same pool of tokens: baseline {float(b['kv_mib']):,.1f} MiB, candidate "
            f"{float(c['kv_mib']):,.1f} MiB ({float(b['kv_mib']) / float(c['kv_mib']):.2f}x the tokens per MiB)"
        )
    return "KV capacity: recorded without sizes"


def _costs(s: SuiteLengths) -> str:
    if not s.rows:
        return ""
    last = s.rows[-1]
    return (
        f"what it costs: {fmt.pct(last.flip_rate)} of answers flipped at {length_label(last.context_length)} "
        f"tokens, the longest length ({last.n10} lost, {last.n01} gained of {last.n}; accuracy "
        f"{fmt.score(last.baseline)} -> {fmt.score(last.candidate)})"
    )


def length_panels(manifest: Manifest, verdict: Verdict) -> list[LengthPanel]:
    """One panel per suite in verdict.json's ``lengths``; none for a run without them."""
    if not verdict.lengths:
        return []
    b, c = kv_capacity(manifest)
    names = [v.name if (v := manifest.variants.get(arm)) else arm for arm in ("baseline", "candidate")]
    out = []
    for i, s in enumerate(verdict.lengths):
        costs = _costs(s)
        note = f"What the candidate buys: {_buys(b, c)}" + (f"; {costs}." if costs else ".")
        out.append(
            LengthPanel(
                key=f"lengths-{i}",
                title=fmt.clean(f"{s.suite} by context length"),
                headers=list(HEADERS),
                rows=[length_cells(r) for r in s.rows],
                note=fmt.clean(f"{note} {trend_text(s)}"),
                svg=lengths_chart(s, arms=names),
                suite=fmt.clean(s.suite),
                metric=fmt.clean(s.metric),
                trend=s.trend,
            )
        )
    return out
