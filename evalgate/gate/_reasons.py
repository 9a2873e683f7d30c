"""The words of a verdict: each row's status and reason, and the verdict's one-line reason."""

from __future__ import annotations

from collections.abc import Sequence

from evalgate.gate._agreement import AgreementRow, sampled_excess_phrase
from evalgate.gate._drift import SuiteDrift
from evalgate.gate._drift_text import drift_block_reasons, drift_pass_note
from evalgate.gate._lengths import SuiteLengths, trend_block_reason, trend_pass_note
from evalgate.gate._model import Row, Verdict
from evalgate.gate._policy import GatePolicy
from evalgate.gate._rows import NOT_ESTIMABLE
from evalgate.gate._tested import Status

__all__ = ["row_status", "verdict_from"]


def _where(row: Row) -> str:
    where = f"delta {row.delta * 100:+.1f} pt, CI [{row.ci_low * 100:+.1f}, {row.ci_high * 100:+.1f}], p = {row.p_value:.3g}"
    if row.test == "sign-flip":
        where += " (graded metric: mean difference, sign-flip test, bootstrap CI)"
    if row.sequential:
        sq = row.sequential
        why = f"{sq['decision']} on {sq['blocked_by']}" if sq.get("blocked_by") else sq["decision"]
        where += (
            f"; sequential: stopped after {sq['used']}/{sq['planned']} items ({why}), "
            f"max E = {sq['evalue_max']:.3g}, always-valid p"
        )
    return where


def _level(row: Row, policy: GatePolicy) -> str:
    """Where the MDE's alpha comes from, in words."""
    level = row.mde_alpha if row.mde_alpha is not None else policy.alpha
    tests = round(policy.alpha / level) if level else 1
    if tests <= 1:
        return f"alpha {level:.3g}"
    return (
        f"alpha {policy.alpha}/{tests} = {level:.2g}, the level Holm's first step demands over {tests} tests"
    )


def row_status(row: Row, policy: GatePolicy) -> tuple[Status, str]:
    """(status, reason) of a row once its significance is known."""
    where = _where(row)
    if row.status in ("error", "missing"):
        return row.status, row.reason or "no paired items"
    if not row.primary:
        return "info", f"reported, not gated ({where})"
    if policy.policy == "non-inferiority":
        return _ni_status(row, policy, where)
    if row.significant:
        return "block", f"significant after Holm ({where}, adjusted {row.p_adjusted:.3g})"
    if NOT_ESTIMABLE in row.reason:  # gate/_rows.py: too few items differ to size an unseen change
        return (
            "underpowered",
            f"no difference detected ({where}), but at n = {row.n} the MDE is not estimable",
        )
    if row.mde > policy.power_floor:
        return "underpowered", (
            f"no difference detected ({where}), but n = {row.n} can only detect {row.mde * 100:.1f} pt "
            f"with 80 % power at {_level(row, policy)} (needs <= {policy.power_floor * 100:.1f} pt)"
        )
    return "pass", f"no significant difference ({where}, adjusted {row.p_adjusted:.3g})"


def _ni_status(row: Row, policy: GatePolicy, where: str) -> tuple[Status, str]:
    margin = policy.margin_for(row.baseline) or 0.0
    bound = (
        f"the lower confidence bound {row.ci_low * 100:+.1f} pt ({policy.confidence:.0%} interval, one-sided "
        f"alpha {policy.alpha}) is {{side}} -{margin * 100:.1f} pt (margin {policy.margin}; every suite must pass "
        f"on its own: an intersection-union test, no multiplicity correction)"
    )
    if not row.significant:
        return "pass", f"non-inferior: {bound.format(side='above')} ({where})"
    text = f"not shown non-inferior: {bound.format(side='not above')} ({where})"
    if row.mde > margin:
        text += (
            f"; with 80 % power n = {row.n} shows non-inferiority only for margins above {row.mde * 100:.1f} pt "
            f"at this flip rate (evalgate plan-power gives the items needed)"
        )
    return "block", text


