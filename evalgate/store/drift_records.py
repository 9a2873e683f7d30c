"""A live drift record's response, checked where it is read and taken apart into what the rows use.

The drift rows are only as honest as the lists they are computed from: a record whose ``top`` is
missing, short or malformed must stop the run (a dropped row turns a BLOCK into a PASS), so every
line of a drift suite's items file is checked as it is loaded (``response_problem``, called by the
run folder's reader with the file and line) and again when the pairs are judged (``check_pair``).

Layout (suite version 3, ``suites/drift.py``): ``{"path", "ids", "lp", "top", "decode", "reads"}``;
version 2 records lack ``reads``, version 1 records hold ``top`` alone and are read as a forced path
of unknown kind. ``reads`` are the arm's teacher-forced reads of greedy texts (its own on a prefill
engine, the other arm's where the two generations part), each named by the digest of the text's
token ids (``text_digest``); ``needed_texts`` says which a record still lacks, for the loop that
reads them and for the gate that refuses a pair without them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalgate.store.records import Pair, Record

if TYPE_CHECKING:
    from evalgate.store.manifest import SuiteInfo

__all__ = [
    "MAX_TOKEN_ID",
    "Forced",
    "Greedy",
    "Read",
    "check_pair",
    "forced_of",
    "greedy_of",
    "needed_texts",
    "own_read",
    "reads_of",
    "record_check",
    "response_problem",
    "text_digest",
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
class Read:
    """One arm's teacher-forced read of a greedy text after the document's question: each token's
    logprob, and (for the arm's own text) its top-k at each position."""

    lp: list[float]
    top: list[list[tuple[int, float]]] | None


@dataclass(frozen=True)
class Greedy:
    """One arm's greedy generation of one document, read on the decode path."""

    ids: list[int]
    lp: list[float]
    top: list[list[tuple[int, float]]]
    finish: str


def record_check(suite: SuiteInfo) -> Callable[[Record], str | None] | None:
    """The check every record of ``suite`` (the manifest's entry) must pass as it is read:
    ``response_problem`` for a drift suite, holding it to the greedy generations its plan promised;
    else none."""
    if suite.metric_kind != "drift":
        return None
    return functools.partial(
        response_problem, decode_tokens=suite.decode_tokens, everywhere=suite.decode_everywhere
    )


def response_problem(record: Record, *, decode_tokens: int = 0, everywhere: bool = False) -> str | None:
    """Why a live drift record (one that counts ``tokens``) cannot be compared, or None. A failed
    item (``error``) and an imported perplexity record (words, bytes) have no lists to check.
    ``decode_tokens``: the greedy steps per document the plan asked for, on a prefill-path record
    (``everywhere``: on every record); a record without its generation is refused, so stripping
    ``decode`` from a run folder cannot remove the rows it feeds."""
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
    if why is None and decode_tokens and "decode" not in r and (everywhere or r.get("path") == "prefill"):
        why = (
            f"the plan asked for {decode_tokens} greedy tokens per document (the manifest), but the "
            "record holds no greedy generation ('decode')"
        )
    if why is None and "reads" in r:
        why = _reads(r["reads"])
    return why


def _reads(reads: Any) -> str | None:
    if not isinstance(reads, list):
        return f"'reads' is {type(reads).__name__}, not a list of reads"
    seen: set[str] = set()
    for i, read in enumerate(reads):
        what = f"reads[{i}]"
        if not isinstance(read, Mapping) or not isinstance(read.get("of"), str) or len(read["of"]) != 16:
            return f"{what} is not a read ({{'of': a 16-character text digest, 'lp': [...]}})"
        if read["of"] in seen:
            return f"{what} reads text {read['of']} a second time"
        seen.add(read["of"])
        lps = read.get("lp")
        why = _logprobs(lps, f"{what}.lp", len(lps) if isinstance(lps, list) else None)
        if why is None and not lps:
            why = f"{what}.lp is empty (a read of no tokens)"
        if why is None and read.get("top") is not None:
            why = _positions(read["top"], f"{what}.top", len(lps))
        if why:
            return why
    return None


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


def text_digest(ids: Sequence[int]) -> str:
    """The name a read gives the text it read: a digest of its token ids."""
    return hashlib.sha256(json.dumps([int(t) for t in ids]).encode()).hexdigest()[:16]


def reads_of(record: Record) -> dict[str, Read]:
    """The reads a record ``response_problem`` accepted, by the digest of the text each read."""
    reads = record.response.get("reads") if isinstance(record.response, Mapping) else None
    return {
        str(r["of"]): Read(
            [float(v) for v in r["lp"]], _pairs(r["top"]) if r.get("top") is not None else None
        )
        for r in reads or []
    }


def own_read(record: Record) -> Read | None:
    """The arm's read of its own greedy text, or None where it has none: on the decode path the
    generation's own logprobs (forcing the same tokens would decode them again), on the prefill
    path the read the suite made right after generating."""
    g = greedy_of(record)
    if g is None:
        return None
    if forced_of(record).path == "decode":
        return Read(g.lp, g.top)
    return reads_of(record).get(text_digest(g.ids))


def needed_texts(own: Record, partners: Iterable[Record]) -> list[tuple[list[int], bool]]:
    """The greedy texts the arm of ``own`` must still read, each once, with whether it ended at a
    stop token: its own on the prefill path (the within-arm row), and each partner's where it
    differs from its own (the cross row). ``partners``: the other arms' records of the document
    that this arm reads."""
    g = greedy_of(own) if own.error is None else None
    if g is None:
        return []
    texts = [g] if forced_of(own).path == "prefill" else []
    for p in partners:
        theirs = greedy_of(p) if p.error is None else None
        if theirs is not None and theirs.ids != g.ids:
            texts.append(theirs)
    seen, out = set(reads_of(own)), []
    for t in texts:
        if t.ids and (d := text_digest(t.ids)) not in seen:
            seen.add(d)
            out.append((list(t.ids), t.finish == "stop"))
    return out


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
    gb, gc = greedy_of(p.baseline), greedy_of(p.candidate)
    if (gb is None) != (gc is None):
        return f"{suite}/{p.item_id}: only one arm decoded the document greedily (the decode path)"
    if gb is None or gc is None:
        for arm, r in (("baseline", p.baseline), ("candidate", p.candidate)):
            if reads_of(r):  # reads are only made of a greedy text: its generation was removed
                return (
                    f"{suite}/{p.item_id}: the {arm}'s record holds reads of greedy texts but no greedy "
                    "generation ('decode'): the record was altered; run the drift suite again"
                )
        return None
    return _reads_problem(suite, p, gb, gc)


def _reads_problem(suite: str, p: Pair, gb: Greedy, gc: Greedy) -> str | None:
    """The reads the rows need: the baseline's of the candidate's text where they differ, and on
    the prefill path each arm's of its own (with its top-k), each as long as the text it read."""
    fix = " (a read that failed is read again by evalgate compare --resume)"
    prefill = forced_of(p.baseline).path == "prefill"
    needs = [("baseline", p.baseline, gb, True), ("candidate", p.candidate, gc, True)] if prefill else []
    if gb.ids != gc.ids:
        needs.append(("baseline", p.baseline, gc, False))
    for arm, record, text, own in needs:
        read = reads_of(record).get(text_digest(text.ids))
        whose = "its own greedy text" if own else "the other arm's greedy text"
        if read is None:
            return f"{suite}/{p.item_id}: the {arm}'s record holds no read of {whose}{fix}"
        if len(read.lp) != len(text.ids) or (own and (read.top is None or len(read.top) != len(text.ids))):
            return (
                f"{suite}/{p.item_id}: the {arm}'s read of {whose} does not cover its {len(text.ids)} tokens"
            )
    return None
