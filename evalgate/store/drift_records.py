"""A live drift record's response, checked where it is read and taken apart into what the rows use.

The drift rows are only as honest as the lists they are computed from: a record whose ``top`` is
missing, short or malformed must stop the run (a dropped row turns a BLOCK into a PASS), so every
line of a drift suite's items file is checked as it is loaded (``response_problem``, called by the
run folder's reader with the file and line) and again when the pairs are judged (``check_pair``).

Layout (suite version 2, ``suites/drift.py``): ``{"path", "ids", "lp", "top", "decode"}``; version 1
records hold ``top`` alone and are read as a forced path of unknown kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalgate.store.records import Pair, Record

__all__ = [
    "MAX_TOKEN_ID",
    "Forced",
    "Greedy",
    "check_pair",
    "forced_of",
    "greedy_of",
    "record_check",
    "response_problem",
]

MAX_TOKEN_ID = 2**31 - 1
"""Token ids are vocabulary indices: anything larger is not one (and loses its identity in float64)."""
PATHS = ("prefill", "decode")
FINISH = ("stop", "length")
TOLERANCE = 1e-3
"""How far a token's logprob and its own list entry may differ (float32 softmax over two calls)."""
LOGPROB_LOW = -1e4
"""A logprob below this is not a measured value (float32 log-softmax bottoms out near -104; servers
write -inf as -9999)."""


@dataclass(frozen=True)
class Forced:
    """One arm's teacher-forced positions of one document."""

    path: str
    """prefill, decode, or "" (a version 1 record: not recorded)."""
    ids: list[int] | None
    lp: list[float] | None
    top: list[list[tuple[int, float]]]


@dataclass(frozen=True)
class Greedy:
    """One arm's greedy generation of one document, read on the decode path."""

    ids: list[int]
    lp: list[float]
    top: list[list[tuple[int, float]]]
    finish: str


def record_check(suite: Any) -> Callable[[Record], str | None] | None:
    """The check every record of ``suite`` (a Suite, or a manifest's suite entry: anything with a
    ``metric_kind``) must pass as it is read: ``response_problem`` for a drift suite, else none."""
    return response_problem if suite.metric_kind == "drift" else None


def response_problem(record: Record) -> str | None:
    """Why a live drift record (one that counts ``tokens``) cannot be compared, or None. A failed
    item (``error``) and an imported perplexity record (words, bytes) have no lists to check."""
    if record.error is not None or "tokens" not in record.metrics:
        return None
    r = record.response
    if not isinstance(r, Mapping):
        return f"response is {type(r).__name__}, not the drift suite's object with per-position lists"
    n = record.metrics["tokens"]
    why = _positions(r.get("top"), "top", n)
    if why is None and r.get("path") is not None and r.get("path") not in PATHS:
        why = f"path {r.get('path')!r} is not one of {', '.join(PATHS)}"
    for key, check in (("ids", _ids), ("lp", _logprobs)):
        if why is None and key in r:
            why = check(r[key], key, n)
    if why is None and "ids" in r and "lp" in r:
        why = _forced_listed(r["ids"], r["lp"], r["top"], "")
    if why is None and "lp" in r and isinstance(record.metrics.get("loglik"), float):
        total, loglik = math.fsum(r["lp"]), record.metrics["loglik"]
        if not abs(total - loglik) <= 1e-6 * max(1.0, abs(loglik)) + 1e-6:
            why = f"loglik {loglik!r} is not the sum of the positions' logprobs ({total!r})"
    if why is None and "decode" in r:
        why = _greedy(r["decode"])
    return why


def _forced_listed(ids: list[int], lps: list[float], top: list[list[Any]], key: str) -> str | None:
    """Each forced (or generated) token's logprob is one distribution with its position's list:
    its own entry's value where listed, else no higher than the last entry."""
    for i, (t, lp, pos) in enumerate(zip(ids, lps, top, strict=True)):
        listed = {pair[0]: pair[1] for pair in pos}
        if t in listed and abs(listed[t] - lp) > TOLERANCE:
            return f"{key}lp[{i}] = {lp!r} but token {t} is listed at {listed[t]!r} (not one distribution)"
        if t not in listed and lp > min(listed.values()) + TOLERANCE:
            return f"{key}lp[{i}] = {lp!r}: token {t} is not listed, yet more likely than a listed token"
    return None


def _count(n: Any) -> int | None:
    return int(n) if isinstance(n, (int, float)) and math.isfinite(n) and n == int(n) and n >= 0 else None


