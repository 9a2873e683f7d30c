"""Drift rows: the token distribution's change, gated by budgets (verdict.json ``drift``).

A suite whose ``metric_kind`` is ``drift`` (the live ``drift`` suite, an imported lm-eval
perplexity task) has no difference test: two numerics always differ a little, so "is there a
difference" would block every candidate at a large enough n. Its rows ask whether the change is
provably small, the way non-inferiority asks about accuracy:

- ``kld``: the mean per-token KL divergence KL(baseline || candidate) in nats, from each position's
  top-k lists (``stats.position_kld``: the tokens in both lists plus one remainder bucket, a lower
  bound on the true KL by the data-processing inequality), pooled over positions;
- ``ppl_ratio``: the candidate's perplexity over the baseline's, exp of the mean change in
  log-likelihood per unit (token, or lm-eval's word for an imported task);
- ``top1_agree``: the share of positions whose most likely token is the same (shown, not gated).

Each gated row is a one-sided test of H0 "the drift is within the budget" by a paired bootstrap
over documents (``stats.ratio_budget_test``): under difference and regression it joins the Holm
family (block when the drift is shown above the budget); under non-inferiority it must show the
drift below the budget on its own (an intersection-union test, like every NI row). A row that
shows neither is UNDERPOWERED: its upper bound is not below the budget. With ``--aa`` the
baseline's second launch gives the same rows, shown as the noise floor.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.gate._decode_drift import MIN_LATE_DOCS, bucket_sums, greedy_klds, parting_text, span_label
from evalgate.gate._drift_budget import (
    DEFAULT_DRIFT_BUDGET,
    DEFAULT_KLD_BUDGET,
    DEFAULT_PPL_MARGIN,
    DriftBudget,
    parse_drift_budget,
)
from evalgate.gate._tested import Status, Tested
from evalgate.store.drift_records import Forced, Greedy, check_pair, forced_of, greedy_of
from evalgate.store.records import Pair

__all__ = [
    "DEFAULT_DRIFT_BUDGET",
    "DEFAULT_KLD_BUDGET",
    "DEFAULT_PPL_MARGIN",
    "DriftBudget",
    "DriftRow",
    "SuiteDrift",
    "check_drift",
    "drift_for",
    "parse_drift_budget",
]

UNITS = ("tokens", "words", "bytes")
"""A drift record's count of scored units, the first present being the perplexity's unit."""
QUANTILES = (0.5, 0.9, 0.99, 0.999)
POSITION_BUCKETS = 8
"""The by-position chart's bins over the scored positions."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class DriftRow(Tested):
    """One drift measure of one pair of arms. Its ``p_value``: H0, the drift is within the budget
    (bootstrap over documents, stats.ratio_budget_test); 1.0 for a row that is not gated."""

    suite: str
    measure: str
    """kld (nats per token), ppl_ratio (candidate / baseline perplexity) or top1_agree (share)."""
    pair: str
    """candidate (baseline vs candidate, gated) or aa (baseline vs its second launch: the noise floor)."""
    unit: str
    """What is averaged: tokens, or lm-eval's words or bytes for an imported perplexity task."""
    n: int
    """Documents paired."""
    units: int
    """Positions (or words, bytes) summed over the documents."""
    estimate: float
    lower: float | None = None
    """One-sided lower confidence bound (1 - alpha): above the budget means shown over it."""
    upper: float | None = None
    """One-sided upper confidence bound (1 - alpha): below the budget means shown within it."""
    budget: float | None = None
    """On the measure's own scale (a KL, or a perplexity ratio such as 1.02); None: not gated."""
    budget_source: str = ""
    status: Status = field(default="info", kw_only=True)
    """info (shown, not gated) until the gate judges a gated row: then pass, block or underpowered
    (an advisory suite's: advisory-pass, -block, -underpowered)."""
    test: str = ""
    path: str = ""
    """What the measure read: prefill (prompt logprobs), decode (generated tokens: llama.cpp's
    forced ones, or greedy generations compared on their shared prefix), "" (imported, or unknown)."""
    span: str = ""
    """The generated-token positions it covers (0-63, 64-255, 256-1023, 1024+); "": all of them."""
    shown_only: bool = False
    """A per-position bucket shown beside the gated rows, not in the family."""
    onset: str = ""
    """For a decode-path row: the first bucket whose lower bound is above the budget, if any."""
    identical: float | None = None
    """Every document identical on both arms: the most of documents that could differ (an upper
    bound on the share, Clopper-Pearson), since no differing document sizes the drift."""
    budget_low: float | None = None
    """--policy difference: the perplexity ratio's lower edge, 1 / (1 + margin). A ratio shown below
    it blocks too (a change, not a regression); ``p_value`` is then two-sided (twice the smaller
    one-sided p) and ``lower``/``upper`` keep their one-sided levels."""

    @property
    def gated(self) -> bool:
        return self.pair == "candidate" and self.budget is not None and not self.shown_only


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class SuiteDrift:
    """verdict.json ``drift``: one drift suite's rows, per-token KL quantiles and the KL by position."""

    suite: str
    rows: list[DriftRow] = field(default_factory=list)
    quantiles: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per pair (candidate, aa): the per-token KL's p50, p90, p99 and p99.9."""
    by_position: dict[str, list[float]] = field(default_factory=dict)
    """Per pair: the mean KL in each of ``POSITION_BUCKETS`` equal spans of the scored positions."""
    positions: list[int] = field(default_factory=list)
    """The first scored position (0-based, within the scored span) of each bucket."""
    note: str = ""


