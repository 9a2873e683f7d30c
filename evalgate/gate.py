"""Policy to verdict: paired outcomes per (suite, metric) -> tests -> Holm -> PASS / BLOCK.

Only each suite's primary metric joins the Holm family and can block; the other metrics are
reported with their own (unadjusted) p-values so a reviewer sees them without multiplying
the family's false-block rate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.agreement import (
    DEFAULT_AA_MARGIN,
    DEFAULT_FLIP_BUDGET,
    AgreementRow,
    UnansweredTest,
    agreement_reason,
    agreement_row,
)
from evalgate.errors import ConfigError
from evalgate.records import Pair
from evalgate.request import Policy
from evalgate.stats.sequential import SequentialRule, rule_for

if TYPE_CHECKING:
    from evalgate.manifest import Manifest
    from evalgate.request import CompareRequest

__all__ = ["GatePolicy", "Row", "Verdict", "decide", "paired_row", "sequential_rule"]

VERDICT_SCHEMA = 1


@dataclass(frozen=True)
class GatePolicy:
    alpha: float = 0.05
    policy: str = "difference"
    """'difference' (two-sided, the default), 'regression' (one-sided), 'non-inferiority'."""
    margin: str | None = None
    """Non-inferiority margin: '0.02' or '2pt' (absolute), '1%rel' (relative to the baseline)."""
    allow_diff: tuple[str, ...] = ()
    power_floor: float = 0.02
    """A passing row whose MDE exceeds this (or the margin) is UNDERPOWERED."""
    agreement_gate: bool = True
    """Also test each suite's flip rate against a budget (see evalgate.agreement)."""
    flip_budget: float | None = None
    """Tolerated flip rate; None: the A/A rate plus ``aa_margin`` with --aa, else the default."""
    aa_margin: float = DEFAULT_AA_MARGIN
    errors_as_wrong: bool = False
    """Failed items count as wrong, and as unanswered: every suite's agreement row tests them."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r}", fix=f"use one of {', '.join(POLICIES)}")
        if self.policy == "non-inferiority" and self.margin is None:
            raise ConfigError(
                "the non-inferiority policy needs --margin", fix="e.g. --margin 2pt or --margin 1%rel"
            )
        if self.margin is not None:
            parse_margin(self.margin)

    @classmethod
    def from_request(cls, req: CompareRequest) -> GatePolicy:
        """The one place a run's policy is read: its request (a live run's, or its manifest's)."""
        return cls(
            alpha=float(req.alpha),
            policy=req.policy,
            margin=req.margin,
            allow_diff=tuple(req.allow_diff),
            agreement_gate=req.agreement_gate,
            flip_budget=req.flip_budget,
            errors_as_wrong=req.errors_as_wrong,
        )

    def margin_for(self, baseline: float) -> float | None:
        """The margin in accuracy units for a row whose baseline accuracy is ``baseline``."""
        if self.margin is None:
            return None
        value, relative = parse_margin(self.margin)
        return value * baseline if relative else value


def sequential_rule(manifest: Manifest) -> SequentialRule:
    """--sequential's rule for a run, from its request and chunk: the live loop and a re-render
    from the files build it here, so both apply the very same rule."""
    if manifest.sequential is None:
        raise ValueError(f"run {manifest.run_id} is not a --sequential run")
    policy = GatePolicy.from_request(manifest.request)
    return rule_for(
        chunk=manifest.sequential.chunk,
        alpha=policy.alpha,
        n_suites=len(manifest.suites),
        policy=policy.policy,
        agreement_gate=policy.agreement_gate,
        flip_budget=policy.flip_budget,
    )


POLICIES: tuple[str, ...] = get_args(Policy)


