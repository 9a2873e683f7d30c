"""Agreement between the arms: did the answers change, not only the accuracy?

Flips that cancel pass McNemar: on the CPU engine, Q4_0 weights flipped 15 % of ARC-Easy
answers at an unchanged accuracy. The agreement gate tests the flip count against a budget
with an exact one-sided binomial test, in the same Holm family as the accuracy rows.

Default budget (a product decision, documented in docs/statistics.md): 5 % of items may flip without
an A/A run; that budget counts the server's own nondeterminism as change, and a BLOCK says so.
With ``--aa`` the test is paired: the candidate's flips against the A/A arm's on the same items,
blocking only when the excess is significantly above 3 points, so a noisy (nondeterministic)
server is not blocked for its own noise and the A/A rate's own error is accounted for. Under the
regression policy only regressions (baseline right, candidate wrong) count.

Unanswered items: a generation suite's records say whether each completion came back empty, had
no extractable answer (``no_answer``) or was cut at its token cap (``finish_reason`` "length");
with ``--errors-as-wrong`` an item that failed counts as unanswered too, and every suite
(log-likelihood ones included) gets the test. A candidate that leaves items unanswered where the
baseline answered is not only "wrong" there (a low-accuracy baseline would hide it): the row also
tests (candidate unanswered, baseline answered) against the reverse with a one-sided McNemar
mid-p, as its own member of the Holm family, and the row blocks when that test is significant.
Under ``--repeats k`` an item's unanswered share over its repeats is one graded outcome per arm,
tested with the one-sided paired sign-flip test. Sampled runs replace the flip budget with the
excess of cross-arm over repeat-to-repeat disagreement (``SampledAgreement``, ``repeats.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.gate._tested import HolmTest, Tested
from evalgate.stats import DEFAULT_FLIP_BUDGET
from evalgate.store.records import Pair, Record

__all__ = [
    "DEFAULT_AA_MARGIN",
    "DEFAULT_FLIP_BUDGET",
    "NOISE_HINT",
    "AgreementRow",
    "SampledAgreement",
    "UnansweredTest",
    "agreement_reason",
    "agreement_row",
    "changed",
    "flip_count",
    "no_answer",
    "noise_hint",
    "sampled_excess_phrase",
    "unanswered",
    "unanswered_test",
]

DEFAULT_AA_MARGIN = 0.03


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class UnansweredTest(HolmTest):
    """Items left unanswered (empty, cut at the token cap, or failed with --errors-as-wrong) per arm,
    and the one-sided paired test of the candidate leaving more of them than the baseline (its
    ``p_value``, H1: the candidate leaves more items unanswered): McNemar mid-p, or under --repeats
    the sign-flip test of the per-item unanswered shares."""

    baseline_rate: float
    candidate_rate: float
    n10: int
    """Items the candidate left unanswered where the baseline answered (--repeats: items whose
    unanswered share is higher on the candidate)."""
    n01: int
    """Items the baseline left unanswered where the candidate answered (--repeats: the reverse)."""
    test: str = "mcnemar"
    """mcnemar (one record per item) or sign-flip (--repeats: per-item shares over the repeats)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class SampledAgreement:
    """--repeats k: cross-arm disagreement between repeats against each arm's own
    (``stats.sampled_excess_test``; means over items, shares of repeat pairs r != s)."""

    k: int
    items: int
    cross: float
    """Share of repeat pairs (r != s) on which the arms' outcomes differ."""
    baseline_within: float
    """The baseline's own repeat-to-repeat disagreement."""
    candidate_within: float
    excess: float
    """cross - (baseline_within + candidate_within) / 2: estimates the mean squared per-item
    difference in the chance of being right. Under the regression policy: each same-seed regression
    measured on the item's other repeats (net of their gains), unbiased for mean P(regression) x
    the loss of chance, 0 at an A/A (``stats.sampled_excess_test``)."""
    margin: float
    p_exchange: float
    """Exact or Monte Carlo arm-swap test (H0: the arms are exchangeable)."""
    p_margin: float
    """Bootstrap over items (H0: mean excess <= margin)."""


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class AgreementRow(Tested):
    """One suite's flip-rate test against its budget (in verdict.json's ``agreement``); ``test`` says
    what its ``p_value`` comes from."""

    suite: str
    metric: str
    """The primary metric whose per-item outcomes define a flip."""
    n: int
    flips: int
    flip_rate: float
    budget: float
    budget_source: str
    kl_mean: float | None = None
    top1_agree: float | None = None
    text_agree: float | None = None
    extracted_agree: float | None = None
    aa_flip_rate: float | None = None
    unanswered: UnansweredTest | None = None
    """Generation suites (every suite with --errors-as-wrong): unanswered items per arm and their
    test; None otherwise (such a row is written without the key)."""
    counts: str = "flips"
    """What counts against the budget: flips (the value changed, either way) or regressions (the
    candidate's value is lower: the regression policy, which never blocks an improvement)."""
    test: str = "binomial"
    """binomial (exact, one-sided, against ``budget``) or paired excess over A/A (--aa: the
    candidate's flips against the A/A arm's on the same items, H1: more by over the margin)."""
    aa_excess: float | None = None
    """--aa: the candidate's flip rate minus the A/A arm's, on the same items."""
    nonfinite: int = 0
    """Multiple-choice items with a non-finite choice log-likelihood on an arm: left out of
    ``kl_mean``; in ``top1_agree`` they agree only when both arms' values are identical."""
    sampled: SampledAgreement | None = None
    """--repeats k > 1: the test that replaces the flip budget (None otherwise, written without the key)."""


