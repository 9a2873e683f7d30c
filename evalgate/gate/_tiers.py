"""Decisions a release manager can act on (#44): which suites gate, and how sure a PASS is.

- **Tiers.** A suite is blocking (the default) or advisory (``--advisory``, ``[gate] advisory``).
  Advisory suites are decided on their own, as a second family (Holm among themselves, their own
  MDE level), so they never change a blocking row's adjusted p; each of their rows is shown with
  its status prefixed ``advisory-`` (``advisory-block``: it would block) and never gates. A
  blocking suite that cannot be judged (no items, an unusable metric or reference) still ends the
  run as ERROR naming it; an advisory one is an error row and a note.
- **How sure.** With ``--require-power`` (``[gate] require_power``) a PASS with an UNDERPOWERED
  blocking row (accuracy, drift, or a drift read on the prefill path only) is INCONCLUSIVE, exit 4:
  no change was detected, but none that small could have been.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalgate.gate._model import Verdict
from evalgate.gate._tested import Tested

__all__ = ["ADVISORY", "advisory_label", "inconclusive", "merge_advisory", "underpowered_rows"]

ADVISORY = "advisory-"
"""The prefix of an advisory row's status: advisory-block, advisory-pass, advisory-underpowered."""


def advisory_label(row: Tested) -> None:
    """An advisory row as shown: what it would have decided, never gating (``significant`` off)."""
    if row.status in ("block", "pass", "underpowered"):
        would = "pass, underpowered" if row.status == "underpowered" else row.status
        row.reason = f"advisory, not gated: would {would}: {row.reason}"
        row.status = ADVISORY + row.status
    row.significant = False


def merge_advisory(main: Verdict, side: Verdict, order: Sequence[str]) -> Verdict:
    """The blocking suites' verdict ``main`` with the advisory suites' rows (``side``, decided as
    their own family) shown beside them in the run's suite order; the verdict is ``main``'s."""
    rank = {s: i for i, s in enumerate(order)}

    def key(x: Any) -> int:
        return rank.get(x.suite, len(rank))

    for row in side.suites:
        advisory_label(row)
    for a in side.agreement:
        advisory_label(a)
        if a.unanswered is not None:
            a.unanswered.significant = False
    for d in side.drift:
        for r in d.rows:
            if r.gated:
                advisory_label(r)
    for section in side.lengths:
        if section.trend is not None:
            advisory_label(section.trend)
    main.suites = sorted([*main.suites, *side.suites], key=key)
    main.agreement = sorted([*main.agreement, *side.agreement], key=key)
    main.drift = sorted([*main.drift, *side.drift], key=key)
    main.lengths = sorted([*main.lengths, *side.lengths], key=key)
    if side.aa is not None:
        main.aa = sorted([*(main.aa or []), *side.aa], key=key)
    names = ", ".join(dict.fromkeys(r.suite for r in side.suites)) or ", ".join(d.suite for d in side.drift)
    if side.verdict == "BLOCK":
        main.notes.append(f"advisory (not gated): {names} would BLOCK: {side.reason}")
        if main.verdict == "PASS":
            main.reason += f"; advisory, not gated: {names} would block"
    elif side.verdict == "ERROR":
        main.notes.append(f"advisory (not gated): {names} not judged: {side.reason}")
    else:
        main.notes.append(f"advisory (not gated): {names}: {side.reason}")
    main.notes += [f"advisory (not gated): {n}" for n in side.notes]
    return main


def underpowered_rows(verdict: Verdict) -> list[str]:
    """The blocking rows a PASS could not have seen a small change on, by name."""
    out = [f"{r.suite} {r.metric}" for r in verdict.suites if r.primary and r.status == "underpowered"]
    gated = [r for d in verdict.drift for r in d.rows if r.gated and not r.status.startswith(ADVISORY)]
    out += [_drift_name(r) for r in gated if r.status == "underpowered"]
    kl_paths = {r.path for r in gated if r.measure == "kld"}
    if "prefill" in kl_paths and "decode" not in kl_paths:
        out.append(f"{gated[0].suite} drift on the prefill path only")
    return out


def _drift_name(r: Any) -> str:
    measure = {"kld": "mean KL", "ppl_ratio": "perplexity ratio"}.get(r.measure, r.measure)
    path = f"{r.path}-path " if r.path and r.measure == "kld" else ""
    return f"{r.suite} {path}{measure}" + (f" at positions {r.span}" if r.span else "")


def inconclusive(verdict: Verdict) -> Verdict:
    """--require-power: a PASS with an UNDERPOWERED blocking row becomes INCONCLUSIVE (exit 4)."""
    weak = underpowered_rows(verdict)
    if verdict.verdict != "PASS" or not weak:
        return verdict
    verdict.verdict = "INCONCLUSIVE"
    verdict.reason = (
        f"{len(weak)} blocking row(s) UNDERPOWERED ({'; '.join(weak)}) and --require-power asks for a "
        f"powered PASS: no change was detected, but a small one could not have been; run more items "
        f"(evalgate plan-power says how many). The PASS it would have been: {verdict.reason}"
    )
    return verdict