def parse_margin(text: str) -> tuple[float, bool]:
    """'0.02' / '2pt' -> (0.02, False); '1%rel' -> (0.01, True)."""
    t = str(text).strip().lower()
    try:
        if t.endswith("%rel"):
            value, relative = float(t[:-4]) / 100, True
        elif t.endswith("pt"):
            value, relative = float(t[:-2]) / 100, False
        else:
            value, relative = float(t), False
    except ValueError:
        value, relative = -1.0, False
    if not 0 < value < 1:
        raise ConfigError(
            f"margin {text!r} is not a number in (0, 1), 'Npt' or 'N%rel'", fix="e.g. 2pt or 1%rel"
        )
    return value, relative


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class Row:
    """One (suite, metric) of the verdict: the paired counts, the test and the decision."""

    suite: str
    metric: str
    primary: bool
    n: int
    baseline: float
    candidate: float
    delta: float
    n11: int
    n10: int
    n01: int
    n00: int
    flips: float
    p_value: float
    ci_low: float
    ci_high: float
    mde: float
    p_adjusted: float | None = None
    significant: bool = False
    status: str = "pass"
    reason: str = ""
    sequential: dict[str, Any] | None = None
    """--sequential: where the suite stopped; ``p_value`` is then the always-valid 1 / max E."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class Verdict:
    """verdict.json (schema 1; docs/schemas/verdict.schema.json is generated from this class)."""

    verdict: str
    alpha: float
    policy: str
    reason: str
    suites: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    margin: str | None = None
    agreement: list[AgreementRow] = field(default_factory=list)
    aa: list[Row] | None = None
    reliable: bool = True
    """False when the A/A pair (baseline against itself) would itself block."""
    schema: Literal[1] = VERDICT_SCHEMA

    @property
    def exit_code(self) -> int:
        return {"PASS": 0, "BLOCK": 1}.get(self.verdict, 3)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for a in data["agreement"]:  # a row without the unanswered test is written as before it existed
            if a.get("unanswered") is None:
                a.pop("unanswered", None)
        return {"schema": data.pop("schema"), **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"


def _binary(value: float) -> int:
    return 1 if value >= 0.5 else 0


def paired_row(
    suite: str, metric: str, pairs: Sequence[Pair], *, primary: bool, policy: GatePolicy, family_size: int = 1
) -> Row:
    """Counts, accuracy, McNemar mid-p, the CI of the difference and the MDE for one metric."""
    n11 = n10 = n01 = n00 = 0
    for p in pairs:
        b = _binary(p.baseline.metrics.get(metric, 0.0))
        c = _binary(p.candidate.metrics.get(metric, 0.0))
        n11 += b & c
        n10 += b & (1 - c)
        n01 += (1 - b) & c
        n00 += (1 - b) & (1 - c)
    n = n11 + n10 + n01 + n00
    alternative = "two-sided" if policy.policy == "difference" else "less"
    test = stats.mcnemar(n10, n01, alternative=alternative, mid_p=True)
    # one-sided policies read the lower bound of the (1 - 2 alpha) interval, i.e. a one-sided alpha bound
    confidence = (
        1 - policy.alpha if policy.policy == "difference" else 1 - 2 * policy.alpha / max(1, family_size)
    )
    ci = stats.paired_diff_ci(n11, n10, n01, n00, confidence=confidence) if n else None
    flips = (n10 + n01) / n if n else 0.0
    return Row(
        suite=suite,
        metric=metric,
        primary=primary,
        n=n,
        baseline=(n11 + n10) / n if n else 0.0,
        candidate=(n11 + n01) / n if n else 0.0,
        delta=(n01 - n10) / n if n else 0.0,
        n11=n11,
        n10=n10,
        n01=n01,
        n00=n00,
        flips=flips,
        p_value=float(test.pvalue),
        ci_low=float(ci.low) if ci else -1.0,
        ci_high=float(ci.high) if ci else 1.0,
        mde=min(1.0, float(stats.mde(n, flips, alpha=policy.alpha, alternative=alternative))) if n else 1.0,
    )


def decide(
    per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]],
    *,
    policy: GatePolicy,
    aa_pairs: Mapping[str, Sequence[Pair]] | None = None,
    sequential: Mapping[str, Any] | None = None,
) -> Verdict:
    """``per_suite``: suite -> (metrics with the primary first, its pairs); ``aa_pairs``: suite ->
    baseline-vs-baseline pairs from ``--aa``; ``sequential``: suite -> SequentialOutcome, whose
    always-valid p-value replaces McNemar's for the primary row (McNemar's p is not valid after
    looking at the data every chunk)."""
    k = len(per_suite)
    rows = [
        paired_row(suite, metric, pairs, primary=(i == 0), policy=policy, family_size=k)
        for suite, (metrics, pairs) in per_suite.items()
        for i, metric in enumerate(metrics)
    ]
    for row in rows:
        if row.primary and sequential and row.suite in sequential:
            row.p_value = float(sequential[row.suite].pvalue)
            row.sequential = sequential[row.suite].to_dict()
    aa = _aa_rows(per_suite, aa_pairs) if aa_pairs is not None else None
    aa_rate = {r.suite: r.flips for r in aa} if aa else {}
    agreement = []
    if policy.agreement_gate:
        for suite, (metrics, pairs) in per_suite.items():
            budget, source = policy.flip_budget, "--flip-budget"
            if budget is None and suite in aa_rate:
                budget, source = min(0.99, aa_rate[suite] + policy.aa_margin), f"A/A + {policy.aa_margin:.0%}"
            if budget is None:
                budget, source = DEFAULT_FLIP_BUDGET, "default"
            agreement.append(
                agreement_row(suite, metrics[0], pairs, budget=budget, budget_source=source,
                              aa_flip_rate=aa_rate.get(suite), errors_as_wrong=policy.errors_as_wrong)
            )  # fmt: skip
    for a in agreement:
        if sequential and a.suite in sequential and a.n > 0:  # the fixed-n binomial is not valid there
            a.p_value = float(sequential[a.suite].flip_pvalue)
    family: list[Row | AgreementRow | UnansweredTest] = [r for r in rows if r.primary and r.n > 0]
    family += [a for a in agreement if a.n > 0]
    family += [a.unanswered for a in agreement if a.n > 0 and a.unanswered is not None]
    adjusted = stats.holm([r.p_value for r in family]) if family else []
    for row, p_adj in zip(family, adjusted, strict=True):
        row.p_adjusted = float(p_adj)
        if isinstance(row, Row) and policy.policy == "non-inferiority":
            margin = policy.margin_for(row.baseline) or 0.0
            row.significant = not row.ci_low > -margin  # Bonferroni-level bound, see paired_row
        else:
            row.significant = bool(p_adj < policy.alpha)
    for row in rows:
        row.status, row.reason = _row_status(row, policy)
    for a in agreement:
        blocked = a.significant or (a.unanswered is not None and a.unanswered.significant)
        a.status = "block" if blocked else ("missing" if a.n == 0 else "pass")
        a.reason = agreement_reason(a)
    verdict = _verdict(rows, agreement, policy)
    verdict.agreement, verdict.aa = agreement, aa
    if aa and any(r.significant for r in aa):
        verdict.reliable = False
        verdict.notes.append("UNRELIABLE: the A/A pair (the baseline against itself) differs significantly")
    return verdict


def _aa_rows(
    per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]], aa_pairs: Mapping[str, Sequence[Pair]]
) -> list[Row]:
    """Baseline against a second baseline launch: the noise floor (Holm among themselves)."""
    plain = GatePolicy()
    out = [
        paired_row(s, per_suite[s][0][0], aa_pairs.get(s, ()), primary=True, policy=plain) for s in per_suite
    ]
    live = [r for r in out if r.n > 0]
    for row, p_adj in zip(live, stats.holm([r.p_value for r in live]) if live else [], strict=True):
        row.p_adjusted = float(p_adj)
        row.significant = bool(p_adj < plain.alpha)
        row.status, row.reason = _row_status(row, plain)
    return out


def _verdict(rows: list[Row], agreement: list[AgreementRow], policy: GatePolicy) -> Verdict:
    family = [r for r in rows if r.primary and r.n > 0]
    blocking = [r for r in family if r.significant]
    flips = [a for a in agreement if a.significant]
    silent = [(a, a.unanswered) for a in agreement if a.unanswered is not None and a.unanswered.significant]
    if blocking:
        worst = min(blocking, key=lambda r: (r.p_adjusted or 1.0, r.delta))
        if policy.policy == "non-inferiority":
            reason = (
                f"{worst.suite} {worst.metric}: the lower confidence bound {worst.ci_low * 100:+.1f} pt is not "
                f"above -{(policy.margin_for(worst.baseline) or 0) * 100:.1f} pt (margin {policy.margin})"
            )
        else:
            reason = (
                f"{worst.suite} {worst.metric} changed by {worst.delta * 100:+.1f} pt "
                f"({worst.baseline:.3f} -> {worst.candidate:.3f}, Holm p = {worst.p_adjusted:.3g} < {policy.alpha})"
            )
        return Verdict("BLOCK", policy.alpha, policy.policy, reason, rows, margin=policy.margin)
    if flips:
        a = max(flips, key=lambda x: x.flip_rate)
        acc = next(r for r in family if r.suite == a.suite)
        aa = f"A/A {a.aa_flip_rate:.1%}" if a.aa_flip_rate is not None else f"budget {a.budget:.1%}"
        reason = (
            f"{a.suite}: accuracy change not significant (delta {acc.delta * 100:+.1f} pt, p = {acc.p_value:.2g}) but "
            f"{a.flip_rate:.1%} of answers flipped ({aa}, p = {a.p_adjusted:.2g})"
        )
        return Verdict("BLOCK", policy.alpha, policy.policy, reason, rows, margin=policy.margin)
    if silent:
        a, u = min(silent, key=lambda x: x[1].p_adjusted or 1.0)
        reason = (
            f"{a.suite}: the candidate left {u.n10} item(s) unanswered (failed, empty or cut at the token cap) "
            f"where the baseline answered, against {u.n01} the other way ({u.candidate_rate:.1%} vs "
            f"{u.baseline_rate:.1%} unanswered, one-sided McNemar, Holm p = {u.p_adjusted:.2g})"
        )
        return Verdict("BLOCK", policy.alpha, policy.policy, reason, rows, margin=policy.margin)
    n_items = sum(r.n for r in family)
    what = "no significant regression" if policy.policy == "regression" else "no significant difference"
    if policy.policy == "non-inferiority":
        what = f"non-inferior within margin {policy.margin}"
    reason = f"{what} on {len(family)} suite(s), {n_items} paired item(s), at alpha {policy.alpha} after Holm"
    if agreement:
        reason += f"; flips within budget (max {max(a.flip_rate for a in agreement):.1%})"
    weak = [r for r in family if r.status == "underpowered"]
    if weak:
        reason += (
            f"; UNDERPOWERED: {', '.join(r.suite for r in weak)} could only detect changes of "
            f"{max(r.mde for r in weak) * 100:.1f} pt or more, so this PASS only means no difference "
            f"was detected at n = {min(r.n for r in weak)}"
        )
    return Verdict("PASS", policy.alpha, policy.policy, reason, rows, margin=policy.margin)


def _row_status(row: Row, policy: GatePolicy) -> tuple[str, str]:
    where = f"delta {row.delta * 100:+.1f} pt, CI [{row.ci_low * 100:+.1f}, {row.ci_high * 100:+.1f}], p = {row.p_value:.3g}"
    if row.sequential:
        sq = row.sequential
        why = f"{sq['decision']} on {sq['blocked_by']}" if sq.get("blocked_by") else sq["decision"]
        where += (
            f"; sequential: stopped after {sq['used']}/{sq['planned']} items ({why}), "
            f"max E = {sq['evalue_max']:.3g}, always-valid p"
        )
    if row.n == 0:
        return "missing", "no paired items"
    if not row.primary:
        return "info", f"reported, not gated ({where})"
    if row.significant:
        return "block", f"significant after Holm ({where}, adjusted {row.p_adjusted:.3g})"
    bar = policy.margin_for(row.baseline) if policy.margin is not None else policy.power_floor
    if bar is not None and row.mde > bar:
        return "underpowered", (
            f"no difference detected ({where}), but n = {row.n} can only detect {row.mde * 100:.1f} pt "
            f"(needs <= {bar * 100:.1f} pt)"
        )
    return "pass", f"no significant difference ({where}, adjusted {row.p_adjusted:.3g})"