def _positions(top: Any, key: str, n: Any) -> str | None:
    if top is None:
        return f"no {key!r} lists (the per-position distributions the KL is computed from)"
    if not isinstance(top, list):
        return f"{key!r} is {type(top).__name__}, not a list of positions"
    want = _count(n)
    if want is not None and len(top) != want:
        return f"{key!r} holds {len(top)} positions where the record counts {want}"
    width = None
    for i, pos in enumerate(top):
        if not isinstance(pos, list) or not pos:
            return (
                f"{key}[{i}] is {'empty' if pos == [] else type(pos).__name__}, not a list of [id, logprob]"
            )
        if width is None:
            width = len(pos)
        elif len(pos) != width:
            return f"{key}[{i}] lists {len(pos)} alternatives where position 0 lists {width} (a short list)"
        seen: set[int] = set()
        for j, pair in enumerate(pos):
            what = f"{key}[{i}][{j}]"
            if not isinstance(pair, list) or len(pair) != 2:
                return f"{what} is {pair!r}, not [token id, logprob]"
            why = _id(pair[0], what) or _logprob(pair[1], what)
            if why:
                return why
            if pair[0] in seen:
                return f"{what}: token {pair[0]} is listed twice at one position"
            seen.add(pair[0])
    return None


def _id(value: Any, what: str) -> str | None:
    whole = isinstance(value, int) or (
        isinstance(value, float) and math.isfinite(value) and value == int(value)
    )
    if isinstance(value, bool) or not whole or not 0 <= value <= MAX_TOKEN_ID:
        return f"{what}: token id {value!r} is not a whole number from 0 to {MAX_TOKEN_ID}"
    return None


def _logprob(value: Any, what: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{what}: logprob {value!r} is not a number"
    if not (math.isfinite(value) and LOGPROB_LOW <= value <= 1e-6):
        return f"{what}: logprob {value!r} is not a finite value from {LOGPROB_LOW:g} to 0"
    return None


def _ids(ids: Any, key: str, n: Any) -> str | None:
    if not isinstance(ids, list) or (_count(n) is not None and len(ids) != _count(n)):
        return f"{key!r} is not a list of {n!r} token ids"
    return next((w for i, t in enumerate(ids) if (w := _id(t, f"{key}[{i}]"))), None)


def _logprobs(lps: Any, key: str, n: Any) -> str | None:
    if not isinstance(lps, list) or (_count(n) is not None and len(lps) != _count(n)):
        return f"{key!r} is not a list of {n!r} logprobs (the forced token's at each position)"
    return next((w for i, v in enumerate(lps) if (w := _logprob(v, f"{key}[{i}]"))), None)


def _greedy(decode: Any) -> str | None:
    if not isinstance(decode, Mapping):
        return f"'decode' is {type(decode).__name__}, not the greedy generation's object"
    ids = decode.get("ids")
    if not isinstance(ids, list):
        return "'decode' has no list of generated token ids"
    return (
        _ids(ids, "decode.ids", len(ids))
        or _logprobs(decode.get("lp"), "decode.lp", len(ids))
        or (_positions(decode.get("top"), "decode.top", len(ids)) if ids else None)
        or (_forced_listed(ids, decode["lp"], decode["top"], "decode.") if ids else None)
        or (
            None
            if decode.get("finish") in FINISH
            else f"decode.finish {decode.get('finish')!r} is not stop or length"
        )
    )


def _pairs(top: Sequence[Sequence[Any]]) -> list[list[tuple[int, float]]]:
    return [[(int(t), float(lp)) for t, lp in pos] for pos in top]


def forced_of(record: Record) -> Forced:
    """The forced positions of a record ``response_problem`` accepted."""
    r = record.response
    return Forced(str(r.get("path") or ""), r.get("ids"), r.get("lp"), _pairs(r["top"]))


def greedy_of(record: Record) -> Greedy | None:
    """The greedy generation of a record ``response_problem`` accepted, or None when it has none."""
    d = record.response.get("decode") if isinstance(record.response, Mapping) else None
    if d is None:
        return None
    return Greedy(list(d["ids"]), list(d["lp"]), _pairs(d.get("top") or []), str(d["finish"]))


def check_pair(suite: str, p: Pair) -> str | None:
    """Why one pair of live drift records cannot be compared (an ERROR row), or None: either
    record malformed, the arms' forced lists of different lengths or paths, forced ids that differ,
    or a greedy generation on one arm only."""
    for arm, r in (("baseline", p.baseline), ("candidate", p.candidate)):
        why = response_problem(r)
        if why is None and "tokens" in r.metrics and not isinstance(r.response, Mapping):
            why = "no response"
        if why:
            return f"{suite}/{p.item_id}: the {arm}'s record: {why}"
    if "tokens" not in p.baseline.metrics:
        return None
    b, c = forced_of(p.baseline), forced_of(p.candidate)
    if len(b.top) != len(c.top):
        return f"{suite}/{p.item_id}: the arms recorded {len(b.top)} and {len(c.top)} positions"
    if b.path != c.path:
        return f"{suite}/{p.item_id}: the arms' forced positions came from different paths ({b.path!r}, {c.path!r})"
    if b.ids is not None and c.ids is not None and b.ids != c.ids:
        return f"{suite}/{p.item_id}: the arms forced different tokens"
    if (greedy_of(p.baseline) is None) != (greedy_of(p.candidate) is None):
        return f"{suite}/{p.item_id}: only one arm decoded the document greedily (the decode path)"
    return None
