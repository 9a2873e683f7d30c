"""What the drift rows say: each gated row's status and reason once its significance is known,
the verdict's reason when one blocks, and what a PASS says of them (``gate/_drift.py`` builds them)."""

from __future__ import annotations

from collections.abc import Sequence

from evalgate.gate._decode_drift import MIN_DIFFERING, MIN_DOCS
from evalgate.gate._drift import DriftRow, SuiteDrift

__all__ = ["drift_block_reasons", "drift_pass_note", "drift_status"]


def drift_status(row: DriftRow, *, non_inferiority: bool, alpha: float) -> None:
    """A gated row's status and reason once its significance is known (Holm, or on its own under NI)."""
    if not row.gated:
        return
    what = _describe(row)
    within = row.upper is not None and row.budget is not None and row.upper < row.budget
    if row.budget_low is not None:  # --policy difference: the ratio's band has a lower edge too
        within = within and row.lower is not None and row.lower > row.budget_low
    few = _too_few(row) if within else ""
    if few:
        within = False  # a bound from too few documents does not hold its level: never powered
    if non_inferiority:
        row.significant = not within
    onset = f"; {_onset_text(row)}" if row.onset else ""
    below = row.budget_low is not None and row.estimate < (1.0 if row.measure == "ppl_ratio" else 0.0)
    if row.significant and below:
        row.status = "block"
        row.reason = (
            f"{what} below {_fmt(row, row.budget_low)}: {_BELOW.get(row.measure, _BELOW['ppl_ratio'])}"
        )
        row.reason += "" if non_inferiority else f", Holm p = {row.p_adjusted:.3g} < {alpha}"
    elif row.significant:
        row.status = "block"
        shown = "not shown within" if non_inferiority else "above"
        p = "" if non_inferiority else f", Holm p = {row.p_adjusted:.3g} < {alpha}"
        row.reason = f"{what} {shown} the budget {_fmt(row, row.budget)}{p}{onset}"
    elif within:
        row.status = "pass"
        row.reason = f"{what}: within the budget {_fmt(row, row.budget)}, powered (upper bound below it)"
        if row.budget_low is not None:
            row.reason += (
                f" and above {_fmt(row, row.budget_low)} (lower bound above it: both sides under difference)"
            )
    elif few:
        row.status = "underpowered"
        row.reason = f"{what}: not powered: {few}{onset}"
    elif row.upper is None and row.identical is not None:
        row.status = "underpowered"
        row.reason = (
            f"{_name(row)}: {identical_text(row)}; not shown within the budget {_fmt(row, row.budget)}"
        )
    else:
        row.status = "underpowered"
        row.reason = f"{what}: not shown above the budget {_fmt(row, row.budget)}, nor within it: {_why_open(row)}{onset}"


_BELOW = {
    "ppl_ratio": "lower than the baseline's by more than the budget, a change, not a regression "
    "(--policy difference tests both sides)",
    "cross": "the candidate's text is MORE likely to the baseline than the baseline's own greedy text "
    "by more than the budget: a degenerate text (a loop, a repeated answer), not a better one",
    "length": "the candidate's generations are shorter than the baseline's by more than the margin",
}


def _too_few(row: DriftRow) -> str:
    """Why a row's bound cannot show it within budget, however tight it looks ("" if it can)."""
    if row.n < MIN_DOCS:
        return f"{row.n} documents, fewer than the {MIN_DOCS} a bound needs to hold its level"
    if row.differing is not None and 0 < row.differing < MIN_DIFFERING:
        return (
            f"{row.differing} of {row.n} documents differ, fewer than the {MIN_DIFFERING} a bound on "
            "their size needs to hold its level"
        )
    return ""


def _onset_text(row: DriftRow) -> str:
    if row.measure == "consistency":
        return f"the candidate's decode and prefill split from {row.onset}"
    return f"decode drift starts at positions {row.onset}"


def identical_text(row: DriftRow) -> str:
    """What a row of documents identical on both arms can say: how many could differ, not how much."""
    return (
        f"identical on all {row.n} documents, so no differing document sizes the drift "
        f"(at most {row.identical or 0:.1%} of documents could differ)"
    )


