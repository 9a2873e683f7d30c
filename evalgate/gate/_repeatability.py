"""``--aa both``: does each arm repeat its own output, and is the candidate the noisy one?

``--aa`` measures the baseline twice, so the flip budget allows for the baseline's own noise. A
quantized candidate can be the noisier arm: SGLang's FP8 KV cache is not batch-invariant, and
vLLM's batch invariance breaks for FP8 MoE and past about 44 sequences, so a request can answer
differently with the batch it lands in. ``--aa both`` runs the candidate a second time on the
first ``--aa-items`` items of each suite and a few more (``evalgate.arms``); here each arm's
repeat is paired with its first run on those first items, and an item counts as identical when
its output is: the answer text (generation and chat), every choice's log-likelihood (multiple
choice), the greedy tokens (a drift suite that generates) or every token's log-probability (a
drift suite without greedy generation). Each arm's share gets a Clopper-Pearson interval, and McNemar's exact one-sided test
on the same items asks whether the candidate repeats itself less often (``stats.identical_shares``).
Shown, not gated: the test is not in the Holm family, and the flip budget keeps using the
baseline's A/A pair. When p < alpha the verdict says "the candidate is non-deterministic where
the baseline is not": its flips against the baseline then include its own noise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.store.records import Pair, Record

__all__ = ["Repeatability", "noisier_note", "repeatability_for", "same_output"]

NOT_RECORDED = "not measured: the responses are not recorded (a private suite; --reveal-private records them)"


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class Repeatability:
    """verdict.json ``repeatability``: one suite with both arms run twice (``--aa both``)."""

    suite: str
    compared: str
    """What had to be the same: answer text, choice log-likelihoods, greedy tokens or token
    log-probabilities ("" when the records hold no output to compare)."""
    n: int
    """Items compared: the candidate's repeat items that both arms answered on both runs."""
    baseline: float
    """Share of the n items on which the baseline's repeat gave the same output as its first run."""
    candidate: float
    baseline_ci: tuple[float, float]
    """Clopper-Pearson interval of ``baseline`` at ``confidence``."""
    candidate_ci: tuple[float, float]
    only_baseline: int
    """Items the baseline repeated exactly and the candidate did not."""
    only_candidate: int
    p_value: float
    """Exact one-sided McNemar on the same items, H1: the candidate repeats itself less often
    (unadjusted: shown, not gated)."""
    confidence: float
    noisier: bool = False
    """p_value < alpha: the candidate is non-deterministic where the baseline is not."""
    reason: str = ""


def _output(record: Record) -> tuple[str, Any] | None:
    """(what is compared, the output) of an answered record; None when it failed or holds none."""
    if record.error is not None or record.extra.error is not None or record.response is None:
        return None
    r = record.response
    if isinstance(r, Mapping) and isinstance(r.get("decode"), Mapping):  # a drift suite's greedy run
        return "greedy tokens", list(r["decode"].get("ids") or [])
    if isinstance(r, Mapping) and "top" in r:
        return "token log-probabilities", r
    if isinstance(r, list):
        return "choice log-likelihoods", r
    return "answer text", r


def same_output(first: Record, again: Record) -> tuple[str, bool] | None:
    """(what was compared, whether it is the same) for an item's first run and its repeat; None
    when either failed or records no output."""
    a, b = _output(first), _output(again)
    if a is None or b is None:
        return None
    same = json.dumps(a[1], sort_keys=True, default=str) == json.dumps(b[1], sort_keys=True, default=str)
    return a[0], same


def _by_key(pairs: Sequence[Pair], keep: set[str] | None) -> dict[tuple[str, int], tuple[str, bool]]:
    out = {}
    for p in pairs:
        if keep is not None and p.item_id not in keep:
            continue
        seen = same_output(p.baseline, p.candidate)
        if seen is not None:
            out[(p.item_id, p.repeat)] = seen
    return out