def check_drift(suite: str, pairs: Sequence[Pair]) -> str | None:
    """Why a drift suite's pairs cannot be judged (an ERROR row), or None: no pairs, a
    log-likelihood missing or not finite or positive, no unit count, or counts that differ
    between the arms (not the same tokens: the records' ``sent_hash`` is checked by the caller)."""
    if not pairs:
        return f"{suite}: no paired documents"
    for p in pairs:
        for arm, r in (("baseline", p.baseline), ("candidate", p.candidate)):
            ll = r.metrics.get("loglik")
            if ll is None or not math.isfinite(ll) or ll > 1e-6:
                return f"{suite}/{p.item_id}: the {arm}'s log-likelihood is {ll!r}, not a finite value <= 0"
        unit = _unit(p)
        if unit is None:
            return f"{suite}/{p.item_id}: no count of scored units ({', '.join(UNITS)}) on both arms"
        why = check_pair(suite, p)
        if why is not None:
            return why
        nb, nc = p.baseline.metrics[unit], p.candidate.metrics[unit]
        if not (nb == nc and nb > 0):
            return f"{suite}/{p.item_id}: the arms scored {nb:g} and {nc:g} {unit}: not the same document"
        if unit != _unit(pairs[0]):
            return f"{suite}/{p.item_id}: counts {unit} where {pairs[0].item_id} counts {_unit(pairs[0])}"
    return None


def drift_for(
    suite: str,
    pairs: Sequence[Pair],
    *,
    budget: DriftBudget,
    alpha: float,
    aa_pairs: Sequence[Pair] | None = None,
    seed: int = 0,
    two_sided: bool = False,
) -> SuiteDrift:
    """The suite's rows for the candidate (gated) and, with ``aa_pairs``, the A/A arm (shown);
    ``two_sided`` (--policy difference): the gated perplexity ratio also blocks when shown below
    1 / (1 + margin)."""
    out = SuiteDrift(suite)
    for pair_name, these in (("candidate", pairs), ("aa", aa_pairs)):
        if these is None:
            continue
        gate = budget if pair_name == "candidate" else None
        rows, kls = _rows(suite, pair_name, these, gate, alpha=alpha, seed=seed, two_sided=two_sided)
        out.rows += rows
        if kls:
            flat = [v for doc in kls for v in doc]
            out.quantiles[pair_name] = {
                k: float(v) for k, v in stats.kld_quantiles(flat, qs=QUANTILES).items()
            }
            out.positions, out.by_position[pair_name] = _by_position(kls)
    unit = _unit(pairs[0]) if pairs else None
    if unit and unit != "tokens":
        out.note = (
            f"imported perplexity: per-document log-likelihoods per {unit[:-1]} (no distributions: no KL)"
        )
    return out


