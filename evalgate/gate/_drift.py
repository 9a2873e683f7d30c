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
from evalgate.gate._decode_drift import bucket_rows, greedy_rows
from evalgate.gate._drift_budget import (
    DEFAULT_DRIFT_BUDGET,
    DEFAULT_KLD_BUDGET,
    DEFAULT_PPL_MARGIN,
    DriftBudget,
    parse_drift_budget,
)
from evalgate.gate._drift_row import DriftRow, agree_row
from evalgate.store.drift_records import Forced, check_pair, forced_of, greedy_of
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
class SuiteDrift:
    """verdict.json ``drift``: one drift suite's rows, per-token KL quantiles and the KL by position."""

    suite: str
    rows: list[DriftRow] = field(default_factory=list)
    quantiles: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per pair (candidate, aa), the forced path's per-token KL p50, p90, p99 and p99.9; under
    "<pair> greedy" the same on the shared greedy prefix."""
    quantile_paths: dict[str, str] = field(default_factory=dict)
    """What each entry of ``quantiles`` read, named on its line: the forced solution's path where the
    records name it ("" where not), or the shared greedy prefix's."""
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
        rows, kl_sets = _rows(suite, pair_name, these, gate, alpha=alpha, seed=seed, two_sided=two_sided)
        out.rows += rows
        path = rows[0].path if rows else ""
        for source, kls in kl_sets.items():
            key = pair_name if source == "forced" else f"{pair_name} greedy"
            flat = [v for doc in kls for v in doc]
            if not flat:
                continue
            out.quantiles[key] = {k: float(v) for k, v in stats.kld_quantiles(flat, qs=QUANTILES).items()}
            where = f"{path} path" if source == "forced" and path else ""
            out.quantile_paths[key] = where if source == "forced" else "decode path, shared greedy prefix"
            if source == "forced":
                out.positions, out.by_position[pair_name] = _by_position(kls)
    _parted_beside_aa(out.rows)
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
) -> tuple[list[DriftRow], dict[str, list[list[float]]]]:
    """The pair's rows, and the per-token KL of each document per source (the forced path, the
    shared greedy prefix) for the quantiles."""
    rows: list[DriftRow] = []
    kls: list[list[float]] = []
    kl_sets: dict[str, list[list[float]]] = {}
    row = functools.partial(_budget_row, suite, pair_name, budget=budget, alpha=alpha, seed=seed)
    if pairs and all("tokens" in p.baseline.metrics for p in pairs):  # live: distributions recorded
        forced = [(forced_of(p.baseline), forced_of(p.candidate)) for p in pairs]
        path = forced[0][0].path
        compared = [stats.position_drift(b.top, c.top, forced=_forced(b, c)) for b, c in forced]
        docs = [klds for klds, _ in compared]
        kls = [[float(v) for v in doc] for doc in docs]
        kl_sets["forced"] = kls
        same = sum(int(agree.sum()) for _, agree in compared)
        rows.append(row("kld", "tokens", [math.fsum(d) for d in kls], [float(len(d)) for d in kls],
                        budget and budget.kld, path=path))  # fmt: skip
        rows.append(agree_row(suite, pair_name, len(pairs), sum(len(d) for d in kls), same, path))
        if path == "decode":
            rows += bucket_rows(row, docs, budget, path, first=rows[0])
        if all(greedy_of(p.baseline) is not None for p in pairs):  # check_pair: then on both arms
            more, greedy_kls = greedy_rows(suite, pair_name, row, pairs, budget)
            rows += more
            kl_sets["greedy"] = greedy_kls
    path = rows[0].path if rows else ""
    for i, unit in enumerate(u for u in UNITS if all(u in p.baseline.metrics for p in pairs)):
        diffs = [p.baseline.metrics["loglik"] - p.candidate.metrics["loglik"] for p in pairs]
        counts = [float(p.baseline.metrics[unit]) for p in pairs]
        margin = budget.ppl_margin if budget is not None and i == 0 else None
        rows.append(row("ppl_ratio", unit, diffs, counts, margin, path=path, two_sided=two_sided))
    return rows, kl_sets


def _forced(b: Forced, c: Forced) -> list[tuple[int, float, float]] | None:
    """The forced token's own logprob on both arms, where the records hold it (version 2)."""
    if b.ids is None or b.lp is None or c.lp is None:
        return None
    return list(zip(b.ids, b.lp, c.lp, strict=True))


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
        upper_alpha=alpha / 2,  # a "within budget" bound at alpha holds it only from n ~ 200
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
        identical=test.share_upper if test.nonzero == 0 and test.n >= 2 else None, differing=test.nonzero,
    )  # fmt: skip
    if two_sided and limit is not None and not shown_only:  # H1 also: shown below the band's lower edge
        low = stats.ratio_budget_test(
            [-x for x in numer], denom, budget=on_theta or 0.0, alpha=alpha,
            seed=stats.stable_seed(seed, suite, measure, unit, pair_name, "below", *((path, span) if path else ())),
        )  # fmt: skip
        row.budget_low = 1 / (1 + limit) if ppl else -limit
        row.p_value = min(1.0, 2 * min(row.p_value, float(low.p_value)))
        edges = "1 + margin or below 1 / (1 + margin)" if ppl else "the budget or below minus the budget"
        row.test = f"{how or 'paired bootstrap over documents'} ({test.method}), two-sided: above {edges}"
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


def _parted_beside_aa(rows: Sequence[DriftRow]) -> None:
    """The candidate's parted share beside what the engine does with itself (the A/A repeat)."""
    parted = {r.pair: r for r in rows if r.measure == "parted"}
    if "candidate" in parted:
        aa = parted.get("aa")
        parted["candidate"].reason += (
            f"; the A/A repeat parts on {aa.estimate:.0%} of documents" if aa is not None
            else "; no A/A repeat to compare with (--aa: a deterministic engine's never parts)"
        )  # fmt: skip


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
