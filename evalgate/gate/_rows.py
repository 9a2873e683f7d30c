"""One (suite, metric) row: the metric checked first, then the paired test its kind calls for.

A suite declares its metric kind (``metric_kind`` on the suite, recorded in the manifest):
``binary`` metrics are 0 or 1 per item and get McNemar's mid-p with Tango's interval; a
``continuous`` (graded) metric such as F1 gets the paired sign-flip permutation test of the mean
difference with a bootstrap interval, both seeded from the suite and metric names, so a
re-render reproduces them. Nothing is thresholded: an F1 of 0.6 is not "right".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from evalgate import stats
from evalgate.gate._model import Row
from evalgate.gate._policy import GatePolicy
from evalgate.store.records import Pair

__all__ = [
    "METRIC_KINDS",
    "METRIC_RANGES",
    "MIN_DIFFERING",
    "NOT_ESTIMABLE",
    "RESAMPLES",
    "MetricKind",
    "check_suite",
    "error_row",
    "metric_row",
    "paired_values",
]

MetricKind = Literal["binary", "continuous"]
METRIC_KINDS: tuple[str, ...] = ("binary", "continuous")
RESAMPLES = 10_000
"""Sign-flip and bootstrap resamples: the smallest sign-flip p is 1/10001, below alpha/12."""
MIN_DIFFERING = 10
"""A graded row's MDE comes from the spread of its per-item differences. With fewer items whose
value differs between the arms (a sampled suite both arms almost always fail: nearly every
per-item mean 0), that spread says nothing about a change the run has not seen: not estimable."""
NOT_ESTIMABLE = "MDE not estimable"
METRIC_RANGES: dict[str, tuple[float, float]] = {
    name: (0.0, 1.0)
    for name in (
        # lm-eval's per-document 0/1 metrics (lm_eval/api/metrics.py: acc, acc_norm,
        # acc_mutual_info, acc_bytes, exact_match), named before a filter (``exact_match,strict-match``)
        "acc", "acc_norm", "acc_mutual_info", "acc_bytes", "exact_match",
        # evalgate's own: a private exam's pass, tool_calls' valid / match / decision, RULER's
        # string_match_all (the share of required values found)
        "pass", "valid", "match", "decision", "string_match_all",
    )
}  # fmt: skip
"""The values a known metric can take, by its name. The kind a run declares can come from its
values (an imported lm-eval log: any value but 0 and 1 reads as graded), so an ``acc`` of 7 or -1
would pass as a graded metric; its name says it is garbage. A metric not named here is judged
only by its declared kind (finite; 0 or 1 if binary)."""


def _value(metrics: dict[str, float], metric: str) -> float | None:
    v = metrics.get(metric)
    return None if v is None else float(v)


def metric_range(metric: str) -> tuple[float, float] | None:
    """The range of a known metric (``METRIC_RANGES``, by the name before any filter), else None."""
    return METRIC_RANGES.get(metric.split(",", 1)[0].strip())


def _in_range(v: float, bounds: tuple[float, float] | None) -> bool:
    return bounds is None or bounds[0] <= v <= bounds[1]


def _usable(v: float | None, kind: str, bounds: tuple[float, float] | None = None) -> bool:
    return (
        v is not None and math.isfinite(v) and (kind != "binary" or v in (0.0, 1.0)) and _in_range(v, bounds)
    )


def paired_values(pairs: Sequence[Pair], metric: str, kind: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(baseline, candidate) values of the items usable on both arms, and how many were not (a
    value outside its metric's known range is not usable either)."""
    b, c = [], []
    bounds = metric_range(metric)
    for p in pairs:
        x, y = _value(p.baseline.metrics, metric), _value(p.candidate.metrics, metric)
        if _usable(x, kind, bounds) and _usable(y, kind, bounds):
            b.append(x)
            c.append(y)
    return np.asarray(b, dtype=float), np.asarray(c, dtype=float), len(pairs) - len(b)