def _rows(
    suite: str,
    pair_name: str,
    pairs: Sequence[Pair],
    budget: DriftBudget | None,
    *,
    alpha: float,
    seed: int,
    two_sided: bool = False,
) -> tuple[list[DriftRow], list[list[float]]]:
    rows: list[DriftRow] = []
    kls: list[list[float]] = []
    row = functools.partial(_budget_row, suite, pair_name, budget=budget, alpha=alpha, seed=seed)
    if pairs and all("tokens" in p.baseline.metrics for p in pairs):  # live: distributions recorded
        forced = [(forced_of(p.baseline), forced_of(p.candidate)) for p in pairs]
        path = forced[0][0].path
        compared = [stats.position_drift(b.top, c.top, forced=_forced(b, c)) for b, c in forced]
        docs = [klds for klds, _ in compared]
        kls = [[float(v) for v in doc] for doc in docs]
        same = sum(int(agree.sum()) for _, agree in compared)
        rows.append(row("kld", "tokens", [math.fsum(d) for d in kls], [float(len(d)) for d in kls],
                        budget and budget.kld, path=path))  # fmt: skip
        rows.append(_agree_row(suite, pair_name, len(pairs), sum(len(d) for d in kls), same, path))
        if path == "decode":
            rows += _bucket_rows(row, docs, budget, path, first=rows[0])
        greedy = [(greedy_of(p.baseline), greedy_of(p.candidate)) for p in pairs]
        if greedy and all(b is not None and c is not None for b, c in greedy):
            rows += _greedy_rows(suite, pair_name, row, greedy, budget)  # type: ignore[arg-type]
    path = rows[0].path if rows else ""
    for i, unit in enumerate(u for u in UNITS if all(u in p.baseline.metrics for p in pairs)):
        diffs = [p.baseline.metrics["loglik"] - p.candidate.metrics["loglik"] for p in pairs]
        counts = [float(p.baseline.metrics[unit]) for p in pairs]
        margin = budget.ppl_margin if budget is not None and i == 0 else None
        rows.append(row("ppl_ratio", unit, diffs, counts, margin, path=path, two_sided=two_sided))
    return rows, kls


def _forced(b: Forced, c: Forced) -> list[tuple[int, float, float]] | None:
    """The forced token's own logprob on both arms, where the records hold it (version 2)."""
    if b.ids is None or b.lp is None or c.lp is None:
        return None
    return list(zip(b.ids, b.lp, c.lp, strict=True))


def _agree_row(
    suite: str, pair_name: str, n: int, total: int, same: int, path: str, test: str = ""
) -> DriftRow:
    return DriftRow(
        suite, "top1_agree", pair_name, "tokens", n, total, same / total if total else 1.0,
        test=test or "share of positions whose most likely token is the same",
        p_value=1.0, reason="shown, not gated", path=path,
    )  # fmt: skip


def _greedy_rows(
    suite: str, pair_name: str, row: Any, greedy: Sequence[tuple[Greedy, Greedy]], budget: DriftBudget | None
) -> list[DriftRow]:
    """The decode path read from greedy generations: KL on the shared prefix (gated), its
    buckets, top-1 agreement and where the generations part (module ``_decode_drift``)."""
    compared = [greedy_klds(b, c) for b, c in greedy]
    docs = [k for k, _, _ in compared]
    test = "paired bootstrap over documents, on each pair's shared greedy prefix and first parting"
    keep = [i for i, d in enumerate(docs) if d.size]
    out = [
        row("kld", "tokens", [math.fsum(docs[i]) for i in keep], [float(docs[i].size) for i in keep],
            budget and budget.kld, path="decode", how=test)
    ]  # fmt: skip
    same, total = sum(int(s.sum()) for _, s, _ in compared), sum(int(d.size) for d in docs)
    out.append(_agree_row(suite, pair_name, len(keep), total, same, "decode", "on the shared greedy prefix"))
    share, where = parting_text([part for _, _, part in compared])
    out.append(
        DriftRow(suite, "parted", pair_name, "documents", len(greedy), len(greedy), share,
                 p_value=1.0, reason=where, path="decode", test="greedy generations compared token by token")
    )  # fmt: skip
    return out + _bucket_rows(row, [docs[i] for i in keep], budget, "decode", first=out[0])


def _bucket_rows(
    row: Any, docs: Sequence[Any], budget: DriftBudget | None, path: str, first: DriftRow | None = None
) -> list[DriftRow]:
    """Per position bucket, the KL row over the documents that reach it (shown); the latest bucket
    past the first that ``MIN_LATE_DOCS`` documents reach is gated. ``onset`` names the first
    bucket shown above the budget (``first``, the whole row, when there is one bucket)."""
    buckets = bucket_sums(docs)
    limit = budget.kld if budget is not None else None
    if len(buckets) < 2:  # one bucket is the whole row again: no rows, but it says where
        if (
            first is not None
            and buckets
            and limit is not None
            and first.lower is not None
            and first.lower > limit
        ):
            first.onset = span_label(buckets[0][0])
        return []
    late = max((i for i, sums, _ in buckets if i > 0 and len(sums) >= MIN_LATE_DOCS), default=None)
    out = [
        row("kld", "tokens", sums, counts, budget and budget.kld, path=path, span=span_label(i),
            shown_only=i != late)
        for i, sums, counts in buckets
    ]  # fmt: skip
    onset = next((r.span for r in out if limit is not None and r.lower is not None and r.lower > limit), "")
    for r in [*out, *([first] if first is not None else [])]:
        r.onset = onset
    return out