def verdict_from(
    rows: list[Row],
    agreement: list[AgreementRow],
    policy: GatePolicy,
    *,
    tests: int,
    lengths: Sequence[SuiteLengths] = (),
    drift: Sequence[SuiteDrift] = (),
) -> Verdict:
    """PASS or BLOCK with the one line that says why; ``tests``: the Holm family's size;
    ``lengths``: long-context suites, whose longest-length row can block on its own."""
    family = [r for r in rows if r.primary and r.status not in ("error", "missing")]

    def out(verdict: str, reason: str) -> Verdict:
        return Verdict(verdict, policy.alpha, policy.policy, reason, rows, margin=policy.margin)

    reasons = _block_reasons(rows, agreement, policy, lengths=lengths, drift=drift)
    if reasons:
        if len(reasons) == 1:
            return out("BLOCK", reasons[0])
        listed = "; ".join(f"({i}) {r}" for i, r in enumerate(reasons, 1))
        return out("BLOCK", f"{len(reasons)} rows block: {listed}")
    n_items = sum(r.n for r in family)
    if not family and drift:  # only drift suites: their rows are the whole decision
        return out("PASS", drift_pass_note(drift).removeprefix("; "))
    if policy.policy == "non-inferiority":
        reason = (
            f"non-inferior within margin {policy.margin} on every one of {len(family)} suite(s), {n_items} paired "
            f"item(s) (each lower {policy.confidence:.0%} bound above -margin: an intersection-union test at "
            f"alpha {policy.alpha})"
        )
    else:
        what = "no significant regression" if policy.policy == "regression" else "no significant difference"
        reason = (
            f"{what} on {len(family)} suite(s), {n_items} paired item(s), at alpha {policy.alpha} after Holm "
            f"over {tests} test(s)"
        )
    reason += trend_pass_note(lengths) + drift_pass_note(drift)
    gated = [a for a in agreement if a.status != "info"]  # a graded metric's changed share is not gated
    plain = [a for a in gated if a.sampled is None]
    if plain:
        reason += f"; flips within budget (max {max(a.flip_rate for a in plain):.1%})"
    sampled = [a.sampled for a in gated if a.sampled is not None]
    if sampled:  # --repeats: cross-arm disagreement against each arm's own (repeats.py)
        reason += (
            f"; the arms disagree no more than each with itself, repeat to repeat, plus the margin (max excess "
            f"{max(s.excess for s in sampled) * 100:+.1f} pt, margin {sampled[0].margin * 100:.1f} pt)"
        )
    unsized = [r for r in family if r.status == "underpowered" and NOT_ESTIMABLE in r.reason]
    if unsized:
        reason += (
            f"; UNDERPOWERED: {', '.join(r.suite for r in unsized)}: too few items differ between the arms to "
            "estimate the change this run could detect (MDE not estimable), so this PASS only means no "
            f"difference was detected at n = {min(r.n for r in unsized)}"
        )
    weak = [r for r in family if r.status == "underpowered" and r not in unsized]
    if weak and len({r.n for r in weak}) > 1:  # suites of different sizes: each its own MDE
        level = min(r.mde_alpha or policy.alpha for r in weak)
        each = ", ".join(f"{r.suite} {r.mde * 100:.1f} pt at n = {r.n}" for r in weak)
        reason += (
            f"; UNDERPOWERED: the smallest changes each suite could detect are {each} (80 % power at alpha "
            f"{level:.2g}, the level Holm's first step demands), so this PASS only means no difference of that "
            "size was detected"
        )
    elif weak:
        level = min(r.mde_alpha or policy.alpha for r in weak)
        reason += (
            f"; UNDERPOWERED: {', '.join(r.suite for r in weak)} could only detect changes of "
            f"{max(r.mde for r in weak) * 100:.1f} pt or more (80 % power at alpha {level:.2g}, the level Holm's "
            f"first step demands), so this PASS only means no difference was detected at n = {min(r.n for r in weak)}"
        )
    return out("PASS", reason)


