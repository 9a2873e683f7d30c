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

import math
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.errors import ConfigError
from evalgate.store.records import Pair

__all__ = [
    "DEFAULT_DRIFT_BUDGET",
    "DEFAULT_KLD_BUDGET",
    "DEFAULT_PPL_MARGIN",
    "DriftBudget",
    "DriftRow",
    "SuiteDrift",
    "check_drift",
    "drift_block_reason",
    "drift_for",
    "drift_pass_note",
    "drift_status",
    "parse_drift_budget",
]

DEFAULT_KLD_BUDGET = 0.01
"""Mean per-token KL (nats) a candidate may show; measured on the CPU engine (docs/measurements.md)."""
DEFAULT_PPL_MARGIN = 0.02
"""The perplexity ratio a candidate may show is 1 + this."""
UNITS = ("tokens", "words", "bytes")
"""A drift record's count of scored units, the first present being the perplexity's unit."""
QUANTILES = (0.5, 0.9, 0.99, 0.999)
POSITION_BUCKETS = 8
"""The by-position chart's bins over the scored positions."""


@pyd.dataclass(frozen=True)
class DriftBudget:
    """The budgets a drift row is tested against (``--drift-budget``, ``[suites.drift]``)."""

    kld: float = DEFAULT_KLD_BUDGET
    ppl_margin: float = DEFAULT_PPL_MARGIN
    source: str = "default"


DEFAULT_DRIFT_BUDGET = DriftBudget()


def parse_drift_budget(text: str | None) -> DriftBudget:
    """``0.01`` (the KL budget), ``kld=0.01``, ``ppl=2%`` or ``kld=0.01,ppl=0.02``; None: defaults."""
    if text is None:
        return DriftBudget()
    kld, ppl = DEFAULT_KLD_BUDGET, DEFAULT_PPL_MARGIN
    fix = "e.g. --drift-budget kld=0.01,ppl=2% (KL in nats per token; perplexity ratio up to 1.02)"
    for part in [p.strip() for p in str(text).split(",") if p.strip()] or [""]:
        key, sep, value = part.partition("=")
        key, value = (key.strip(), value.strip()) if sep else ("kld", key.strip())
        try:
            number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
        except ValueError:
            raise ConfigError(f"--drift-budget: {part!r} is not a number", fix=fix) from None
        if not (math.isfinite(number) and number > 0):
            raise ConfigError(f"--drift-budget: {part!r} must be a positive finite number", fix=fix)
        if key == "kld":
            kld = number
        elif key == "ppl":
            ppl = number
        else:
            raise ConfigError(f"--drift-budget: unknown budget {key!r}", fix=fix)
    return DriftBudget(kld=kld, ppl_margin=ppl, source="set for this run (--drift-budget or [suites.drift])")


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class DriftRow:
    """One drift measure of one pair of arms."""

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
    p_value: float = 1.0
    """H0: the drift is within the budget (bootstrap over documents, stats.ratio_budget_test)."""
    p_adjusted: float | None = None
    significant: bool = False
    """True when this row blocks."""
    status: str = "info"
    """pass, block, underpowered, info."""
    reason: str = ""
    test: str = ""

    @property
    def gated(self) -> bool:
        return self.pair == "candidate" and self.budget is not None


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
        nb, nc = p.baseline.metrics[unit], p.candidate.metrics[unit]
        if not (nb == nc and nb > 0):
            return f"{suite}/{p.item_id}: the arms scored {nb:g} and {nc:g} {unit}: not the same document"
    return None


def drift_for(
    suite: str,
    pairs: Sequence[Pair],
    *,
    budget: DriftBudget,
    alpha: float,
    aa_pairs: Sequence[Pair] | None = None,
    seed: int = 0,
) -> SuiteDrift:
    """The suite's rows for the candidate (gated) and, with ``aa_pairs``, the A/A arm (shown)."""
    out = SuiteDrift(suite)
    for pair_name, these in (("candidate", pairs), ("aa", aa_pairs)):
        if these is None:
            continue
        gate = budget if pair_name == "candidate" else None
        rows, kls = _rows(suite, pair_name, these, gate, alpha=alpha, seed=seed)
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
    suite: str, pair_name: str, pairs: Sequence[Pair], budget: DriftBudget | None, *, alpha: float, seed: int
) -> tuple[list[DriftRow], list[list[float]]]:
    rows: list[DriftRow] = []
    kls: list[list[float]] = []
    tops = [_tops(p) for p in pairs]
    if all(t is not None for t in tops):
        same = total = 0
        for tb, tc in tops:  # type: ignore[misc]
            kls.append([float(v) for v in stats.position_klds(tb, tc)])
            doc = stats.document_drift(tb, tc)
            same, total = same + doc.top1_same, total + doc.n
        sums, counts = [math.fsum(doc) for doc in kls], [float(len(doc)) for doc in kls]
        rows.append(
            _budget_row(
                suite, pair_name, "kld", "tokens", sums, counts, budget and budget.kld, budget, alpha, seed
            )
        )
        rows.append(
            DriftRow(
                suite,
                "top1_agree",
                pair_name,
                "tokens",
                len(pairs),
                total,
                same / total if total else 1.0,
                test="share of positions whose most likely token is the same",
                status="info",
                reason="shown, not gated",
            )
        )
    for i, unit in enumerate(u for u in UNITS if all(u in p.baseline.metrics for p in pairs)):
        diffs = [p.baseline.metrics["loglik"] - p.candidate.metrics["loglik"] for p in pairs]
        counts = [float(p.baseline.metrics[unit]) for p in pairs]
        margin = budget.ppl_margin if budget is not None and i == 0 else None
        rows.append(
            _budget_row(suite, pair_name, "ppl_ratio", unit, diffs, counts, margin, budget, alpha, seed)
        )
    return rows, kls


