"""Decode-path drift: where an FP8 KV cache is read back, and by position, because its failures grow
with output length.

Two sources of decode-path positions (``store.drift_records``): llama.cpp's forced positions (its
token-id grammar generates the reference one step at a time), and the greedy generation the drift
suite adds where the forced path is prefill (SGLang, vLLM). A greedy pair is compared on the shared
prefix of the two generations, up to and including the first position where they part: until then
both arms have the same context, so their next-token distributions are comparable; after it they
are not. The parting itself is shown (how many documents part, and where).

Positions are bucketed as the issue's reports grew (0-63, 64-255, 256-1023, 1024+): a candidate
that is fine early and decays late is caught by the latest bucket that enough documents reach,
gated on its own as the long-context suite gates its longest length, and the first bucket whose
lower bound clears the budget names where the drift starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evalgate import stats
from evalgate.store.drift_records import Greedy

__all__ = ["BUCKETS", "MIN_LATE_DOCS", "bucket_sums", "greedy_klds", "parting_text", "span_label"]

BUCKETS = (0, 64, 256, 1024)
"""First generated-token position of each bucket; the last runs to the end."""
MIN_LATE_DOCS = 5
"""Documents that must reach a later bucket for it to be gated on its own."""


def span_label(i: int) -> str:
    """Bucket ``i`` as a reader names it: 0-63, 64-255, 256-1023, 1024+."""
    start = BUCKETS[i]
    return f"{start}+" if i == len(BUCKETS) - 1 else f"{start}-{BUCKETS[i + 1] - 1}"


def greedy_klds(b: Greedy, c: Greedy) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(KL per compared position, top-1 agreement per position, the first parting position or
    None): the positions of the shared prefix of the two generations and the one where they part."""
    n = min(len(b.ids), len(c.ids))
    part = next((i for i in range(n) if b.ids[i] != c.ids[i]), None)
    shared = n if part is None else part
    forced = [(b.ids[i], b.lp[i], c.lp[i]) for i in range(shared)]
    kls, same = [], []
    if shared:
        klds, agree = stats.position_drift(b.top[:shared], c.top[:shared], forced=forced)
        kls, same = [klds], [agree]
    if part is not None:
        kls.append(stats.position_klds(b.top[part : part + 1], c.top[part : part + 1]))
        same.append(np.zeros(1, dtype=bool))
    if not kls:
        return np.zeros(0), np.zeros(0, dtype=bool), part
    return np.concatenate(kls), np.concatenate(same), part


def bucket_sums(kls: Sequence[np.ndarray]) -> list[tuple[int, list[float], list[float]]]:
    """Per bucket that any document reaches: (bucket, KL sum per reaching document, positions per
    reaching document), the numerator and denominator of that bucket's ratio test."""
    out = []
    for i in range(len(BUCKETS)):
        end = BUCKETS[i + 1] if i + 1 < len(BUCKETS) else None
        sums, counts = [], []
        for doc in kls:
            part = doc[BUCKETS[i] : end]
            if part.size:
                sums.append(math.fsum(float(v) for v in part))
                counts.append(float(part.size))
        if sums:
            out.append((i, sums, counts))
    return out


def parting_text(parts: Sequence[int | None]) -> tuple[float, str]:
    """(share of documents whose greedy generations part, a line saying where)."""
    at = sorted(p for p in parts if p is not None)
    share = len(at) / len(parts) if parts else 0.0
    if not at:
        return share, f"no document's greedy generations part ({len(parts)} documents)"
    median = at[len(at) // 2]
    return share, (
        f"{len(at)} of {len(parts)} documents' greedy generations part; first parting at position "
        f"{at[0]} (earliest), {median} (median): positions after it are not compared"
    )