def _block_reasons(
    rows: Sequence[Row],
    agreement: Sequence[AgreementRow],
    policy: GatePolicy,
    *,
    lengths: Sequence[SuiteLengths],
    drift: Sequence[SuiteDrift],
) -> list[str]:
    """One short reason per blocking row, every one of them (the worst of each kind first):
    accuracy, drift, the longest context length, flips, then unanswered items."""
    family = [r for r in rows if r.primary and r.status not in ("error", "missing")]
    blocking = [r for r in family if r.significant]
    out: list[str] = []
    if policy.policy == "non-inferiority":
        for r in sorted(blocking, key=lambda r: r.ci_low + (policy.margin_for(r.baseline) or 0.0)):
            out.append(
                f"{r.suite} {r.metric}: not shown non-inferior: the lower confidence bound "
                f"{r.ci_low * 100:+.1f} pt ({policy.confidence:.0%} interval) is not above "
                f"-{(policy.margin_for(r.baseline) or 0) * 100:.1f} pt (margin {policy.margin})"
            )
    else:
        for r in sorted(blocking, key=lambda r: (r.p_adjusted or 1.0, r.delta)):
            out.append(
                f"{r.suite} {r.metric} changed by {r.delta * 100:+.1f} pt "
                f"({r.baseline:.3f} -> {r.candidate:.3f}, Holm p = {r.p_adjusted:.3g} < {policy.alpha})"
            )
    out += drift_block_reasons(drift)
    longest = [s for s in lengths if s.trend is not None and s.trend.significant]
    for section in sorted(longest, key=lambda s: (s.trend.p_adjusted or 1.0) if s.trend else 1.0):
        out.append(trend_block_reason(section, alpha=policy.alpha))
    flips = sorted((a for a in agreement if a.significant), key=lambda x: -x.flip_rate)
    for a in flips:
        out.append(_flip_reason(a, next(r for r in family if r.suite == a.suite)))
    if any(a.sampled is None and a.aa_excess is None for a in flips):
        out[-1] += f"; {policy.noise_hint}"
    silent = [(a, a.unanswered) for a in agreement if a.unanswered is not None and a.unanswered.significant]
    for a, u in sorted(silent, key=lambda x: x[1].p_adjusted or 1.0):
        out.append(
            f"{a.suite}: the candidate left {u.n10} item(s) unanswered (failed, empty or cut at the token cap) "
            f"where the baseline answered, against {u.n01} the other way ({u.candidate_rate:.1%} vs "
            f"{u.baseline_rate:.1%} unanswered, one-sided "
            f"{'sign-flip on per-item shares' if u.test == 'sign-flip' else 'McNemar'}, Holm p = {u.p_adjusted:.2g})"
        )
    return out


def _flip_reason(a: AgreementRow, acc: Row) -> str:
    """A flip row's reason; "accuracy change not significant ... but" only where it is not."""
    lead = (
        f"{a.suite}: " if acc.significant
        else f"{a.suite}: accuracy change not significant (delta {acc.delta * 100:+.1f} pt, p = {acc.p_value:.2g}) but "
    )  # fmt: skip
    what = "of items regressed" if a.counts == "regressions" else "of answers flipped"
    if a.sampled is not None and a.counts == "regressions":  # --repeats: the split regression excess
        return f"{lead}{sampled_excess_phrase(a)} > {a.sampled.margin * 100:.1f} pt, p = {a.p_adjusted:.2g}"
    if a.sampled is not None:  # --repeats: the arms' disagreement beyond their own (repeats.py)
        sa = a.sampled
        return (
            f"{lead}the arms disagree on {sa.cross:.1%} of repeat pairs against {sa.baseline_within:.1%} and "
            f"{sa.candidate_within:.1%} within each arm, repeat to repeat (excess {sa.excess * 100:+.1f} pt > "
            f"{sa.margin * 100:.1f} pt, p = {a.p_adjusted:.2g})"
        )
    if a.aa_excess is not None:
        against = f"A/A {a.aa_flip_rate:.1%} on the same items, excess {a.aa_excess * 100:+.1f} pt > {a.budget_source}"
    else:
        against = f"A/A {a.aa_flip_rate:.1%}" if a.aa_flip_rate is not None else f"budget {a.budget:.1%}"
    return f"{lead}{a.flip_rate:.1%} {what} ({against}, p = {a.p_adjusted:.2g})"