def unanswered(record: Record) -> bool | None:
    """Whether ``record`` holds no answer: an error counted as wrong (``--errors-as-wrong``), an
    empty completion, one without an extractable answer (``no_answer``) or one cut at its token
    cap; None when the record does not say (a log-likelihood item, or a record written before
    evalgate kept these)."""
    extra = record.extra
    if extra.error is not None:
        return True
    if extra.empty is None and extra.no_answer is None:
        return None
    return no_answer(record) or extra.finish_reason == "length"


def no_answer(record: Record) -> bool:
    """An empty completion, or one the task's filter extracts no answer from (``no_answer``)."""
    return bool(record.extra.empty) or bool(record.extra.no_answer)


def unanswered_test(pairs: Sequence[Pair], *, errors_as_wrong: bool = False) -> UnansweredTest | None:
    """The unanswered rates and test of a suite whose records say (a generation suite), or of any
    suite when failed items count as wrong; else None."""
    if not errors_as_wrong and not any(
        r.extra.empty is not None or r.extra.no_answer is not None
        for p in pairs
        for r in (p.baseline, p.candidate)
    ):
        return None
    if any(p.repeat for p in pairs):
        return _unanswered_shares(pairs)
    flags = [(bool(unanswered(p.baseline)), bool(unanswered(p.candidate))) for p in pairs]
    n = len(flags)
    n10 = sum(c and not b for b, c in flags)
    n01 = sum(b and not c for b, c in flags)
    test = stats.mcnemar(n10, n01, alternative="less", mid_p=True)
    return UnansweredTest(
        baseline_rate=sum(b for b, _ in flags) / n if n else 0.0,
        candidate_rate=sum(c for _, c in flags) / n if n else 0.0,
        n10=n10,
        n01=n01,
        p_value=float(test.pvalue),
    )


def _unanswered_shares(pairs: Sequence[Pair]) -> UnansweredTest:
    """--repeats: each item's unanswered share over its repeats per arm, and the one-sided paired
    sign-flip test of the candidate's shares against the baseline's (seeded, so re-renders agree)."""
    shares: dict[str, list[tuple[bool, bool]]] = {}
    for p in pairs:
        shares.setdefault(p.item_id, []).append((bool(unanswered(p.baseline)), bool(unanswered(p.candidate))))
    b = np.array([sum(x for x, _ in v) / len(v) for v in shares.values()])
    c = np.array([sum(y for _, y in v) / len(v) for v in shares.values()])
    seed = stats.stable_seed("unanswered", pairs[0].baseline.suite)
    test = stats.sign_flip_test(b, c, alternative="greater", rng=np.random.default_rng(seed))
    return UnansweredTest(
        baseline_rate=float(b.mean()), candidate_rate=float(c.mean()), n10=int((c > b).sum()),
        n01=int((b > c).sum()), p_value=float(test.pvalue), test="sign-flip",
    )  # fmt: skip