def _budget_row(
    suite: str,
    pair_name: str,
    measure: str,
    unit: str,
    numer: Sequence[float],
    denom: Sequence[float],
    limit: float | None,
    budget: DriftBudget | None,
    alpha: float,
    seed: int,
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
        seed=stats.stable_seed(seed, suite, measure, unit, pair_name),
    )  # fmt: skip  (an info row's budget is 0.0: its p is not used)
    show = math.exp if ppl else (lambda v: v)
    row = DriftRow(
        suite, measure, pair_name, unit, len(numer), int(sum(denom)), float(show(test.estimate)),
        lower=_finite(show, test.lower), upper=_finite(show, test.upper),
        budget=None if limit is None else (1 + limit if ppl else limit),
        budget_source="" if budget is None or limit is None else budget.source,
        p_value=float(test.p_value) if limit is not None else 1.0,
        test=f"paired bootstrap over documents ({test.method}), one-sided",
    )  # fmt: skip
    if limit is None:
        row.reason = "shown, not gated" if pair_name == "candidate" else "the noise floor (A/A), not gated"
    return row


def _finite(show: Any, value: float) -> float | None:
    return float(show(value)) if math.isfinite(value) else None


def drift_status(row: DriftRow, *, non_inferiority: bool, alpha: float) -> None:
    """A gated row's status and reason once its significance is known (Holm, or on its own under NI)."""
    if not row.gated:
        return
    what = _describe(row)
    within = row.upper is not None and row.budget is not None and row.upper < row.budget
    if non_inferiority:
        row.significant = not within
    if row.significant:
        row.status = "block"
        shown = "not shown within" if non_inferiority else "above"
        p = "" if non_inferiority else f", Holm p = {row.p_adjusted:.3g} < {alpha}"
        row.reason = f"{what} {shown} the budget {_fmt(row, row.budget)}{p}"
    elif within:
        row.status = "pass"
        row.reason = f"{what}: within the budget {_fmt(row, row.budget)}, powered (upper bound below it)"
    else:
        row.status = "underpowered"
        row.reason = (
            f"{what}: not shown above the budget {_fmt(row, row.budget)}, nor within it: the upper bound "
            f"{_fmt(row, row.upper)} is not below it at n = {row.n} documents (more documents narrow it)"
        )


def _describe(row: DriftRow) -> str:
    name = {"kld": "mean KL", "ppl_ratio": f"perplexity ratio (per {row.unit[:-1]})"}.get(
        row.measure, row.measure
    )
    bounds = f"[{_fmt(row, row.lower)}, {_fmt(row, row.upper)}]"
    return f"{row.suite} {name} {_fmt(row, row.estimate)}, bounds {bounds} ({row.n} documents)"


def _fmt(row: DriftRow, value: float | None) -> str:
    if value is None:
        return "n/a"
    if row.measure == "kld":
        return f"{value:.3g} nats/token"
    if row.measure == "ppl_ratio":
        return f"x{value:.4f}"
    return f"{value:.1%}"


def _unit(p: Pair) -> str | None:
    return next((u for u in UNITS if u in p.baseline.metrics and u in p.candidate.metrics), None)


def _tops(p: Pair) -> tuple[list[Any], list[Any]] | None:
    """Both arms' per-position top-k lists, when both recorded the same number of positions."""
    b, c = p.baseline.response, p.candidate.response
    if isinstance(b, Mapping) and isinstance(c, Mapping):
        tb, tc = b.get("top"), c.get("top")
        if isinstance(tb, list) and isinstance(tc, list) and len(tb) == len(tc):
            return [[(int(t), float(lp)) for t, lp in pos] for pos in tb], [
                [(int(t), float(lp)) for t, lp in pos] for pos in tc
            ]
    return None


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


def drift_block_reason(drift: Sequence[SuiteDrift]) -> str | None:
    """The verdict's reason when a drift row blocks (the first, by adjusted p), else None."""
    blocking = [r for d in drift for r in d.rows if r.gated and r.significant]
    if not blocking:
        return None
    worst = min(blocking, key=lambda r: r.p_adjusted if r.p_adjusted is not None else r.p_value)
    return worst.reason


def drift_pass_note(drift: Sequence[SuiteDrift]) -> str:
    """What a PASS says of the drift rows: within budget and powered, or UNDERPOWERED."""
    gated = [r for d in drift for r in d.rows if r.gated]
    if not gated:
        return ""
    weak = [r for r in gated if r.status == "underpowered"]
    shown = "; ".join(
        f"{r.suite} {'KL' if r.measure == 'kld' else 'perplexity'} {_fmt(r, r.estimate)} "
        f"(upper {_fmt(r, r.upper)} < budget {_fmt(r, r.budget)})"
        for r in gated
        if r not in weak
    )
    note = f"; drift within budget, powered: {shown}" if shown else ""
    if weak:
        note += "; UNDERPOWERED drift: " + "; ".join(r.reason for r in weak)
    return note