def _budget_row(
    suite: str,
    pair_name: str,
    measure: str,
    unit: str,
    numer: Sequence[float],
    denom: Sequence[float],
    limit: float | None,
    *,
    budget: DriftBudget | None,
    alpha: float,
    seed: int,
    path: str = "",
    span: str = "",
    shown_only: bool = False,
    how: str = "",
    two_sided: bool = False,
) -> DriftRow:
    """A ratio estimator's row; the perplexity ratio is tested on its log (theta = mean change in
    log-likelihood per unit) against log(1 + margin), and shown as a ratio."""
    ppl = measure == "ppl_ratio"
    on_theta = None if limit is None else (math.log1p(limit) if ppl else limit)
    test = stats.ratio_budget_test(
        numer,
        denom,
        budget=on_theta if on_theta is not None else 0.0,
        alpha=alpha,
        seed=stats.stable_seed(seed, suite, measure, unit, pair_name, *((path, span) if path else ())),
    )  # fmt: skip  (an info row's budget is 0.0: its p is not used)
    show = _exp if ppl else (lambda v: v)
    row = DriftRow(
        suite, measure, pair_name, unit, len(numer), int(sum(denom)), min(float(show(test.estimate)), sys.float_info.max),
        lower=_finite(show, test.lower), upper=_finite(show, test.upper),
        budget=None if limit is None else (1 + limit if ppl else limit),
        budget_source="" if budget is None or limit is None else budget.source,
        p_value=float(test.p_value) if limit is not None else 1.0,
        test=f"{how or 'paired bootstrap over documents'} ({test.method}), one-sided",
        path=path, span=span, shown_only=shown_only,
        identical=test.share_upper if test.nonzero == 0 and test.n >= 2 else None,
    )  # fmt: skip
    if ppl and two_sided and limit is not None and not shown_only:  # H1 also: shown below 1 / (1 + margin)
        low = stats.ratio_budget_test(
            [-x for x in numer], denom, budget=on_theta or 0.0, alpha=alpha,
            seed=stats.stable_seed(seed, suite, measure, unit, pair_name, "below", *((path, span) if path else ())),
        )  # fmt: skip
        row.budget_low = 1 / (1 + limit)
        row.p_value = min(1.0, 2 * min(row.p_value, float(low.p_value)))
        row.test = f"{how or 'paired bootstrap over documents'} ({test.method}), two-sided: above 1 + margin or below 1 / (1 + margin)"
    if limit is None or shown_only:
        row.reason = "shown, not gated" if pair_name == "candidate" else "the noise floor (A/A), not gated"
        if shown_only and pair_name == "candidate":
            row.status = "info"
    return row


def _finite(show: Any, value: float) -> float | None:
    shown = float(show(value)) if math.isfinite(value) else math.inf
    return shown if math.isfinite(shown) else None


def _exp(value: float) -> float:
    """A log ratio shown as a ratio; past float range (a document a thousand nats apart) infinite,
    which the row shows as no bound rather than crashing (OverflowError)."""
    return math.exp(value) if value < 700 else math.inf


def _unit(p: Pair) -> str | None:
    return next((u for u in UNITS if u in p.baseline.metrics and u in p.candidate.metrics), None)


def _by_position(kls: Sequence[Sequence[float]]) -> tuple[list[int], list[float]]:
    """Mean KL over documents in equal spans of the scored positions (documents differ in length:
    each bucket averages the positions that reach it)."""
    longest = max((len(d) for d in kls), default=0)
    if not longest:
        return [], []
    width = max(1, math.ceil(longest / POSITION_BUCKETS))
    starts = list(range(0, longest, width))
    means = []
    for s in starts:
        values = [v for doc in kls for v in doc[s : s + width]]
        means.append(float(math.fsum(values) / len(values)) if values else 0.0)
    return starts, means
