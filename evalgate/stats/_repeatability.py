"""Each arm run twice (``--aa both``): how often an arm repeats its own output exactly, and whether
the candidate does so less often than the baseline.

An engine that is not batch-invariant answers one request differently with the batch it lands in
(SGLang's FP8 KV cache; vLLM's batch-invariant mode breaks for FP8 MoE), so a quantized candidate
can be the noisy arm. Each arm's repeat is paired item by item with its first run: ``identical``
is how many items gave the same output both times. The arms are compared on the same items, so
the test is paired: McNemar's exact one-sided test on the items where exactly one arm repeated
itself (H1: the candidate repeats itself less often), and each share gets a Clopper-Pearson
interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st

from evalgate.stats._binomial import clopper_pearson

__all__ = ["IdenticalShares", "clopper_pearson", "identical_shares"]


@dataclass(frozen=True)
class IdenticalShares:
    """Both arms' repeat-to-repeat identity on the same ``n`` items, and the paired exact test."""

    n: int
    baseline: int
    """Items whose baseline repeat gave the baseline's output again."""
    candidate: int
    only_baseline: int
    """Items the baseline repeated exactly and the candidate did not."""
    only_candidate: int
    baseline_ci: tuple[float, float]
    candidate_ci: tuple[float, float]
    pvalue: float
    """Exact one-sided McNemar: P(X >= only_baseline), X ~ Binomial(only_baseline + only_candidate,
    1/2); 1.0 when no item is discordant."""
    confidence: float

    @property
    def baseline_share(self) -> float:
        return self.baseline / self.n if self.n else 0.0

    @property
    def candidate_share(self) -> float:
        return self.candidate / self.n if self.n else 0.0


def identical_shares(
    baseline: Sequence[bool], candidate: Sequence[bool], *, confidence: float = 0.95
) -> IdenticalShares:
    """``baseline[i]``, ``candidate[i]``: whether item i gave the same output on that arm's repeat
    as on its first run (the same items, in the same order, on both arms)."""
    if len(baseline) != len(candidate):
        raise ValueError(
            f"baseline and candidate must pair item by item, got {len(baseline)} and {len(candidate)}"
        )
    b, c = [bool(x) for x in baseline], [bool(x) for x in candidate]
    only_b = sum(x and not y for x, y in zip(b, c, strict=True))
    only_c = sum(y and not x for x, y in zip(b, c, strict=True))
    discordant = only_b + only_c
    p = float(_st.binom.sf(only_b - 1, discordant, 0.5)) if discordant else 1.0
    n = len(b)
    return IdenticalShares(
        n=n, baseline=sum(b), candidate=sum(c), only_baseline=only_b, only_candidate=only_c,
        baseline_ci=clopper_pearson(sum(b), n, confidence=confidence),
        candidate_ci=clopper_pearson(sum(c), n, confidence=confidence), pvalue=min(1.0, p),
        confidence=confidence,
    )  # fmt: skip
