"""Decode-path drift: where an FP8 KV cache is read back, and by position, because its failures grow
with output length; and past the first parting, because a broken candidate's text parts early.

Two sources of decode-path positions (``store.drift_records``): llama.cpp's forced positions (its
token-id grammar generates the reference one step at a time), and the greedy generations the drift
suite adds (SGLang, vLLM; llama.cpp with ``decode_tokens`` set). A greedy pair is compared position
by position on the shared prefix of the two generations, up to and including the first position
where they part: until then both arms have the same context. Positions are bucketed as the field's
reports grew (0-63, 64-255, 256-1023, 1024+), and every bucket is gated: a fault confined to the
middle is named there.

After the parting the arms condition on different text, so the generations are compared as texts
(docs/statistics.md, "Past the first parting"):

- ``cross``: the candidate's whole text read by the baseline against the baseline's own text read
  by the baseline, per document the difference in mean logprob per token (0 where the texts are
  the same). Garbage after any parting costs what it is worth wherever it starts, so parting early
  buys nothing; two-sided, because a text far more likely to the baseline than its own greedy text
  is a degenerate one (a loop), not a better one.
- ``length``: generated tokens, paired per document (a one-token answer is never "identical").
- ``consistency`` (prefill engines): each arm's own text re-read on its prefill path against what
  its decode steps said; the candidate's excess over the baseline's, with the first position where
  they split (the prefill/decode split at position 97 of sglang#25790 and vllm#54035).
- ``parted``: how many documents part and where, beside the A/A repeat's when there is one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from evalgate import stats
from evalgate.gate._drift_budget import DriftBudget
from evalgate.gate._drift_row import DriftRow, agree_row
from evalgate.store.drift_records import Greedy, greedy_of, own_read, reads_of, text_digest
from evalgate.store.records import Pair

__all__ = [
    "BUCKETS",
    "MIN_DIFFERING",
    "MIN_DOCS",
    "bucket_rows",
    "bucket_sums",
    "greedy_klds",
    "greedy_rows",
    "parting_text",
    "span_label",
]

BUCKETS = (0, 64, 256, 1024)
"""First generated-token position of each bucket; the last runs to the end."""
MIN_DOCS = 30
"""Documents a gated drift row needs before its upper bound may show it within budget (fewer:
UNDERPOWERED): with the all-differing bound at alpha / 2, the smallest n at which a lognormal
sigma 0.75 or gamma shape 0.5 per-document KLD gives false "within budget" rates consistent with
0.05; at 3-20 documents 0.06-0.10 (docs/measurements.md, "the fewest documents that may be powered")."""
MIN_DIFFERING = 4
"""Differing documents (the rest bit-identical) a row needs before it may be powered: from one to
three the bound is their own largest ratio and misses its level (gamma: 0.11-0.38); from 4 on,
at most 0.042 at n = 12 and 0.021 at n = 50 (docs/measurements.md)."""
ONSET_DOCS = 10
"""Documents a position's mean must average over before it may name where the arms split (the
onset is a description beside a row's verdict, not a bound, so it does not wait for ``MIN_DOCS``)."""
Row = Callable[..., DriftRow]
"""``gate/_drift.py``'s ``_budget_row`` with the suite, pair, budget and level bound."""


def span_label(i: int) -> str:
    """Bucket ``i`` as a reader names it: 0-63, 64-255, 256-1023, 1024+."""
    start = BUCKETS[i]
    return f"{start}+" if i == len(BUCKETS) - 1 else f"{start}-{BUCKETS[i + 1] - 1}"


