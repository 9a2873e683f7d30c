"""Does the distribution predict the flips? A multiple-choice suite's per-item KL between the
arms' choice distributions, for the items whose answer flipped and for the others (verdict.json
``flip_drift``). Shown, never gated: it says whether a drift budget would have seen these flips.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import ConfigDict
from pydantic import dataclasses as pyd

from evalgate import stats
from evalgate.gate._agreement import _choice_logliks
from evalgate.store.records import Pair

__all__ = ["FlipDrift", "flip_drift"]


@pyd.dataclass(config=ConfigDict(use_attribute_docstrings=True))
class FlipDrift:
    """verdict.json ``flip_drift``: does the distribution predict the flips? A multiple-choice
    suite's per-item KL between the arms' choice distributions, for flipped and unflipped items."""

    suite: str
    flipped: int
    unflipped: int
    flipped_kl: float | None
    """Mean choice KL (nats) of the items whose primary metric differs between the arms."""
    unflipped_kl: float | None
    auc: float | None
    """P(a flipped item's KL exceeds an unflipped one's), ties counted half: 0.5 means the KL does
    not tell flipped items from the others; near 1 it predicts them."""
    measure: str = "choice KL"


def flip_drift(suite: str, metric: str, pairs: Sequence[Pair]) -> FlipDrift | None:
    """The choice KL of flipped against unflipped items, for a suite whose records hold per-choice
    log-likelihoods on both arms; None for any other (a generation suite records no distribution)
    and when no item flipped."""
    flipped: list[float] = []
    unflipped: list[float] = []
    for p in pairs:
        lb, lc = _choice_logliks(p.baseline.response), _choice_logliks(p.candidate.response)
        mb, mc = p.baseline.metrics.get(metric), p.candidate.metrics.get(metric)
        if lb is None or lc is None or len(lb) != len(lc) or mb is None or mc is None:
            continue
        if not all(math.isfinite(v) for v in lb + lc):
            continue
        (flipped if mb != mc else unflipped).append(float(stats.choice_kl(lb, lc)))
    if not flipped:  # nothing flipped: there is nothing for the distribution to predict
        return None
    auc = None
    if flipped and unflipped:
        wins = sum((f > u) + 0.5 * (f == u) for f in flipped for u in unflipped)
        auc = wins / (len(flipped) * len(unflipped))
    return FlipDrift(suite, len(flipped), len(unflipped), _mean(flipped), _mean(unflipped), auc)


def _mean(values: Sequence[float]) -> float | None:
    return float(math.fsum(values) / len(values)) if values else None
