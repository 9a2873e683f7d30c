"""Policy to verdict: checked metrics -> paired rows -> the Holm family -> PASS / BLOCK / ERROR.

What is tested at which level:

- difference / regression: each suite's primary row (McNemar mid-p, or the sign-flip test for a
  graded metric), each agreement row and each unanswered test form one Holm family at ``alpha``.
  A row's MDE is computed at alpha over the family's size, the level Holm's first step demands,
  so an UNDERPOWERED flag reflects the power the gate really has.
- non-inferiority: PASS needs every suite non-inferior, an intersection-union test, so each
  primary row is tested on its own at one-sided alpha (its 1 - 2 alpha interval's lower bound
  against -margin) with no multiplicity correction; only the agreement tests and the
  longest-length rows (a loss beyond the margin, gate/_lengths.py), which can block on their
  own, share a Holm family. A graded row's bound keeps its level for sparse changes and counts
  changes as whole flips when too few items differ (stats/_graded.py).

Only each suite's primary metric can block; the other metrics are reported with their own
(unadjusted) p-values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalgate.gate._agreement import DEFAULT_FLIP_BUDGET, AgreementRow, agreement_reason, agreement_row
from evalgate.gate._drift import check_drift, drift_for
from evalgate.gate._drift_text import drift_status
from evalgate.gate._lengths import lengths_for, sent_mismatch, trend_status
from evalgate.gate._model import Row, Verdict
from evalgate.gate._policy import GatePolicy
from evalgate.gate._reasons import row_status, verdict_from
from evalgate.gate._repeats import sampled_agreement_row
from evalgate.gate._rows import check_suite, error_row, metric_row
from evalgate.gate._tested import HolmTest, holm
from evalgate.gate._tiers import inconclusive, merge_advisory
from evalgate.store.records import Pair

__all__ = ["decide"]

PerSuite = Mapping[str, tuple[Sequence[str], Sequence[Pair]]]


@dataclass(frozen=True)
class _Family:
    """What one Holm family is decided on (the arguments of ``decide``, described in ``_decide_family``)."""

    per_suite: PerSuite
    aa_pairs: Mapping[str, Sequence[Pair]] | None = None
    sequential: Mapping[str, Any] | None = None
    kinds: Mapping[str, str] | None = None
    sampled: Mapping[str, Sequence[Pair]] | None = None

    def only(self, names: Sequence[str]) -> _Family:
        """The same inputs restricted to the suites in ``names``."""

        def pick(m: Mapping[str, Any] | None) -> Any:
            return None if m is None else {s: v for s, v in m.items() if s in names}

        return _Family(pick(self.per_suite), pick(self.aa_pairs), pick(self.sequential), pick(self.kinds),
                       pick(self.sampled))  # fmt: skip


def decide(
    per_suite: PerSuite,
    *,
    policy: GatePolicy,
    aa_pairs: Mapping[str, Sequence[Pair]] | None = None,
    sequential: Mapping[str, Any] | None = None,
    kinds: Mapping[str, str] | None = None,
    sampled: Mapping[str, Sequence[Pair]] | None = None,
) -> Verdict:
    """The blocking suites' verdict, the advisory suites (``policy.advisory``) decided as a family
    of their own and shown beside it, never gating; under ``policy.require_power`` a PASS with an
    UNDERPOWERED blocking row is INCONCLUSIVE (gate/_tiers.py). The arguments: ``_decide_family``."""
    every = _Family(per_suite, aa_pairs, sequential, kinds, sampled)
    advisory = [s for s in per_suite if s in policy.advisory]
    if not advisory:
        verdict = _decide_family(every, policy=policy)
        return inconclusive(verdict) if policy.require_power else verdict
    blocking = [s for s in per_suite if s not in advisory]
    if blocking:
        main = _decide_family(every.only(blocking), policy=policy)
    else:
        main = Verdict(
            "ERROR", policy.alpha, policy.policy, "every suite is advisory: no blocking suite gates"
        )
    verdict = merge_advisory(main, _decide_family(every.only(advisory), policy=policy), order=list(per_suite))
    return inconclusive(verdict) if policy.require_power else verdict


def _decide_family(family: _Family, *, policy: GatePolicy) -> Verdict:
    """One Holm family's verdict. ``per_suite``: suite -> (metrics with the primary first, its pairs); ``aa_pairs``: suite ->
    baseline-vs-baseline pairs from ``--aa``; ``sequential``: suite -> SequentialOutcome, whose
    always-valid p-value replaces McNemar's for the primary row (McNemar's p is not valid after
    looking at the data every chunk); ``kinds``: suite -> its declared metric kind (binary by
    default); ``sampled``: suite -> its per-repeat pairs under --repeats k > 1, whose agreement
    row tests the excess over the arms' own repeat-to-repeat disagreement. ERROR (exit 3) when
    there is nothing to judge: no suites, a suite without paired
    items, a primary metric missing or non-finite on any item, an arm that failed every item."""
    per_suite, aa_pairs, sequential = family.per_suite, family.aa_pairs, family.sequential
    kinds, sampled = family.kinds, family.sampled
    if not per_suite:
        return Verdict("ERROR", policy.alpha, policy.policy, "no suites to compare: the family is empty")
    kind = {s: (kinds or {}).get(s, "binary") for s in per_suite}
    problems = _problems(per_suite, aa_pairs, kind)
    drift = [
        drift_for(s, per_suite[s][1], budget=policy.drift_budget, alpha=policy.alpha,
                  aa_pairs=None if aa_pairs is None else aa_pairs.get(s, ()),
                  two_sided=policy.policy == "difference")
        for s in per_suite if kind[s] == "drift" and s not in problems
    ]  # fmt: skip
    drift_rows = [r for d in drift for r in d.rows if r.gated]
    per_suite = {s: v for s, v in per_suite.items() if kind[s] != "drift" or s in problems}
    good = [s for s in per_suite if s not in problems]
    aa = _aa_rows(per_suite, good, aa_pairs, kind, policy) if aa_pairs is not None else None
    agreement = _agreement(per_suite, good, aa_pairs, policy, sampled or {}) if policy.agreement_gate else []
    for a in agreement:
        if sequential and a.suite in sequential:  # the fixed-n binomial is not valid there
            a.p_value = float(sequential[a.suite].flip_pvalue)
    ni = policy.policy == "non-inferiority"
    # a graded metric has no flip: any change of its value would count, noise included, so its
    # changed share is shown, not gated (its mean difference is the sign-flip row's job)
    flip_tests = [a for a in agreement if kind[a.suite] == "binary" or a.sampled is not None]
    unanswered = [a.unanswered for a in agreement if a.unanswered is not None]
    lengths = lengths_for(  # long context: gate/_lengths.py; under NI its longest-length row tests the margin
        per_suite, good, kind, sequential=sequential, margin_for=policy.margin_for if ni else None
    )
    trends = [s.trend for s in lengths if s.trend is not None and s.trend.gated]
    tests = (0 if ni else len(good) + len(drift_rows)) + len(flip_tests) + len(unanswered) + len(trends)
    rows = _rows(per_suite, problems, kind, policy, level=policy.alpha / max(1, tests))
    for row in rows:
        if row.primary and sequential and row.suite in sequential and row.status != "error":
            row.p_value = float(sequential[row.suite].pvalue)
            row.sequential = sequential[row.suite].to_dict()
    gated = [r for r in rows if r.primary and r.status not in ("error", "missing")]
    family: list[HolmTest] = [*([] if ni else [*gated, *drift_rows]), *flip_tests, *unanswered, *trends]
    holm(family, policy.alpha)
    if ni:
        for r in gated:  # each on its own at one-sided alpha: the bound of its 1 - 2 alpha interval
            r.significant = not r.ci_low > -(policy.margin_for(r.baseline) or 0.0)
    _statuses(rows, policy)
    for a in agreement:
        blocked = a.significant or (a.unanswered is not None and a.unanswered.significant)
        gated_row = kind[a.suite] == "binary" or a.sampled is not None
        a.status = "block" if blocked else ("pass" if gated_row else "info")
        a.reason = agreement_reason(a, hint=policy.noise_hint)
        if not gated_row:
            a.test, a.reason = (
                "none (graded metric)",
                f"shown, not gated (a graded metric has no flip): {a.reason}",
            )
    for section in lengths:
        if section.trend is not None:
            trend_status(section.trend, alpha=policy.alpha)
    for r in drift_rows:
        drift_status(r, non_inferiority=ni, alpha=policy.alpha)
    verdict = verdict_from(rows, agreement, policy, tests=tests, lengths=lengths, drift=drift)
    verdict.agreement, verdict.aa, verdict.lengths, verdict.drift = agreement, aa, lengths, drift
    if problems:
        verdict.verdict, verdict.reason = "ERROR", "; ".join(problems.values())
    if aa and any(r.significant for r in aa):
        verdict.reliable = False
        verdict.notes.append("UNRELIABLE: the A/A pair (the baseline against itself) differs significantly")
    return verdict


def _problems(
    per_suite: PerSuite, aa_pairs: Mapping[str, Sequence[Pair]] | None, kind: Mapping[str, str]
) -> dict[str, str]:
    out = {}

    def check(suite: str, metric: str, these: Sequence[Pair], **kw: Any) -> str | None:
        if kind[suite] == "drift":  # budget rows, not a metric's test (gate/_drift.py)
            return check_drift(suite, these) or sent_mismatch(suite, these)
        return check_suite(suite, metric, these, kind[suite], **kw) or sent_mismatch(suite, these)

    for suite, (metrics, pairs) in per_suite.items():
        why = check(suite, metrics[0], pairs)
        if why is None and aa_pairs is not None:
            aa = check(suite, metrics[0], aa_pairs.get(suite, ()), references=("baseline", "candidate"))
            why = None if aa is None else f"the A/A pair: {aa}"
        if why is not None:
            out[suite] = why
    return out


def _rows(
    per_suite: PerSuite,
    problems: Mapping[str, str],
    kind: Mapping[str, str],
    policy: GatePolicy,
    *,
    level: float,
) -> list[Row]:
    """Every metric's row; a gated row's MDE at ``level``, the others' at alpha."""
    rows = []
    for suite, (metrics, pairs) in per_suite.items():
        for i, metric in enumerate(metrics):
            if suite in problems:
                why = problems[suite]
                if i > 0:  # in full: the secondary rows say why as well (never a cut sentence)
                    why = f"not judged: the suite's primary metric cannot be judged: {why}"
                rows.append(error_row(suite, metric, len(pairs), primary=i == 0, reason=why))
                continue
            gated = i == 0 and policy.policy != "non-inferiority"
            rows.append(
                metric_row(suite, metric, pairs, primary=i == 0, policy=policy, kind=kind[suite],
                           level=level if gated else policy.alpha)
            )  # fmt: skip
    return rows


