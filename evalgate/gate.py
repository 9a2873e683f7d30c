"""Policy to verdict: paired outcomes per (suite, metric) -> tests -> Holm -> PASS / BLOCK.

Only each suite's primary metric joins the Holm family and can block; the other metrics are
reported with their own (unadjusted) p-values so a reviewer sees them without multiplying
the family's false-block rate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from evalgate import stats
from evalgate.records import Pair

__all__ = ["GatePolicy", "Row", "Verdict", "decide", "paired_row"]

VERDICT_SCHEMA = 1


@dataclass(frozen=True)
class GatePolicy:
    alpha: float = 0.05
    policy: str = "difference"
    """'difference' (two-sided, the default), 'regression' (one-sided)."""
    allow_diff: tuple[str, ...] = ()


@dataclass
class Row:
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


@dataclass
class Verdict:
    verdict: str
    alpha: float
    policy: str
    reason: str
    suites: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"PASS": 0, "BLOCK": 1}.get(self.verdict, 3)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": VERDICT_SCHEMA, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"


def _binary(value: float) -> int:
    return 1 if value >= 0.5 else 0


def paired_row(suite: str, metric: str, pairs: Sequence[Pair], *, primary: bool, policy: GatePolicy) -> Row:
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
    alternative = "less" if policy.policy == "regression" else "two-sided"
    test = stats.mcnemar(n10, n01, alternative=alternative, mid_p=True)
    ci = stats.paired_diff_ci(n11, n10, n01, n00, confidence=1 - policy.alpha) if n else None
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


def decide(per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]], *, policy: GatePolicy) -> Verdict:
    """``per_suite``: suite -> (metrics with the primary first, its pairs)."""
    rows = [
        paired_row(suite, metric, pairs, primary=(i == 0), policy=policy)
        for suite, (metrics, pairs) in per_suite.items()
        for i, metric in enumerate(metrics)
    ]
    family = [r for r in rows if r.primary]
    adjusted = stats.holm([r.p_value for r in family]) if family else []
    for row, p_adj in zip(family, adjusted, strict=True):
        row.p_adjusted = float(p_adj)
        row.significant = bool(p_adj < policy.alpha)
    for row in rows:
        row.status, row.reason = _row_status(row, policy)
    blocking = [r for r in family if r.significant]
    if blocking:
        worst = min(blocking, key=lambda r: r.p_adjusted or 1.0)
        reason = (
            f"{worst.suite} {worst.metric} changed by {worst.delta * 100:+.1f} pt "
            f"({worst.baseline:.3f} -> {worst.candidate:.3f}, Holm p = {worst.p_adjusted:.3g} < {policy.alpha})"
        )
        return Verdict("BLOCK", policy.alpha, policy.policy, reason, rows)
    n_items = sum(r.n for r in family)
    reason = (
        f"no significant difference on {len(family)} suite(s), {n_items} paired item(s), "
        f"at alpha {policy.alpha} after Holm"
    )
    return Verdict("PASS", policy.alpha, policy.policy, reason, rows)


def _row_status(row: Row, policy: GatePolicy) -> tuple[str, str]:
    where = f"delta {row.delta * 100:+.1f} pt, p = {row.p_value:.3g}"
    if not row.primary:
        return "info", f"reported, not gated ({where})"
    if row.significant:
        return "block", f"significant after Holm ({where}, adjusted {row.p_adjusted:.3g})"
    return "pass", f"no significant difference ({where}, adjusted {row.p_adjusted:.3g})"