def greedy_klds(b: Greedy, c: Greedy) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(KL per compared position, top-1 agreement per position, the first parting position or
    None): the positions of the shared prefix of the two generations and the one where they part."""
    n = min(len(b.ids), len(c.ids))
    part = next((i for i in range(n) if b.ids[i] != c.ids[i]), None)
    if part is None and len(b.ids) != len(c.ids):
        part = n  # one generation stopped where the other goes on: they part there
    shared = n if part is None else min(part, n)
    forced = [(b.ids[i], b.lp[i], c.lp[i]) for i in range(shared)]
    kls, same = [], []
    if shared:
        klds, agree = stats.position_drift(b.top[:shared], c.top[:shared], forced=forced)
        kls, same = [klds], [agree]
    if part is not None and part < n:
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
        f"{at[0]} (earliest), {median} (median): past it the texts are compared whole (cross, length)"
    )


def greedy_rows(
    suite: str, pair_name: str, row: Row, pairs: Sequence[Pair], budget: DriftBudget | None
) -> tuple[list[DriftRow], list[list[float]]]:
    """The rows read from both arms' greedy generations, and the shared-prefix KL per document
    (for the quantiles). Every pair holds a generation on both arms (``check_pair``)."""
    greedy = [(greedy_of(p.baseline), greedy_of(p.candidate)) for p in pairs]
    compared = [greedy_klds(b, c) for b, c in greedy]  # type: ignore[arg-type]
    docs = [k for k, _, _ in compared]
    keep = [i for i, d in enumerate(docs) if d.size]
    test = "paired bootstrap over documents, on each pair's shared greedy prefix and first parting"
    out = [
        row("kld", "tokens", [math.fsum(docs[i]) for i in keep], [float(docs[i].size) for i in keep],
            budget and budget.kld, path="decode", how=test)
    ]  # fmt: skip
    same, total = sum(int(s.sum()) for _, s, _ in compared), sum(int(d.size) for d in docs)
    out.append(agree_row(suite, pair_name, len(keep), total, same, "decode", "on the shared greedy prefix"))
    share, where = parting_text([part for _, _, part in compared])
    out.append(
        DriftRow(suite, "parted", pair_name, "documents", len(greedy), len(greedy), share,
                 p_value=1.0, reason=where, path="decode", test="greedy generations compared token by token")
    )  # fmt: skip
    out += bucket_rows(row, [docs[i] for i in keep], budget, "decode", first=out[0])
    out.append(_cross_row(row, pairs, greedy, budget))  # type: ignore[arg-type]
    back = _back_row(row, pairs, greedy)  # type: ignore[arg-type]
    out += [back] if back is not None else []
    out.append(_length_row(row, greedy, budget))  # type: ignore[arg-type]
    if pairs and all(p.baseline.response.get("path") == "prefill" for p in pairs):
        out.append(_consistency_row(row, pairs, greedy, budget))  # type: ignore[arg-type]
    return out, [[float(v) for v in d] for d in docs]


def bucket_rows(
    row: Row, docs: Sequence[np.ndarray], budget: DriftBudget | None, path: str, first: DriftRow | None = None
) -> list[DriftRow]:
    """Per position bucket, the KL row over the documents that reach it, every one gated (one that
    too few documents reach is UNDERPOWERED, ``MIN_DOCS``). ``onset`` names the first bucket shown
    above the budget (``first``, the whole row, when there is one bucket)."""
    buckets = bucket_sums(docs)
    limit = budget.kld if budget is not None else None
    if len(buckets) < 2:  # one bucket is the whole row again: no rows, but it says where
        if (
            first is not None
            and buckets
            and limit is not None
            and first.lower is not None
            and first.lower > limit
        ):
            first.onset = span_label(buckets[0][0])
        return []
    out = [
        row("kld", "tokens", sums, counts, limit, path=path, span=span_label(i))
        for i, sums, counts in buckets
    ]  # fmt: skip
    onset = next((r.span for r in out if limit is not None and r.lower is not None and r.lower > limit), "")
    for r in [*out, *([first] if first is not None else [])]:
        r.onset = onset
    return out


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _cross_row(
    row: Row, pairs: Sequence[Pair], greedy: Sequence[tuple[Greedy, Greedy]], budget: DriftBudget | None
) -> DriftRow:
    """Per document: the baseline's mean logprob per token of its own text minus of the candidate's
    (0 where they are the same text); ``check_pair`` made sure the baseline read both."""
    diffs, tokens = [], 0
    for p, (b, c) in zip(pairs, greedy, strict=True):
        tokens += len(c.ids)
        if b.ids == c.ids:
            diffs.append(0.0)
            continue
        own, theirs = own_read(p.baseline), reads_of(p.baseline)[text_digest(c.ids)]
        diffs.append(_mean(own.lp) - _mean(theirs.lp))  # type: ignore[union-attr]
    limit = math.log1p(budget.ppl_margin) if budget is not None else None
    r = row("cross", "tokens", diffs, [1.0] * len(diffs), limit, path="decode", two_sided=True,
            how="paired bootstrap over documents of each text's mean logprob per token, read by the baseline")  # fmt: skip
    r.units = tokens
    return r


def _back_row(row: Row, pairs: Sequence[Pair], greedy: Sequence[tuple[Greedy, Greedy]]) -> DriftRow | None:
    """The other direction, shown: per document the candidate's mean logprob per token of its own
    text minus of the baseline's, read by the candidate; None where a read is missing (the
    candidate's read of the baseline's text is not required, only the baseline's of the candidate's)."""
    diffs, tokens = [], 0
    for p, (b, c) in zip(pairs, greedy, strict=True):
        tokens += len(b.ids)
        if b.ids == c.ids:
            diffs.append(0.0)
            continue
        own, theirs = own_read(p.candidate), reads_of(p.candidate).get(text_digest(b.ids))
        if own is None or theirs is None:
            return None
        diffs.append(_mean(own.lp) - _mean(theirs.lp))
    if not diffs:
        return None
    r = row("cross_back", "tokens", diffs, [1.0] * len(diffs), None, path="decode", shown_only=True,
            how="paired bootstrap over documents of each text's mean logprob per token, read by the candidate")  # fmt: skip
    r.units = tokens
    return r


def _length_row(row: Row, greedy: Sequence[tuple[Greedy, Greedy]], budget: DriftBudget | None) -> DriftRow:
    """Generated tokens, the candidate's against the baseline's, relative, paired per document."""
    diffs = [float(len(c.ids) - len(b.ids)) for b, c in greedy]
    base = [float(max(1, len(b.ids))) for b, _ in greedy]
    limit = budget.length if budget is not None else None
    return row("length", "tokens", diffs, base, limit, path="decode", two_sided=True,
               how="paired bootstrap over documents of the generated tokens")  # fmt: skip


def _gaps(read_top: Sequence[Sequence[tuple[int, float]]], g: Greedy, stop: bool) -> np.ndarray:
    """Per position of an arm's own text: KL(its prefill read || its decode step), the stop
    token's position left out where it was read by a decode step (``"stop"``)."""
    n = len(g.ids) - (1 if stop else 0)
    return stats.position_klds(read_top[:n], g.top[:n]) if n > 0 else np.zeros(0)


