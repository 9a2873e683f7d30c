"""One drift row's shape (verdict.json ``drift[].rows``): the measure, what it read, its bounds and
budget, and the test's outcome (``gate/_drift.py`` and ``gate/_decode_drift.py`` build them)."""

from __future__ import annotations

from dataclasses import field

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate.gate._tested import Status, Tested

__all__ = ["DriftRow", "agree_row"]


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class DriftRow(Tested):
    """One drift measure of one pair of arms. Its ``p_value``: H0, the drift is within the budget
    (bootstrap over documents, stats.ratio_budget_test); 1.0 for a row that is not gated."""

    suite: str
    measure: str
    """kld (nats per token), ppl_ratio (candidate / baseline perplexity), top1_agree (share); on
    greedy generations also cross (nats per token: the baseline's own text over the other arm's,
    read by the baseline; cross_back, shown: the same read by the candidate), length (relative
    change in generated tokens), consistency (nats per token: the candidate's decode-against-prefill
    KL on its own text over the baseline's) and parted (share of documents whose generations part)."""
    pair: str
    """candidate (baseline vs candidate, gated) or aa (baseline vs its second launch: the noise floor)."""
    unit: str
    """What is averaged: tokens, or lm-eval's words or bytes for an imported perplexity task."""
    n: int
    """Documents paired."""
    units: int
    """Positions (or words, bytes) summed over the documents."""
    estimate: float
    lower: float | None = None
    """One-sided lower confidence bound (1 - alpha): above the budget means shown over it."""
    upper: float | None = None
    """One-sided upper confidence bound (1 - alpha): below the budget means shown within it."""
    budget: float | None = None
    """On the measure's own scale (a KL, or a perplexity ratio such as 1.02); None: not gated."""
    budget_source: str = ""
    status: Status = field(default="info", kw_only=True)
    """info (shown, not gated) until the gate judges a gated row: then pass, block or underpowered
    (an advisory suite's: advisory-pass, -block, -underpowered)."""
    test: str = ""
    path: str = ""
    """What the measure read: prefill (prompt logprobs), decode (generated tokens: llama.cpp's
    forced ones, or greedy generations compared on their shared prefix), "" (imported, or unknown)."""
    span: str = ""
    """The generated-token positions it covers (0-63, 64-255, 256-1023, 1024+); "": all of them."""
    shown_only: bool = False
    """A per-position bucket shown beside the gated rows, not in the family."""
    onset: str = ""
    """For a decode-path row: the first bucket whose lower bound is above the budget, if any."""
    identical: float | None = None
    """Every document identical on both arms: the most of documents that could differ (an upper
    bound on the share, Clopper-Pearson), since no differing document sizes the drift."""
    differing: int | None = None
    """Documents whose value is not exactly 0 (that differ between the arms); a row sized by fewer
    than ``MIN_DIFFERING`` of them, or with fewer than ``MIN_DOCS`` documents, is never powered."""
    budget_low: float | None = None
    """A two-sided row's lower edge: the perplexity ratio's 1 / (1 + margin) under --policy
    difference; always for cross (minus its budget: a text far MORE likely to the baseline than its
    own is a degenerate one) and length (minus its margin: shorter). A value shown below it blocks
    too; ``p_value`` is then two-sided (twice the smaller one-sided p) and ``lower``/``upper`` keep
    their one-sided levels."""

    @property
    def gated(self) -> bool:
        return self.pair == "candidate" and self.budget is not None and not self.shown_only


def agree_row(
    suite: str, pair_name: str, n: int, total: int, same: int, path: str, test: str = ""
) -> DriftRow:
    return DriftRow(
        suite, "top1_agree", pair_name, "tokens", n, total, same / total if total else 1.0,
        test=test or "share of positions whose most likely token is the same",
        p_value=1.0, reason="shown, not gated", path=path,
    )  # fmt: skip