def _statuses(rows: Sequence[Row], policy: GatePolicy) -> None:
    for row in rows:
        note = row.reason if row.status not in ("error", "missing") else ""
        row.status, row.reason = row_status(row, policy)
        if note:
            row.reason += f"; {note}"


def _agreement(
    per_suite: PerSuite,
    good: Sequence[str],
    aa_pairs: Mapping[str, Sequence[Pair]] | None,
    policy: GatePolicy,
    sampled: Mapping[str, Sequence[Pair]],
) -> list[AgreementRow]:
    counts = "regressions" if policy.policy == "regression" else "flips"
    out = []
    for suite in good:
        metrics, pairs = per_suite[suite]
        kw: dict[str, Any] = {"counts": counts, "errors_as_wrong": policy.errors_as_wrong}
        if suite in sampled:  # repeats: the excess over the arms' own disagreement (repeats.py)
            margin, source = policy.flip_budget, "--flip-budget as the margin"
            if margin is None:
                margin, source = policy.aa_margin, f"margin {policy.aa_margin * 100:.0f} pt"
            out.append(
                sampled_agreement_row(
                    suite, metrics[0], sampled[suite], margin=margin, budget_source=source, **kw
                )
            )
            continue
        if policy.flip_budget is not None:
            kw |= {"budget": policy.flip_budget, "budget_source": "--flip-budget"}
        elif aa_pairs is not None and suite in aa_pairs:
            kw |= {"budget": DEFAULT_FLIP_BUDGET, "budget_source": f"A/A + {policy.aa_margin * 100:.0f} pt",
                   "aa_pairs": aa_pairs[suite], "aa_margin": policy.aa_margin}  # fmt: skip
        else:
            kw |= {"budget": DEFAULT_FLIP_BUDGET, "budget_source": "default"}
        out.append(agreement_row(suite, metrics[0], pairs, **kw))
    return out


def _aa_rows(
    per_suite: PerSuite,
    good: Sequence[str],
    aa_pairs: Mapping[str, Sequence[Pair]],
    kind: Mapping[str, str],
    policy: GatePolicy,
) -> list[Row]:
    """Baseline against a second baseline launch, judged by the run's own alpha and policy (Holm
    among themselves): the noise floor. A suite whose A/A pair is unusable gets no row here."""
    plain = replace(policy, agreement_gate=False)
    ni = policy.policy == "non-inferiority"
    level = policy.alpha / max(1, len(good)) if not ni else policy.alpha
    out = [
        metric_row(
            s, per_suite[s][0][0], aa_pairs.get(s, ()), primary=True, policy=plain, kind=kind[s], level=level
        )
        for s in good
    ]
    if ni:
        for r in out:
            r.significant = not r.ci_low > -(policy.margin_for(r.baseline) or 0.0)
    else:
        holm(out, policy.alpha)
    _statuses(out, plain)
    return out