NOISE_HINT = (
    "the budget counts the server's own nondeterminism (batching, scheduling) as change too: "
    "--aa measures it and tests only the excess over it, --deterministic removes it"
)
DETERMINISTIC_HINT = "the run was --deterministic, so batching noise is not among these flips"
IMPORTED_HINT = (
    "the budget counts the lm-eval runs' own nondeterminism as change too; a live --aa run measures it"
)


def noise_hint(*, deterministic: bool = False, imported: bool = False) -> str:
    """What a flip BLOCK says about noise, for the kind of run it was."""
    return IMPORTED_HINT if imported else DETERMINISTIC_HINT if deterministic else NOISE_HINT


def agreement_reason(a: AgreementRow, *, hint: str = NOISE_HINT) -> str:
    """The row's reason: its flips against the budget (or the A/A arm's), and its unanswered items
    if it has the test; a BLOCK without --aa says the budget includes the server's own noise."""
    what = "of items regressed" if a.counts == "regressions" else "of answers flipped"
    sa = a.sampled
    if sa is not None:
        where = sampled_excess_phrase(a, allowed=f", allowed {sa.margin * 100:.1f} pt ({a.budget_source})")
    elif a.aa_excess is not None and a.aa_flip_rate is not None:
        where = (
            f"{a.flip_rate:.1%} {what} ({a.flips}/{a.n}) against {a.aa_flip_rate:.1%} in the A/A pair on the "
            f"same items: excess {a.aa_excess * 100:+.1f} pt, allowed {(a.budget - a.aa_flip_rate) * 100:.1f} pt "
            f"({a.budget_source}, {a.test})"
        )
    else:
        aa = f", A/A {a.aa_flip_rate:.1%}" if a.aa_flip_rate is not None else ""
        where = f"{a.flip_rate:.1%} {what} ({a.flips}/{a.n}{aa}), budget {a.budget:.1%} ({a.budget_source})"
    if a.significant:
        over = (
            "more than the budget" if a.aa_excess is None and sa is None
            else "more regression than the margin allows" if sa is not None and a.counts == "regressions"
            else "more over the arms' own disagreement than the margin allows" if sa is not None
            else "more over the A/A rate than the margin allows"
        )  # fmt: skip
        text = f"{where}: {over}, p = {a.p_value:.3g}, adjusted {a.p_adjusted:.3g}"
        if a.aa_excess is None and sa is None:
            text += f"; {hint}"
    else:
        text = f"{where}, p = {a.p_value:.3g}"
    u = a.unanswered
    if a.nonfinite:
        text += f"; {a.nonfinite} item(s) with non-finite choice log-likelihoods (not in KL; top-1 only if identical)"
    if u is None:
        return text
    text += (
        f"; unanswered (failed, empty or cut at the token cap): baseline {u.baseline_rate:.1%}, candidate "
        f"{u.candidate_rate:.1%}, {u.n10} left by the candidate where the baseline answered vs {u.n01} "
        f"the reverse (one-sided {'sign-flip test of per-item shares, p' if u.test == 'sign-flip' else 'McNemar mid-p'}"
        f" = {u.p_value:.3g}"
    )
    if u.significant:
        return text + f", adjusted {u.p_adjusted:.3g}): the candidate leaves more items unanswered"
    return text + ")"


def sampled_excess_phrase(a: AgreementRow, *, allowed: str = "") -> str:
    """What a sampled row measured (``allowed`` follows its excess): the arms' disagreement against
    their own, repeat to repeat, or under the regression policy the same-seed regressions measured
    on the item's other repeats (a split estimate: the draw that finds a regression does not also
    measure it, so an A/A's noise does not count)."""
    sa = a.sampled
    assert sa is not None
    if a.counts == "regressions":
        return (
            f"sampled {sa.k}x: the candidate regressed on {a.flips}/{a.n} same-seed item-repeats; measured on "
            f"the item's other repeats (net of gains there, a split estimate unbiased for the regression "
            f"excess): excess {sa.excess * 100:+.1f} pt{allowed}"
        )
    return (
        f"sampled {sa.k}x: the arms disagree on {sa.cross:.1%} of repeat pairs against {sa.baseline_within:.1%} "
        f"(baseline) and {sa.candidate_within:.1%} (candidate) repeat to repeat: excess {sa.excess * 100:+.1f} pt"
        f"{allowed}; same-seed flips {a.flips}/{a.n}"
    )


