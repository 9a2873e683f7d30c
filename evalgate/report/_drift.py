"""The drift panels (verdict.json ``drift``) and the flip-drift table (``flip_drift``) for every renderer.

A drift suite has no answers to flip: its rows are budgets on the token distribution's change
(gate/_drift.py). Each panel holds one suite's rows, the per-token KL quantiles and top-1
agreement per pair of arms (the candidate, and with ``--aa`` the A/A noise floor), and the chart
of the mean KL against the scored position. Numbers are formatted here once, so HTML, Markdown,
JUnit and the terminal agree: KL in nats per token to 3 significant digits, ratios as x1.0123,
shares as percentages. Returns plain headers, rows and text; ``_view`` keeps them (no import
back, no cycle).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalgate.gate import DriftRow, SuiteDrift, Verdict
from evalgate.report import _format as fmt
from evalgate.report._sections import Section
from evalgate.report.drift_svg import drift_chart

__all__ = [
    "FLIP_HEADERS",
    "FLIP_NOTE",
    "FLIP_TITLE",
    "HEADERS",
    "PAIRS",
    "QUANTILE_HEADERS",
    "DriftPanel",
    "DriftTable",
    "drift_cells",
    "drift_label",
    "drift_panels",
    "drift_value",
    "flip_drift_table",
    "flip_drift_tables",
    "quantile_rows",
]

HEADERS = ["measure", "pair", "n", "estimate", "lower bound", "upper bound", "budget", "status", "reason"]
QUANTILE_HEADERS = ["pair", "KL p50", "KL p90", "KL p99", "KL p99.9", "top-1 agreement"]
FLIP_HEADERS = [
    "suite", "flipped n", "flipped: mean choice KL", "unflipped n", "unflipped: mean choice KL", "AUC",
]  # fmt: skip
PAIRS = {"candidate": "candidate", "aa": "A/A (noise floor)"}
"""How a row's pair of arms reads: the gated baseline-vs-candidate pair, or the baseline's second launch."""
FLIP_TITLE = "Does the distribution predict the flips?"
FLIP_NOTE = (
    "Choice KL: the KL divergence (nats) between the arms' distributions over a multiple-choice item's "
    "choices. AUC: the chance that a flipped item's KL exceeds an unflipped one's (ties count half): "
    "0.5 means the distribution's drift does not tell the flipped items from the others, near 1 that it "
    "predicts them."
)
KL_NOTE = (
    "KL(baseline ‖ candidate) per scored token in nats, from each position's top-k lists (every listed "
    "token by its identity, a token missing from one list at most as likely as that list's last entry: a "
    "lower bound on the true KL); perplexity ratio = candidate over baseline. Prefill rows read prompt "
    "logprobs (the forward pass over freshly computed keys and values); decode rows read generated "
    "tokens, each step reading the KV cache back (llama.cpp's forced tokens, or both arms' greedy "
    "generations compared up to the first position where they part), per generated-token position "
    "bucket too. "
)
"""The KL part of a panel's note: only for a suite with a kld row (an imported perplexity task has none)."""
PAST_NOTE = (
    "Past the parting the texts are compared whole: the candidate's text read by the baseline against "
    "the baseline's own (per token), the greedy length, and on a prefill engine each arm's decode "
    "against its own prefill re-read of its text. "
)
"""Added for a suite with greedy generations (rows past the first parting)."""
NOTE = (
    "{kl}The bounds are one-sided {level} paired-bootstrap bounds over documents: a row passes "
    "when its upper bound is below the budget, blocks when the drift is shown above it, and is "
    "UNDERPOWERED otherwise (more documents narrow the bounds)."
)


@dataclass(frozen=True)
class DriftTable:
    """A plain table (``title``, ``headers``, ``rows``, as ``_view.Section`` and the section macro read)."""

    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True, kw_only=True)
class DriftPanel(Section):
    """One drift suite: a ``Section`` (its rows, note and chart) with what the badges, JUnit and Markdown read."""

    statuses: list[str]
    """Each row's status (pass, block, underpowered, info), for its badge."""
    suite: str
    quantiles: DriftTable | None
    """Per pair: the per-token KL quantiles and top-1 agreement (None: an imported task, no distributions)."""
    flagged: list[str] = field(default_factory=list)
    """The reasons of the rows that block or are underpowered, escaped-ready text."""
    gated: list[DriftRow] = field(default_factory=list)
    """The gated rows (JUnit makes each a test case)."""


def drift_label(row: DriftRow) -> str:
    """The measure as a reader names it, with its unit, the path it read (prefill: prompt
    logprobs; decode: generated tokens) and the positions it covers."""
    path = f"{row.path}: " if row.path else ""
    span = f", positions {row.span}" if row.span else ""
    if row.measure == "kld":
        return f"{path}mean KL (nats/token){span}"
    if row.measure == "ppl_ratio":
        return f"{path}perplexity ratio (per {row.unit.removesuffix('s')})"
    if row.measure == "top1_agree":
        return f"{path}top-1 agreement"
    if row.measure == "parted":
        return f"{path}greedy generations parted"
    return {
        "cross": f"{path}the candidate's text read by the baseline (nats/token, own text minus it)",
        "cross_back": f"{path}the baseline's text read by the candidate (nats/token, own text minus it)",
        "length": f"{path}greedy length, candidate against baseline",
        "consistency": f"{path}decode vs prefill on its own text, candidate's excess (nats/token)",
    }.get(row.measure, row.measure)


