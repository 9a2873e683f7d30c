"""Corpus perplexity from per-document log-likelihoods, the way lm-eval aggregates them.

lm-eval's ``loglikelihood_rolling`` tasks (wikitext) log, per document, ``(loglik, count)``
pairs and aggregate a corpus, not a mean of per-document ratios (lm_eval/api/metrics.py):
``weighted_perplexity(items) = exp(-weighted_mean(items))`` for ``word_perplexity`` and
``byte_perplexity``, and ``bits_per_byte(items) = -weighted_mean(items) / log(2)``, where
``weighted_mean`` is ``sum(loglik) / sum(count)``. Recomputing the same numbers from the
records lets a report put evalgate's value beside lm-eval's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["rolling_aggregates"]


def rolling_aggregates(records: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """lm-eval's corpus aggregates of per-document ``{"loglik", "words", "bytes"}`` metrics (a
    record's ``metrics``; nats, counts): ``word_perplexity = exp(-sum loglik / sum words)``,
    ``byte_perplexity = exp(-sum loglik / sum bytes)``, ``bits_per_byte = -sum loglik / sum bytes
    / ln 2``. A unit some document lacks is left out of the answer; no documents give ``{}``.
    The sums are exact (``math.fsum``): lm-eval's left-to-right ``sum`` differs by rounding only."""
    rows = list(records)
    if not rows:
        return {}
    loglik = math.fsum(float(r["loglik"]) for r in rows)
    out: dict[str, float] = {}
    if all("words" in r for r in rows):
        out["word_perplexity"] = math.exp(-loglik / math.fsum(float(r["words"]) for r in rows))
    if all("bytes" in r for r in rows):
        per_byte = -loglik / math.fsum(float(r["bytes"]) for r in rows)
        out["byte_perplexity"] = math.exp(per_byte)
        out["bits_per_byte"] = per_byte / math.log(2)
    return out