def _why_open(row: DriftRow) -> str:
    """Why a row's upper bound is not below its budget, and what would close it (if anything)."""
    if row.upper is None:
        return f"no upper bound at n = {row.n} documents (at least 2 are needed)"
    if row.budget_low is not None and row.budget is not None and row.upper < row.budget:
        return (
            f"the lower bound {_fmt(row, row.lower)} is not above {_fmt(row, row.budget_low)} (1 / the budget: "
            f"--policy difference tests both sides) at n = {row.n} documents (more documents narrow it)"
        )
    return f"the upper bound {_fmt(row, row.upper)} is not below it at n = {row.n} documents (more documents narrow it)"


def _name(row: DriftRow) -> str:
    name = {
        "kld": "mean KL",
        "ppl_ratio": f"perplexity ratio (per {row.unit[:-1]})",
        "cross": "cross read (the candidate's greedy text read by the baseline, against its own)",
        "cross_back": "cross read back (the baseline's greedy text read by the candidate, against its own)",
        "length": "greedy length (candidate against baseline)",
        "consistency": "within-arm decode-vs-prefill KL (the candidate's excess over the baseline's)",
    }.get(row.measure, row.measure)
    name = f"{row.path}-path {name}" if row.path and row.measure == "kld" else name
    return f"{row.suite} {name}" + (f" at positions {row.span}" if row.span else "")


def _describe(row: DriftRow) -> str:
    bounds = f"[{_fmt(row, row.lower)}, {_fmt(row, row.upper)}]"
    return f"{_name(row)} {_fmt(row, row.estimate)}, bounds {bounds} ({row.n} documents)"


def _fmt(row: DriftRow, value: float | None) -> str:
    if value is None:
        return "n/a"
    if row.measure in ("kld", "cross", "cross_back", "consistency"):
        return f"{value:.3g} nats/token"
    if row.measure == "length":
        return f"{value:+.1%}"
    if row.measure == "ppl_ratio":
        return f"x{value:.4f}"
    return f"{value:.1%}"


def drift_block_reasons(drift: Sequence[SuiteDrift]) -> list[str]:
    """The reason of every blocking drift row, by adjusted p (the verdict names them all)."""
    blocking = [r for d in drift for r in d.rows if r.gated and r.significant]
    return [
        r.reason
        for r in sorted(blocking, key=lambda r: r.p_adjusted if r.p_adjusted is not None else r.p_value)
    ]


def drift_pass_note(drift: Sequence[SuiteDrift]) -> str:
    """What a PASS says of the drift rows: within budget and powered, or UNDERPOWERED."""
    gated = [r for d in drift for r in d.rows if r.gated]
    if not gated:
        return ""
    weak = [r for r in gated if r.status == "underpowered"]
    shown = "; ".join(
        f"{r.suite} {f'{r.path} KL' if r.measure == 'kld' and r.path else 'KL' if r.measure == 'kld' else 'perplexity'}"
        f"{f' at {r.span}' if r.span else ''} {_fmt(r, r.estimate)} "
        f"(upper {_fmt(r, r.upper)} < budget {_fmt(r, r.budget)})"
        for r in gated
        if r not in weak
    )
    note = f"; drift within budget, powered: {shown}" if shown else ""
    same = [r for r in weak if r.upper is None and r.identical is not None]
    if same:  # one line for the rows of documents identical on both arms (they say the same)
        note += f"; UNDERPOWERED drift: {', '.join(_name(r) for r in same)}: {identical_text(same[0])}"
    if len(same) < len(weak):
        note += "; UNDERPOWERED drift: " + "; ".join(r.reason for r in weak if r not in same)
    kl_paths = {r.path for r in gated if r.measure == "kld"}
    if "prefill" in kl_paths and "decode" not in kl_paths:
        note += (
            "; UNDERPOWERED drift: read on the prefill path only (prompt logprobs), which does not "
            "read a KV cache back the way decoding does: set drift.decode_tokens above 0"
        )
    return note