def drift_value(measure: str, value: float | None) -> str:
    """KL to 3 significant digits, a ratio as x1.0123, a share as a percentage; None as a dash."""
    if value is None:
        return "—"
    if measure in ("kld", "cross", "cross_back", "consistency"):
        return f"{value:.3g}"
    if measure == "length":
        return f"{value:+.1%}"
    if measure == "ppl_ratio":
        return f"x{value:.4f}"
    if measure in ("top1_agree", "parted"):
        return fmt.pct(value)
    return f"{value:.4g}"


def drift_cells(row: DriftRow) -> list[str]:
    """One row of the drift table (``HEADERS``), formatted as every renderer shows it."""
    return [
        drift_label(row),
        PAIRS.get(row.pair, fmt.clean(row.pair)),
        str(row.n),
        drift_value(row.measure, row.estimate),
        drift_value(row.measure, row.lower),
        drift_value(row.measure, row.upper),
        drift_value(row.measure, row.budget) if row.budget is not None else "not gated",
        row.status.upper(),
        fmt.clean(row.reason),
    ]


def quantile_rows(s: SuiteDrift) -> list[list[str]]:
    """Per pair with distributions: the per-token KL's p50, p90, p99, p99.9 and top-1 agreement."""
    agree: dict[str, float] = {}
    for r in s.rows:  # each source's agreement: the forced path's first, then the greedy prefix's
        if r.measure == "top1_agree":
            key = r.pair if r.pair not in agree else f"{r.pair} greedy"
            agree.setdefault(key, r.estimate)
    out = []
    for pair in [p for p in PAIRS if p in s.quantiles] + [p for p in s.quantiles if p not in PAIRS]:
        q = s.quantiles[pair]
        base = pair.partition(" ")[0]
        label = PAIRS.get(base, fmt.clean(base))
        where = s.quantile_paths.get(pair)
        out.append(
            [
                f"{label}, {fmt.clean(where)}" if where else label,
                *(drift_value("kld", q.get(k)) for k in ("p50", "p90", "p99", "p99.9")),
                drift_value("top1_agree", agree.get(pair)),
            ]
        )
    return out


def drift_panels(verdict: Verdict) -> list[DriftPanel]:
    """One panel per suite in verdict.json's ``drift``; none for a run without them."""
    out = []
    level = f"{(1 - verdict.alpha) * 100:g}%"
    for i, s in enumerate(verdict.drift):
        kld = next((r for r in s.rows if r.measure == "kld" and r.budget is not None), None)
        quantiles = quantile_rows(s)
        kl = (
            KL_NOTE
            if any(r.measure == "kld" for r in s.rows)
            else "Perplexity ratio = candidate over baseline. "
        )
        if any(r.measure in ("parted", "cross", "length") for r in s.rows):
            kl += PAST_NOTE
        note = NOTE.format(kl=kl, level=level) + (f" {s.note}." if s.note else "")
        out.append(
            DriftPanel(
                key=f"drift-{i}",
                title=fmt.clean(f"{s.suite}: distribution drift"),
                headers=list(HEADERS),
                rows=[drift_cells(r) for r in s.rows],
                statuses=[r.status for r in s.rows],
                note=fmt.clean(note),
                svg=drift_chart(s, budget=kld.budget if kld is not None else None),
                suite=fmt.clean(s.suite),
                quantiles=DriftTable("per-token KL quantiles", list(QUANTILE_HEADERS), quantiles)
                if quantiles
                else None,
                flagged=[
                    fmt.clean(f"{r.status.upper()}: {r.reason}")
                    for r in s.rows
                    if r.status in ("block", "underpowered")
                ],
                gated=[r for r in s.rows if r.gated],
            )
        )
    return out


def _kl(value: Any) -> str:
    return "—" if value is None else f"{float(value):.3g}"


def flip_drift_table(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) from verdict.json's ``flip_drift`` (the dict form every renderer reads)."""
    out = []
    for r in rows:
        auc = r.get("auc")
        out.append(
            [
                fmt.clean(str(r.get("suite", ""))),
                str(r.get("flipped", 0)),
                _kl(r.get("flipped_kl")),
                str(r.get("unflipped", 0)),
                _kl(r.get("unflipped_kl")),
                "—" if auc is None else f"{float(auc):.2f}",
            ]
        )
    return list(FLIP_HEADERS), out


def flip_drift_tables(verdict: Verdict) -> list[tuple[list[str], list[list[str]]]]:
    """The flip-drift table as a one-element list, or none for a run without one."""
    rows = verdict.to_dict().get("flip_drift") or []
    return [flip_drift_table(rows)] if rows else []