def check_suite(
    suite: str, metric: str, pairs: Sequence[Pair], kind: str, *, references: tuple[str, ...] = ("baseline",)
) -> str | None:
    """Why this suite's primary metric cannot be judged (one line), or None. A PASS on nothing is
    the failure this prevents: no items, a renamed or NaN metric, a reference arm (``references``:
    the sides of each pair that must have answered) that failed every item, a value its metric
    cannot take (``METRIC_RANGES``: an ``acc`` of 7). A candidate that
    failed every item is no such case: with --errors-as-wrong its failures are wrong answers, and
    the accuracy and unanswered tests judge them."""
    n = len(pairs)
    if kind not in METRIC_KINDS:
        return f"{suite}: unknown metric kind {kind!r} (expected one of {', '.join(METRIC_KINDS)})"
    if n == 0:
        return f"{suite}: no paired items"
    lo, hi = metric_range(metric) or (-math.inf, math.inf)
    for side in references:
        errors = [getattr(p, side).extra.error for p in pairs]
        if all(e is not None for e in errors):
            arm = getattr(pairs[0], side).arm
            first = " ".join(str(errors[0]).split())[:200]
            return f"{suite}: every item failed on the {arm} ({n} of {n}; first: {first})"
    for what, bad in (
        ("is missing", lambda v: v is None),
        ("is not finite (NaN or inf)", lambda v: v is not None and not math.isfinite(v)),
        ("is not 0 or 1 but the suite declares it binary", lambda v: kind == "binary" and v not in (0, 1)),
        (
            f"is outside its range [{lo:g}, {hi:g}]",
            lambda v: v is not None and math.isfinite(v) and not lo <= v <= hi,
        ),
    ):
        hits = [(p, r) for p in pairs for r in (p.baseline, p.candidate) if bad(_value(r.metrics, metric))]
        if hits:
            p, r = hits[0]
            seen = ", ".join(sorted(r.metrics)) or "none"
            return (
                f"{suite}: the primary metric {metric!r} {what} on {len(hits)} record(s) of {n} paired "
                f"item(s) (first: item {p.item_id} on the {r.arm}, value {r.metrics.get(metric)!r}; "
                f"its metrics: {seen})"
            )
    return None


def error_row(suite: str, metric: str, n: int, *, primary: bool, reason: str) -> Row:
    return Row(
        suite=suite, metric=metric, primary=primary, n=n, baseline=0.0, candidate=0.0, delta=0.0, n11=0, n10=0,
        n01=0, n00=0, flips=0.0, p_value=1.0, ci_low=-1.0, ci_high=1.0, mde=1.0, status="error", reason=reason,
    )  # fmt: skip


def metric_row(
    suite: str,
    metric: str,
    pairs: Sequence[Pair],
    *,
    primary: bool,
    policy: GatePolicy,
    kind: str,
    level: float,
) -> Row:
    """The row of one metric over the items usable on both arms; ``level``: the alpha its MDE is
    computed at (the one its test must reach)."""
    base, cand, dropped = paired_values(pairs, metric, kind)
    if base.size == 0:
        row = error_row(suite, metric, len(pairs), primary=primary, reason="no paired items with this metric")
        row.status = "missing"
        return row
    row = (
        _binary(suite, metric, base, cand, policy, level)
        if kind == "binary"
        else _graded(suite, metric, base, cand, policy, level)
    )
    row.primary = primary
    if dropped:
        row.reason = "; ".join(
            filter(None, [row.reason, f"{dropped} item(s) without a usable value left out"])
        )
    return row