def suite_repeatability(
    suite: str,
    baseline: Sequence[Pair],
    candidate: Sequence[Pair],
    *,
    alpha: float,
    confidence: float = 0.95,
    compared: Sequence[str] | None = None,
) -> Repeatability:
    """``baseline``: the baseline's first run paired with its repeat (the A/A pairs); ``candidate``:
    the candidate's first run with its repeat. Compared on the items both repeats answered, among
    ``compared`` when given (``evalgate.arms.compared_ids``: not the padding run after them)."""
    keep = None if compared is None else set(compared)
    b, c = _by_key(baseline, keep), _by_key(candidate, keep)
    keys = sorted(b.keys() & c.keys())
    res = stats.identical_shares([b[k][1] for k in keys], [c[k][1] for k in keys], confidence=confidence)
    compared = c[keys[0]][0] if keys else ""
    row = Repeatability(
        suite=suite, compared=compared, n=res.n, baseline=res.baseline_share, candidate=res.candidate_share,
        baseline_ci=res.baseline_ci, candidate_ci=res.candidate_ci, only_baseline=res.only_baseline,
        only_candidate=res.only_candidate, p_value=res.pvalue, confidence=confidence,
        noisier=bool(keys) and res.pvalue < alpha,
    )  # fmt: skip
    row.reason = _reason(row, recorded=bool(keys) or not _unrecorded(candidate), alpha=alpha)
    return row


def _unrecorded(pairs: Sequence[Pair]) -> bool:
    return bool(pairs) and all(p.baseline.response is None and p.candidate.response is None for p in pairs)


def _share(k: float, ci: tuple[float, float]) -> str:
    return f"{k:.1%} [{ci[0]:.1%}, {ci[1]:.1%}]"


def _reason(r: Repeatability, *, recorded: bool, alpha: float) -> str:
    if not recorded:
        return NOT_RECORDED
    if not r.n:
        return "not measured: no item answered on both runs of both arms"
    shares = (
        f"run twice on the same {r.n} item(s), the baseline repeated its {r.compared} on {_share(r.baseline, r.baseline_ci)}, "
        f"the candidate on {_share(r.candidate, r.candidate_ci)} ({r.confidence:.0%} Clopper-Pearson); "
        f"{r.only_baseline} item(s) repeated on the baseline only, {r.only_candidate} on the candidate only "
        f"(exact one-sided McNemar p = {r.p_value:.3g}, not gated)"
    )
    if r.noisier:
        return (
            f"the candidate is non-deterministic where the baseline is not: {shares}; its flips against the "
            "baseline include its own noise, which the A/A flip budget (the baseline's) does not allow for"
        )
    return (
        f"no sign that the candidate repeats itself less often than the baseline (p >= {alpha:g}): {shares}"
    )


def repeatability_for(
    compared: Mapping[str, Sequence[str]],
    baseline: Mapping[str, Sequence[Pair]],
    candidate: Mapping[str, Sequence[Pair]],
    *,
    alpha: float,
) -> list[Repeatability]:
    """One row per suite of a ``--aa both`` run (``compared``: suite -> the item ids compared;
    ``baseline``/``candidate``: suite -> each arm's first run paired with its repeat)."""
    return [
        suite_repeatability(s, baseline.get(s, ()), candidate.get(s, ()), alpha=alpha, compared=ids)
        for s, ids in compared.items()
        if s in candidate
    ]


def noisier_note(rows: Sequence[Repeatability]) -> str:
    """The verdict's note when some suite's candidate repeats itself less often ("" otherwise)."""
    noisy = [r for r in rows if r.noisier]
    if not noisy:
        return ""
    return "candidate non-deterministic where the baseline is not (--aa both): " + "; ".join(
        f"{r.suite} {r.compared} repeated on {r.candidate:.1%} of {r.n} items against {r.baseline:.1%} for the "
        f"baseline (exact one-sided McNemar p = {r.p_value:.3g})"
        for r in noisy
    )
