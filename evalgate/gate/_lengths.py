"""Rows per context length, and the gated trend row, for a suite whose records carry a length.

A quantized KV cache is adopted to fit more context, and its error accumulates over the
attention span, so a long-context suite (records with ``extra.context_length``) is judged
per length too. The suite's primary row still pools every length (one McNemar, one agreement
row); beside it:

- **one row per length** (n, accuracy per arm, difference, flips, two-sided McNemar mid-p):
  informational, outside the Holm family;
- **the trend row**, gated in the Holm family: a one-sided McNemar mid-p (H1: the candidate is
  worse) on the longest length alone. It answers the question a rollout asks of an 8-bit cache,
  "does the candidate lose answers at the longest context it will run at?", with the same test
  and counts as every other row. The pooled row already covers the average; a loss confined to
  the longest length is diluted there (one bucket of four), which is the case this row exists
  for. Under non-inferiority the question is the margin's, not "any loss": the row then tests
  H1: the candidate is worse by more than the margin at the longest length (its losses' excess
  over its gains against the margin: ``stats.excess_test``, Tango's score statistic, the one
  behind the pooled row's bound, exact up to 1,000 discordant items), so a candidate inside the
  margin at every length blocks at most alpha of the time.
  An exact test of a monotone trend in the discordant pairs (``stats.discordant_trend``)
  asks something else (does the share of regressions among the flips grow with length): it can
  be significant with no net loss at the longest length, or miss a loss found only there, so
  it is shown, not gated. The row is one-sided under every policy: a candidate better at long
  context is no reason to block, and a two-sided change is the pooled row's job. It blocks on
  its own, so under non-inferiority it shares the family of the agreement tests.

With ``--sequential`` the trend row is shown, not gated (a fixed-n p-value after looking every
chunk is not valid); with ``--repeats`` the outcomes are graded item means and no length rows
are computed (a note says so). A suite with one length has its rows but no trend row: the
pooled row is that test already.

Identical prompts, proven: such a suite's generator fits each prompt to its length with the
server's own tokenizer, and each record keeps ``extra.sent_hash``, a hash of the exact text
sent. A pair whose hashes differ was not sent the same prompt, so the suite is an ERROR row,
never a verdict (``sent_mismatch``), for any suite whose records carry the hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.gate._tested import Tested
from evalgate.store.records import Pair, Record

__all__ = [
    "LengthRow",
    "LengthTrend",
    "SuiteLengths",
    "context_length",
    "length_rows",
    "lengths_for",
    "sent_mismatch",
    "suite_lengths",
    "trend_block_reason",
    "trend_pass_note",
    "trend_status",
]

TREND_TEST = "mcnemar mid-p, one-sided (candidate worse), longest length"
MARGIN_TEST = (
    "excess loss over the margin, one-sided (Tango score, exact up to 1,000 discordant), longest length"
)


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class LengthRow:
    """One context length of a suite: the paired counts and a two-sided McNemar mid-p (informational)."""

    context_length: int
    """Target prompt length in tokens (the records' ``extra.context_length``)."""
    n: int
    baseline: float
    candidate: float
    delta: float
    n11: int
    n10: int
    """Baseline right, candidate wrong (a regression)."""
    n01: int
    n00: int
    flips: int
    flip_rate: float
    p_value: float
    """McNemar mid-p, two-sided; not in the Holm family."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class LengthTrend(Tested):
    """The gated row: does the candidate lose answers at the longest length? Its ``p_value``: McNemar
    mid-p, one-sided (H1: the candidate is worse), on the longest length's pairs; under
    non-inferiority (``test`` = MARGIN_TEST) H1: worse by more than the margin. Its ``status``: pass,
    block, or info (shown, not gated: --sequential)."""

    context_length: int
    """The longest length of the suite, the bucket tested."""
    n: int
    baseline: float
    candidate: float
    n10: int
    n01: int
    test: str = TREND_TEST
    gated: bool = True
    """False with --sequential: then the row is not in the Holm family."""
    trend_p: float | None = None
    """Informational: exact conditional test that the share of regressions among the discordant
    pairs grows with length (``stats.discordant_trend``, one-sided mid-p); None when it can say
    nothing (flips at fewer than two lengths, or all of one kind) or would take too long (more
    than ``TREND_EXACT_LIMIT`` flips)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class SuiteLengths:
    """verdict.json ``lengths``: one suite's rows per context length and its trend row."""

    suite: str
    metric: str
    rows: list[LengthRow] = field(default_factory=list)
    trend: LengthTrend | None = None
    note: str = ""


def context_length(record: Record) -> int | None:
    value = record.extra.context_length
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _answered(p: Pair) -> bool:
    return p.baseline.extra.error is None and p.candidate.extra.error is None


def sent_mismatch(suite: str, pairs: Sequence[Pair]) -> str | None:
    """Why the arms of a suite whose records carry ``sent_hash`` cannot be compared, or None.
    An item that failed on an arm (``--errors-as-wrong``) sent nothing to compare."""
    if not any(r.extra.sent_hash is not None for p in pairs for r in (p.baseline, p.candidate)):
        return None
    bad = [p for p in pairs if _answered(p) and p.baseline.extra.sent_hash != p.candidate.extra.sent_hash]
    if not bad:
        return None
    first = bad[0]
    return (
        f"{suite}: the arms were sent different prompts for {len(bad)} item(s) of {len(pairs)} "
        f"(first: {first.item_id}, sent_hash {first.baseline.extra.sent_hash!r} on the baseline, "
        f"{first.candidate.extra.sent_hash!r} on the candidate); a prompt fitted to a length with "
        "each server's tokenizer differs only if the tokenizers or the suite's generator do: not a verdict"
    )


def _buckets(pairs: Sequence[Pair], metric: str) -> tuple[dict[int, list[tuple[int, int]]], int]:
    """length -> [(baseline, candidate) outcomes], and how many pairs had no length."""
    out: dict[int, list[tuple[int, int]]] = {}
    missing = 0
    for p in pairs:
        length = context_length(p.baseline)
        if length is None:
            missing += 1
            continue
        b, c = p.baseline.metrics.get(metric), p.candidate.metrics.get(metric)
        out.setdefault(length, []).append((int(b or 0), int(c or 0)))
    return dict(sorted(out.items())), missing


def _row(length: int, outcomes: Sequence[tuple[int, int]]) -> LengthRow:
    n = len(outcomes)
    n11 = sum(1 for b, c in outcomes if b and c)
    n10 = sum(1 for b, c in outcomes if b and not c)
    n01 = sum(1 for b, c in outcomes if c and not b)
    test = stats.mcnemar(n10, n01, alternative="two-sided", mid_p=True)
    return LengthRow(
        context_length=length, n=n, baseline=(n11 + n10) / n, candidate=(n11 + n01) / n,
        delta=(n01 - n10) / n, n11=n11, n10=n10, n01=n01, n00=n - n11 - n10 - n01, flips=n10 + n01,
        flip_rate=(n10 + n01) / n, p_value=float(test.pvalue),
    )  # fmt: skip


def length_rows(pairs: Sequence[Pair], metric: str) -> list[LengthRow]:
    """One row per context length, shortest first (pairs without a length are left out)."""
    buckets, _ = _buckets(pairs, metric)
    return [_row(length, outcomes) for length, outcomes in buckets.items()]


def suite_lengths(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    kind: str = "binary",
    gated: bool = True,
    margin_for: Callable[[float], float | None] | None = None,
) -> SuiteLengths | None:
    """The suite's length rows and trend row, or None when its records carry no length;
    ``margin_for``: non-inferiority's margin for a baseline accuracy (the trend row then tests
    against it), None under the other policies."""
    if not any(context_length(p.baseline) is not None for p in pairs):
        return None
    if kind != "binary":
        return SuiteLengths(suite, metric, note=(
            "per-length rows need a 0/1 metric; with --repeats each item's outcome is the mean of its "
            "repeats, so they are not computed (the pooled row judges the suite)"
        ))  # fmt: skip
    buckets, missing = _buckets(pairs, metric)
    rows = [_row(length, outcomes) for length, outcomes in buckets.items()]
    notes = [f"{missing} item(s) without a context length left out of these rows"] if missing else []
    trend = None
    if len(rows) < 2:
        notes.append("one context length only: the pooled row is the test of it")
    else:
        last = rows[-1]
        margin = None if margin_for is None else margin_for(last.baseline)
        if margin is None:
            p, name = (
                float(stats.mcnemar(last.n10, last.n01, alternative="less", mid_p=True).pvalue),
                TREND_TEST,
            )
        else:  # H1: n10 / n - n01 / n > margin, the loss beyond the margin at this length
            p, name = float(stats.excess_test(last.n10, last.n01, last.n, margin=margin).pvalue), MARGIN_TEST
            notes.append(
                f"non-inferiority: the longest-length row tests a loss beyond the margin ({margin * 100:.1f} pt)"
            )
        trend = LengthTrend(
            context_length=last.context_length, n=last.n, baseline=last.baseline, candidate=last.candidate,
            n10=last.n10, n01=last.n01, p_value=p, gated=gated, trend_p=_trend_p(rows), test=name,
        )  # fmt: skip
        if not gated:
            notes.append(
                "--sequential: the longest-length row is shown, not gated (its fixed-n p is not valid)"
            )
    return SuiteLengths(suite, metric, rows, trend, "; ".join(notes))


TREND_EXACT_LIMIT = 200
"""Above this many discordant pairs the informational exact trend test is not computed: its
exact law is a convolution whose cost grows about cubically (200 pairs took 0.4 s, 400 took
4.7 s, 800 took 84 s on 2 cores), and a verdict must not stall on a number shown, not gated."""


def _trend_p(rows: Sequence[LengthRow]) -> float | None:
    """The exact trend test's p, or None where it can say nothing: flips at fewer than two
    lengths, or flips all one way (the share of regressions among them cannot vary), or more
    flips than ``TREND_EXACT_LIMIT``."""
    flipped = [r for r in rows if r.flips]
    lost, flips = sum(r.n10 for r in rows), sum(r.flips for r in rows)
    if len(flipped) < 2 or lost in (0, flips) or flips > TREND_EXACT_LIMIT:
        return None
    return float(stats.discordant_trend([r.n10 for r in rows], [r.n01 for r in rows]).pvalue)


def lengths_for(
    per_suite: Mapping[str, tuple[Sequence[str], Sequence[Pair]]],
    good: Sequence[str],
    kind: Mapping[str, str],
    *,
    sequential: Mapping[str, Any] | None = None,
    margin_for: Callable[[float], float | None] | None = None,
) -> list[SuiteLengths]:
    """The length sections of the judged suites (``good``) whose records carry a length;
    ``margin_for``: non-inferiority's margin (``suite_lengths``)."""
    out = []
    for suite in good:
        metrics, pairs = per_suite[suite]
        section = suite_lengths(
            suite,
            metrics[0],
            pairs,
            kind=kind[suite],
            gated=not (sequential and suite in sequential),
            margin_for=margin_for,
        )
        if section is not None:
            out.append(section)
    return out


def _test_words(t: LengthTrend) -> str:
    return "one-sided McNemar mid-p" if t.test == TREND_TEST else "one-sided test of a loss beyond the margin"


def _counts(t: LengthTrend) -> str:
    return (
        f"at {t.context_length} tokens the candidate lost {t.n10} and gained {t.n01} of {t.n} item(s) "
        f"({t.baseline:.3f} -> {t.candidate:.3f}), {_test_words(t)}{'' if t.test == TREND_TEST else ', p'} = "
        f"{t.p_value:.3g}"
    )


def trend_status(t: LengthTrend, *, alpha: float) -> None:
    """The row's status and reason once Holm has adjusted its p-value."""
    trend = (
        ""
        if t.trend_p is None
        else f"; trend of regressions with length (exact, not gated): p = {t.trend_p:.3g}"
    )
    if not t.gated:
        t.status, t.reason = "info", f"shown, not gated (--sequential): {_counts(t)}{trend}"
    elif t.significant:
        t.status = "block"
        worse = "worse" if t.test == TREND_TEST else "worse by more than the margin"
        t.reason = f"{_counts(t)}, Holm p = {t.p_adjusted:.3g} < {alpha}: the candidate is {worse} at the longest length{trend}"
    else:
        t.status = "pass"
        t.reason = (
            f"no significant loss at the longest length ({_counts(t)}, Holm p = {t.p_adjusted:.3g}){trend}"
        )


def trend_block_reason(section: SuiteLengths, *, alpha: float) -> str:
    """The verdict's one line when a suite's trend row blocks."""
    t = section.trend
    assert t is not None
    return (
        f"{section.suite} {section.metric} at the longest context length ({t.context_length} tokens): the "
        f"candidate lost {t.n10} and gained {t.n01} of {t.n} item(s) ({t.baseline:.3f} -> {t.candidate:.3f}, "
        f"{_test_words(t)}, Holm p = {t.p_adjusted:.3g} < {alpha})"
    )


def trend_pass_note(sections: Sequence[SuiteLengths]) -> str:
    """What a PASS says of the gated longest-length rows ("" when there are none)."""
    gated = [(s, s.trend) for s in sections if s.trend is not None and s.trend.gated]
    if not gated:
        return ""
    return (
        "; no significant loss at the longest context length ("
        + ", ".join(
            f"{s.suite} {t.context_length} tokens: {t.n10} lost / {t.n01} gained, Holm p = {t.p_adjusted:.3g}"
            for s, t in gated
        )
        + ")"
    )