def changed(pair: Pair, metric: str, counts: str = "flips") -> bool:
    """Whether an item counts against the budget: its primary-metric value differs between the
    arms ("flips"), or the candidate's is lower ("regressions", the regression policy)."""
    b, c = pair.baseline.metrics.get(metric, 0.0), pair.candidate.metrics.get(metric, 0.0)
    return c < b if counts == "regressions" else c != b


def flip_count(pairs: Sequence[Pair], metric: str, counts: str = "flips") -> int:
    return sum(changed(p, metric, counts) for p in pairs)


def agreement_row(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    budget: float,
    budget_source: str,
    aa_flip_rate: float | None = None,
    errors_as_wrong: bool = False,
    counts: str = "flips",
    aa_pairs: Sequence[Pair] | None = None,
    aa_margin: float | None = None,
) -> AgreementRow:
    """The flip-rate test plus the descriptive agreement measures the suite's records allow.

    With ``aa_pairs`` and ``aa_margin`` (``--aa`` without ``--flip-budget``) the test is paired:
    the candidate's flip indicator against the A/A arm's on the same items, H1: the candidate
    flips more than the A/A arm by more than the margin (``stats.excess_test``), so the noise
    estimate's own uncertainty is in the test. Otherwise: exact binomial against ``budget``.
    """
    n = len(pairs)
    hit = {(p.item_id, p.repeat): changed(p, metric, counts) for p in pairs}
    flips = sum(hit.values())
    row = AgreementRow(
        suite=suite, metric=metric, n=n, flips=flips, flip_rate=flips / n if n else 0.0, budget=budget,
        budget_source=budget_source, p_value=1.0, aa_flip_rate=aa_flip_rate, counts=counts,
    )  # fmt: skip
    if aa_pairs is not None and aa_margin is not None:
        aa_hit = {(p.item_id, p.repeat): changed(p, metric, counts) for p in aa_pairs}
        both = sorted(hit.keys() & aa_hit.keys())
        only_c = sum(hit[k] and not aa_hit[k] for k in both)
        only_a = sum(aa_hit[k] and not hit[k] for k in both)
        excess = stats.excess_test(only_c, only_a, len(both), margin=aa_margin)
        row.aa_flip_rate = sum(aa_hit[k] for k in both) / len(both) if both else 0.0
        row.budget = min(1.0, row.aa_flip_rate + aa_margin)
        row.aa_excess = excess.estimate if both else None
        row.p_value, row.test = excess.pvalue, f"paired excess over A/A ({excess.method})"
    elif n:
        row.p_value = float(stats.flip_budget_test(flips, n, budget=budget).pvalue)
    kls, top1, text, extracted = [], [], [], []
    for p in pairs:
        b, c = p.baseline.response, p.candidate.response
        lb, lc = _choice_logliks(b), _choice_logliks(c)
        if lb is not None and lc is not None and len(lb) == len(lc):
            if all(math.isfinite(v) for v in lb + lc):
                kls.append(stats.choice_kl(lb, lc))
                top1.append(stats.top1_agree(lb, lc))
            else:  # counted and shown, never silently dropped: such an item agrees only if identical
                row.nonfinite += 1
                top1.append([repr(v) for v in lb] == [repr(v) for v in lc])
        elif isinstance(b, str) and isinstance(c, str):
            text.append(b == c)
        if p.baseline.extracted is not None and p.candidate.extracted is not None:
            extracted.append(p.baseline.extracted == p.candidate.extracted)
    row.kl_mean = _mean(kls)
    row.top1_agree = _mean(top1)
    row.text_agree = _mean(text)
    row.extracted_agree = _mean(extracted) if not top1 else None  # MC extracted = top-1, already shown
    row.unanswered = unanswered_test(pairs, errors_as_wrong=errors_as_wrong)
    return row


def _choice_logliks(response: Any) -> list[float] | None:
    """Per-choice logliks from a multiple-choice record (``[[loglik, greedy], ...]``), finite or not."""
    if isinstance(response, list) and response and all(isinstance(x, list) and len(x) == 2 for x in response):
        try:
            return [float(x[0]) for x in response]
        except (TypeError, ValueError):
            return None
    return None


def _mean(values: Sequence[float | bool]) -> float | None:
    """Rounded to 4 decimals: llama.cpp's logprobs move by up to ~0.01 nats with the batch a
    request lands in, so more digits would only record scheduling noise (and break re-runs)."""
    return round(sum(map(float, values)) / len(values), 4) if values else None
