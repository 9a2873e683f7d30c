"""Per-token distribution drift between the arms: the KL and top-1 agreement per position, summed
per document; the perplexity ratio; the KL's quantiles for the report.

Per position: a lower bound on KL(baseline || candidate) from the two top-k lists
(``position_kld``, vectorised over a document's positions by ``position_klds``) and whether the
most likely token is the same. Per document: the sum of the position KLDs and the token count,
the numerator and denominator that ``evalgate.stats._ratio_budget`` tests against a budget.

The KL is by token identity (``_kl_bound``): a candidate that kept each alternative's probability
but changed its id has changed, where a bound over the tokens both lists share scored it 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalgate.stats._checks import prob
from evalgate.stats._kl_bound import (
    LOGPROB_FLOOR,
    REMAINDER_FLOOR,
    identity_klds,
    parse_forced,
    parse_tops,
    top1,
)

__all__ = [
    "LOGPROB_FLOOR",
    "REMAINDER_FLOOR",
    "DocDrift",
    "Forced",
    "TopList",
    "document_drift",
    "kld_quantiles",
    "perplexity_ratio",
    "position_kld",
    "position_klds",
    "top1_same",
]

TopList = Sequence[Sequence[float]]
"""One position's top-k: (token id, logprob) pairs, most likely first (JSON lists work too)."""
Forced = Sequence[Sequence[float]]
"""Per position: (forced token id, baseline logprob, candidate logprob) of the teacher-forced token."""


@dataclass(frozen=True)
class DocDrift:
    """One document's drift between two arms, summed over its positions."""

    kld_sum: float
    """Sum over positions of the KL(baseline || candidate) lower bound, nats."""
    top1_same: int
    """Positions where both arms' most likely token is the same."""
    n: int
    """Positions compared."""


def position_klds(
    base_positions: Sequence[TopList], cand_positions: Sequence[TopList], *, forced: Forced | None = None
) -> np.ndarray:
    """``position_kld`` at every position of a document at once (one array per document, so
    the gate's 50 documents x 100 positions x 3 pairs stay a few hundred numpy calls).
    ``forced``: per position (token id, baseline logprob, candidate logprob) of the forced token,
    known on both arms even where a list leaves it out (a finer bound)."""
    return _compare(base_positions, cand_positions, forced=forced)[0]


def position_drift(
    base_positions: Sequence[TopList], cand_positions: Sequence[TopList], *, forced: Forced | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(``position_klds``, whether both arms' most likely token is the same) at every position, in
    one pass: the gate needs both per document, and computing each apart read the lists twice."""
    return _compare(base_positions, cand_positions, forced=forced)


def position_kld(p_top: TopList, q_top: TopList, *, forced: Sequence[float] | None = None) -> float:
    """A lower bound on KL(P || Q) in nats at one position, P the baseline's and Q the candidate's
    top-k lists of (token id, logprob), each its server's true top-k.

    By token identity (``evalgate.stats._kl_bound``): a token one list holds and the other does
    not is known on one side and at most that list's smallest probability on the other, so an
    alternative that changed its id is a change. The vocabulary is coarsened into one bucket per
    token known on both sides (in both lists, or ``forced``: (token id, baseline logprob,
    candidate logprob)), one bucket per side's own tokens and one rest; the least KL that the
    buckets' unknown masses allow is the value. KL on a coarsening is a LOWER bound on the true KL
    (data-processing inequality): the gap is the divergence within the buckets, weighted by their
    mass under P, so P's mass outside the lists bounds how much of P the value cannot see token by
    token. Where the caps do not bind, the value is the tokens in both lists plus one remainder.

    Equal inputs give exactly 0.0: each term is p * (lp - lq) from the logprobs, which cancels
    exactly. Q's mass below what the logprobs resolve is floored (``REMAINDER_FLOOR``,
    ``LOGPROB_FLOOR``) so the value stays finite; a negative total from rounding is clamped to 0.
    """
    f = None if forced is None else [forced]
    return float(_compare([p_top], [q_top], ("p_top", "q_top"), forced=f)[0][0])


def _compare(
    base_positions: Sequence[TopList],
    cand_positions: Sequence[TopList],
    names: tuple[str, str] = ("base_positions", "cand_positions"),
    *,
    forced: Forced | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(KLD lower bound, same top-1) per position, all positions at once."""
    if len(base_positions) != len(cand_positions):
        raise ValueError(
            f"the arms scored different numbers of positions: {len(base_positions)} and {len(cand_positions)}"
        )
    n = len(base_positions)
    f = None if forced is None else parse_forced(forced, n)
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    p, q = parse_tops(base_positions, names[0]), parse_tops(cand_positions, names[1])
    return identity_klds(p, q, f), top1(p[0], p[1]) == top1(q[0], q[1])


def top1_same(p_top: TopList, q_top: TopList) -> bool:
    """Whether both arms' most likely token is the same. Ties go to the entry listed first (the
    lists come best first, so that is the first entry's id)."""
    p_ids, lp, _ = parse_tops([p_top], "p_top")
    q_ids, lq, _ = parse_tops([q_top], "q_top")
    return bool(top1(p_ids, lp)[0] == top1(q_ids, lq)[0])


def document_drift(
    base_positions: Sequence[TopList], cand_positions: Sequence[TopList], *, forced: Forced | None = None
) -> DocDrift:
    """One document's KLD sum, top-1 agreements and position count: the per-document numerator
    and denominator of the mean per-token KLD (``ratio_budget_test``) and of top-1 agreement."""
    klds, same = _compare(base_positions, cand_positions, forced=forced)
    return DocDrift(float(klds.sum()), int(same.sum()), int(klds.size))


def _finite(name: str, values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] is not finite: {x[i]!r}")
    return x


def perplexity_ratio(ll_base: Sequence[float], ll_cand: Sequence[float], units: Sequence[float]) -> float:
    """The candidate's perplexity over the baseline's on the same documents, > 1 is worse:
    exp((sum ll_base - sum ll_cand) / sum units). Per arm, exp(-sum ll / sum units) is lm-eval's
    ``weighted_perplexity`` (lm_eval/api/metrics.py: exp(-weighted_mean) of (loglik, count)
    pairs), so this is the ratio of the two perplexities lm-eval would report."""
    a, b = _finite("ll_base", ll_base), _finite("ll_cand", ll_cand)
    u = _finite("units", units)
    if not (a.shape == b.shape == u.shape) or a.size == 0:
        raise ValueError(
            f"ll_base, ll_cand and units must be non-empty, of equal length: {a.size}, {b.size}, {u.size}"
        )
    if (u < 0).any() or u.sum() <= 0:
        raise ValueError("units must be >= 0 with a positive sum")
    return math.exp((float(a.sum()) - float(b.sum())) / float(u.sum()))


def kld_quantiles(values: Sequence[float], qs: Sequence[float] = (0.5, 0.9, 0.99, 0.999)) -> dict[str, float]:
    """Quantiles of per-token KLDs for the report, keyed "p50", "p90", "p99", "p99.9" (linear
    interpolation, numpy's default): a mean can hide a few positions where the candidate is
    badly off. With no values every quantile is NaN."""
    v = _finite("values", values)
    for q in qs:
        prob("qs", q, open_low=False, open_high=False)
    keys = [f"p{100 * q:g}" for q in qs]
    if v.size == 0:
        return dict.fromkeys(keys, math.nan)
    return {key: float(val) for key, val in zip(keys, np.quantile(v, list(qs)), strict=True)}
