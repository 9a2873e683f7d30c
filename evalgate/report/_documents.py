"""A drift suite's documents, for the per-item views: no answers to flip, so no regressions.

A drift record (suites/drift.py, or an imported lm-eval perplexity task) holds a document's
log-likelihood and its count of scored units (tokens, or lm-eval's words or bytes), and for a
live suite each position's top-k logprobs (``response = {"top": [[[id, logprob], ...], ...]}``).
Per document this shows both arms' log-likelihood, the change per unit, and, where both arms
recorded distributions, the document's mean KL and top-1 agreement
(``stats.document_drift``), largest first: where a reviewer should look. A record that cannot
be read (another shape, a NaN) shows a dash, never a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalgate import stats
from evalgate.gate import UNITS
from evalgate.report import _format as fmt
from evalgate.store.records import Pair

__all__ = ["DOCUMENT_CHARS", "DocNumbers", "DocView", "document_numbers", "document_view", "drift_documents"]

DOCUMENT_CHARS = 120
"""Characters of the document shown beside its numbers (the whole text is in prompts/)."""


@dataclass(frozen=True)
class DocView:
    item_id: str
    repeat: int
    text: str
    """The document's first characters (empty for a private suite or without prompts/)."""
    baseline: str
    """The baseline's log-likelihood, nats."""
    candidate: str
    change: str
    """(candidate - baseline) log-likelihood per unit, nats: negative is less likely on the candidate."""
    units: str
    """"48 tokens", "211 words"."""
    kld: str
    """The document's mean KL(baseline || candidate) per token, nats; a dash without distributions."""
    top1: str
    """The share of its positions whose most likely token agrees; a dash without distributions."""
    order: float
    """What the documents are sorted by (largest first): the mean KL, else |change| per unit."""


def _unit(p: Pair) -> str | None:
    return next((u for u in UNITS if u in p.baseline.metrics and u in p.candidate.metrics), None)


def _tops(response: Any) -> list[Any] | None:
    top = response.get("top") if isinstance(response, Mapping) else None
    return top if isinstance(top, list) and top else None


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class DocNumbers:
    """One document's numbers (None where missing or unreadable); ``evalgate.load_run``'s ``drift()`` rows."""

    baseline_loglik: float | None
    candidate_loglik: float | None
    unit: str | None
    units: float | None
    change_per_unit: float | None
    """(candidate - baseline) log-likelihood per unit, nats."""
    kld_mean: float | None
    top1_agree: float | None
    positions: int | None
    """Positions with distributions on both arms (a live drift suite)."""


def document_numbers(pair: Pair) -> DocNumbers:
    """Both arms' log-likelihoods, the change per unit and, with distributions, the mean KL."""
    b, c = pair.baseline, pair.candidate
    lb, lc = _number(b.metrics.get("loglik")), _number(c.metrics.get("loglik"))
    unit = _unit(pair)
    count = _number(b.metrics.get(unit)) if unit else None
    change = (lc - lb) / count if lb is not None and lc is not None and count else None
    kld = top1 = n = None
    tb, tc = _tops(b.response), _tops(c.response)
    if tb is not None and tc is not None and len(tb) == len(tc):
        try:
            d = stats.document_drift(tb, tc)
        except (TypeError, ValueError):  # a record of another shape: shown without its KL
            d = None
        if d is not None and d.n:
            kld, top1, n = d.kld_sum / d.n, d.top1_same / d.n, d.n
    return DocNumbers(lb, lc, unit, count, change, kld, top1, n)


def document_view(pair: Pair, prompt: Mapping[str, Any] | None, private: bool) -> DocView:
    """One document's row; every value that is missing or unreadable is a dash."""
    x = document_numbers(pair)
    text = "" if private else fmt.clean(str((prompt or {}).get("prompt") or ""))
    if len(text) > DOCUMENT_CHARS:
        text = text[: DOCUMENT_CHARS - 1] + "…"
    return DocView(
        item_id=fmt.clean(pair.item_id),
        repeat=pair.repeat,
        text=" ".join(text.split()),
        baseline=_show(x.baseline_loglik, ".3f"),
        candidate=_show(x.candidate_loglik, ".3f"),
        change=_show(x.change_per_unit, "+.4f"),
        units="—" if x.units is None or x.unit is None else f"{x.units:g} {x.unit}",
        kld=_show(x.kld_mean, ".3g"),
        top1="—" if x.top1_agree is None else fmt.pct(x.top1_agree),
        order=x.kld_mean if x.kld_mean is not None else abs(x.change_per_unit or 0.0),
    )


def _show(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def drift_documents(
    pairs: Sequence[Pair], prompts: Mapping[str, Mapping[str, Any]], *, private: bool, limit: int
) -> tuple[list[DocView], bool]:
    """The first ``limit`` documents, the most drifted first, and whether any has a KL (live distributions)."""
    docs = [document_view(p, prompts.get(p.item_id), private) for p in pairs]
    docs.sort(key=lambda d: (-d.order, d.item_id, d.repeat))
    return docs[:limit], any(d.kld != "—" for d in docs)