def _consistency_row(
    row: Row, pairs: Sequence[Pair], greedy: Sequence[tuple[Greedy, Greedy]], budget: DriftBudget | None
) -> DriftRow:
    """Per document: the candidate's mean decode-against-prefill KL on its own text minus the
    baseline's; ``onset`` names the first position where the candidate's excess passes the
    budget and stays above it on average (averaged over the documents that reach each position)."""
    excess, by_arm = [], []
    for p, (b, c) in zip(pairs, greedy, strict=True):
        gaps = []
        for record, g in ((p.baseline, b), (p.candidate, c)):
            read = own_read(record)
            stop = bool(
                next(
                    (r.get("stop") for r in record.response["reads"] if r["of"] == text_digest(g.ids)), False
                )
            )
            gaps.append(_gaps(read.top or [], g, stop))  # type: ignore[union-attr]
        by_arm.append(gaps)
        excess.append(
            float(np.mean(gaps[1]) if gaps[1].size else 0.0)
            - float(np.mean(gaps[0]) if gaps[0].size else 0.0)
        )
    limit = budget.kld if budget is not None else None
    r = row("consistency", "tokens", excess, [1.0] * len(excess), limit, path="decode",
            how="paired bootstrap over documents of each arm's decode-against-prefill KL on its own text")  # fmt: skip
    r.units = sum(int(g[1].size) for g in by_arm)
    if limit is not None:
        r.onset = _split_at(by_arm, limit)
    return r


def _split_at(by_arm: Sequence[Sequence[np.ndarray]], limit: float) -> str:
    """The first position where the candidate's mean gap exceeds the baseline's by more than
    ``limit`` and the excess from there on averages above it too ("" if none)."""
    longest = max((len(g[1]) for g in by_arm), default=0)
    excess = []
    for i in range(longest):
        c = [float(g[1][i]) for g in by_arm if len(g[1]) > i]
        b = [float(g[0][i]) for g in by_arm if len(g[0]) > i]
        excess.append(_mean(c) - (_mean(b) if b else 0.0) if len(c) >= ONSET_DOCS else math.nan)
    for i, e in enumerate(excess):
        later = [v for v in excess[i:] if not math.isnan(v)]
        if not math.isnan(e) and e > limit and _mean(later) > limit:
            return f"position {i}"
    return ""