def _binary(suite: str, metric: str, b: np.ndarray, c: np.ndarray, policy: GatePolicy, level: float) -> Row:
    n = int(b.size)
    n11, n10 = int(((b == 1) & (c == 1)).sum()), int(((b == 1) & (c == 0)).sum())
    n01, n00 = int(((b == 0) & (c == 1)).sum()), int(((b == 0) & (c == 0)).sum())
    alternative = policy.alternative
    test = stats.mcnemar(n10, n01, alternative=alternative, mid_p=True)  # type: ignore[arg-type]
    ci = stats.paired_diff_ci(n11, n10, n01, n00, confidence=policy.confidence)
    flips = (n10 + n01) / n
    mde = stats.mde(n, flips, alpha=level, alternative=alternative)  # type: ignore[arg-type]
    return Row(
        suite=suite, metric=metric, primary=False, n=n, baseline=(n11 + n10) / n, candidate=(n11 + n01) / n,
        delta=(n01 - n10) / n, n11=n11, n10=n10, n01=n01, n00=n00, flips=flips, p_value=float(test.pvalue),
        ci_low=float(ci.low), ci_high=float(ci.high), mde=min(1.0, float(mde)), test="mcnemar", mde_alpha=level,
    )  # fmt: skip


def _graded(suite: str, metric: str, b: np.ndarray, c: np.ndarray, policy: GatePolicy, level: float) -> Row:
    n = int(b.size)
    d = c - b
    test = stats.sign_flip_test(
        b, c, n_resamples=RESAMPLES, alternative=policy.alternative,  # type: ignore[arg-type]
        rng=np.random.default_rng(stats.stable_seed("sign-flip", suite, metric)),
    )  # fmt: skip
    sides = 2 if policy.alternative == "two-sided" else 1
    span = max(1.0, float(np.abs(np.concatenate([b, c])).max()))
    # the interval keeps its level for sparse changes, and counts changes as whole flips when too
    # few items differ to resample (non-inferiority tests its lower bound): stats/_graded.py
    ci = stats.graded_diff_ci(
        b, c, confidence=policy.confidence, span=span if min(b.min(), c.min()) >= 0 else 2 * span,
        min_differing=MIN_DIFFERING, n_resamples=RESAMPLES,
        rng=np.random.default_rng(stats.stable_seed("bootstrap", suite, metric)),
    )  # fmt: skip
    differing, note = int((d != 0).sum()), ""
    if 2.0 ** -(n - 1 if sides == 2 else n) >= level:  # the smallest p the sign-flip test can reach
        mde = span
    elif differing < MIN_DIFFERING:
        mde, note = (
            span,
            (
                f"{NOT_ESTIMABLE}: only {differing} of {n} items differ between the arms, too few to size a "
                f"change the run has not seen (needs {MIN_DIFFERING}); shown as the whole range"
            ),
        )
    else:
        # the noise's spread (root mean square, the sign-flip null's scale) plus what a loss
        # concentrated on d / span items adds to it: stats.mde_mean states the model
        rms = float(np.sqrt(np.mean(d * d)))
        mde = min(span, stats.mde_mean(n, rms, span=span, alpha=level, alternative=policy.alternative))  # type: ignore[arg-type]
    return Row(
        suite=suite, metric=metric, primary=False, n=n, baseline=float(b.mean()), candidate=float(c.mean()),
        delta=float(d.mean()), n11=int((d == 0).sum()), n10=int((d < 0).sum()), n01=int((d > 0).sum()), n00=0,
        flips=float((d != 0).mean()), p_value=float(test.pvalue), ci_low=float(ci.low), ci_high=float(ci.high),
        mde=mde, test="sign-flip", mde_alpha=level, reason="; ".join(filter(None, [note, _flip_note(ci)])),
    )  # fmt: skip


def _flip_note(ci: stats.GradedCI) -> str:
    """What the row's reason says when its interval counts changes as whole flips."""
    if ci.resampled:
        return ""
    return (
        f"interval: Tango's score interval with each change counted as a whole flip, as for a binary suite "
        f"(only {ci.differing} item(s) differ, too few to resample: needs {MIN_DIFFERING}), so a few "
        "identical items never show non-inferiority"
    )
