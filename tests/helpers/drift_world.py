"""A toy language model world that writes drift suite version 3 records the way a server would.

Why a world and not hand-made lists: the drift gate's blind spots (issue #53) live after the two
arms' greedy generations part, where what each arm conditions on depends on what it wrote. Lists
made position by position cannot say what the baseline thinks of the candidate's text; a model
can. So each "server" here is a model of the next token given the prefix, greedy decoding runs it
step by step, and every read (the forced reference text, an arm's own text, the other arm's text)
is a teacher-forced pass of the same model, as ``suites/drift.py`` asks of a real server.

The model: logits at position t after token ``prev`` are ``scale * (P[t] + M[prev]) / sqrt(2)``,
``P`` a seeded per-document table and ``M`` a seeded bigram table (vocabulary 64, token 0 the stop
token). The candidate is the baseline plus a ``Fault``. Everything is a deterministic function of
the seeds, so a test's verdict is the same on every machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from evalgate.store.records import Pair, Record

__all__ = ["STOP", "VOCAB", "Fault", "K", "World", "greedy", "read", "records", "reference", "text_digest"]

VOCAB = 64
STOP = 0
K = 20
"""Alternatives listed per position (the suite's default ``top_k``)."""
CHUNK = 64
PROMPT_TOKENS = 40
Path = Literal["prefill", "decode"]

try:  # the gate's own digest where it exists (issue #53's fix), else the same function
    from evalgate.store.drift_records import text_digest  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - today's tree

    def text_digest(ids: Sequence[int]) -> str:
        """The name a read gives the text it read: a digest of its token ids."""
        return hashlib.sha256(json.dumps([int(t) for t in ids]).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fault:
    """What the candidate does differently. Every part applies on the fault's ``where`` only:
    ``decode`` is a KV-cache fault (generation reads the cache back; a prefill pass does not),
    ``both`` a numerics change every pass sees. On a decode engine every pass is decode."""

    kl: float | Callable[[np.ndarray], np.ndarray] = 0.0
    """KL(baseline || candidate) per position in nats, or a function of the positions giving it
    (second order: the perturbation is scaled by each position's variance of its direction)."""
    span: tuple[int, int] = (0, 1 << 30)
    """Positions [a, b) the ``kl`` applies to."""
    shape: Literal["noise", "temper"] = "noise"
    """noise: a seeded random direction, which flips near-ties (greedy texts part); temper: the
    logits scaled, order kept (no parting: what test_drift_decode's "sharpen" does)."""
    flip_at: tuple[int, ...] = ()
    """Positions where the candidate swaps its top two tokens (legal where the world plants a tie)."""
    flip_docs: frozenset[int] | None = None
    """Documents whose flips apply (None: every one the fault touches)."""
    garbage: bool = False
    """After its first flip, on its own text and the decode path only (what its generation does
    once it went the other way; a reference that happens to take the same turn reads clean): the
    baseline's logits negated, garbage it is sure of."""
    stop_after: int | None = None
    """The server ends every generation after this many tokens, finish "stop" (a stop-rule bug)."""
    where: Literal["decode", "both"] = "decode"
    docs: frozenset[int] | None = None
    """Documents the fault touches (their index); None: all."""
    seed: int = 1
    """The noise direction's seed: another seed is another replicate of a non-deterministic server."""


@dataclass(frozen=True)
class World:
    seed: int = 0
    scale: float = 3.0
    """Logit spread: top-1 probabilities mostly 0.5-0.95, the top two about a nat apart, some near-ties."""
    ties: tuple[int, ...] = ()
    """Positions where the baseline's top two are planted ``tie_gap`` apart in every document."""
    tie_gap: float = 0.002
    length: tuple[int, int] | None = None
    """Each document's natural length range (the stop token wins from there); None: never stops."""
    path_noise: float = 0.0
    """Logit noise the prefill pass adds on both arms (its kernels differ from decode's)."""
    fault: Fault | None = None
    """The candidate's; None: an A/A world."""


@functools.lru_cache(maxsize=4096)
def _chunk(key: tuple[int, ...], c: int) -> np.ndarray:
    return np.random.default_rng([*key, c]).standard_normal((CHUNK, VOCAB))


@functools.lru_cache(maxsize=64)
def _bigram(seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 2]).standard_normal((VOCAB, VOCAB))


def _table(key: tuple[int, ...], ts: np.ndarray) -> np.ndarray:
    """Rows ``ts`` of an endless seeded table (made 64 rows at a time, so any length reads the same)."""
    return np.stack([_chunk(key, int(t) // CHUNK)[int(t) % CHUNK] for t in ts])


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _swap_top2(x: np.ndarray, rows: np.ndarray) -> None:
    for r in np.flatnonzero(rows):
        a, b = np.argsort(-x[r], kind="stable")[:2]
        x[r, a], x[r, b] = x[r, b], x[r, a]


def _logprobs(
    w: World, arm: str, doc: tuple[int, int], text: Sequence[int], ts: Sequence[int], path: Path
) -> np.ndarray:
    """(len(ts), VOCAB) next-token logprobs at positions ``ts`` given ``text[:t]`` (t <= len(text))."""
    t = np.asarray(ts, dtype=int)
    first = int(_table((w.seed, *doc, 1), np.zeros(1))[0, 0] * 1e6) % (VOCAB - 1) + 1  # the question's end
    prev = np.array([text[i - 1] if i else first for i in t], dtype=int)
    x = w.scale * (_table((w.seed, *doc, 0), t) + _bigram(w.seed)[prev]) / math.sqrt(2)
    if path == "prefill" and w.path_noise:
        x += w.path_noise * _table((w.seed, *doc, 3), t)
    if w.length is None:
        x[:, STOP] = x.min(axis=1) - 1.0
    else:  # the stop token's logit climbs past the best at the document's length
        lo, hi = w.length
        end = lo + int(_table((w.seed, *doc, 4), np.zeros(1))[0, 0] * 1e6) % max(1, hi - lo)
        others = np.delete(x, STOP, axis=1)
        x[:, STOP] = np.maximum(others.max(axis=1) + 0.5 * (t - end), others.min(axis=1))
    for i in np.flatnonzero(np.isin(t, w.ties)):  # a planted near-tie
        a, b = np.argsort(-x[i], kind="stable")[:2]
        x[i, b] = x[i, a] - w.tie_gap
    f = w.fault
    if arm == "baseline" or f is None or (f.docs is not None and doc[1] not in f.docs):
        return _log_softmax(x)
    if f.where == "decode" and path == "prefill":  # a KV-cache fault: the prefill pass is exact
        return _log_softmax(x)
    kl = np.where((t >= f.span[0]) & (t < f.span[1]), f.kl(t) if callable(f.kl) else f.kl, 0.0)
    if (kl > 0).any():
        z = x - x.mean(axis=1, keepdims=True) if f.shape == "temper" else _table((w.seed, *doc, 5, f.seed), t)
        p = np.exp(_log_softmax(x))
        var = (p * (z - (p * z).sum(axis=1, keepdims=True)) ** 2).sum(axis=1)
        x = x + np.minimum(np.sqrt(2 * kl / np.maximum(var, 1e-12)), 3.0)[:, None] * z
    if f.flip_docs is None or doc[1] in f.flip_docs:
        _swap_top2(x, np.isin(t, f.flip_at))
    p0 = min(f.flip_at, default=0)
    bad = (t > p0) & (f.garbage and path == "decode" and bool(f.flip_at))
    if bad.any() and list(text[: p0 + 1]) == _flipped_prefix(w, doc, p0):
        keep = x[:, STOP].copy()
        x[bad] = -x[bad]
        x[:, STOP] = np.where(bad, x.min(axis=1) - 1.0, keep)
    return _log_softmax(x)


@functools.lru_cache(maxsize=1024)
def _flipped_prefix(w: World, doc: tuple[int, int], p: int) -> list[int]:
    """The candidate's own first ``p + 1`` greedy tokens: its garbage starts only after them."""
    return list(greedy(w, "candidate", doc, p + 1, honour_stop=False)["ids"])


def _top(lp: np.ndarray) -> list[list[Any]]:
    order = np.argsort(-lp, kind="stable")[:K]
    return [[int(i), float(lp[i])] for i in order]


def greedy(
    w: World, arm: str, doc: tuple[int, int], max_tokens: int, *, honour_stop: bool = True
) -> dict[str, Any]:
    """The arm's greedy generation on the decode path: ``decode`` as the record stores it."""
    ids: list[int] = []
    lps: list[float] = []
    tops: list[list[Any]] = []
    f = w.fault if arm == "candidate" else None
    stop_after = f.stop_after if f is not None and (f.docs is None or doc[1] in f.docs) else None
    for t in range(max_tokens):
        lp = _logprobs(w, arm, doc, ids, [t], "decode")[0]
        tok = int(np.argmax(lp))
        ids.append(tok)
        lps.append(float(lp[tok]))
        tops.append(_top(lp))
        if honour_stop and (tok == STOP or len(ids) == stop_after):
            return {"ids": ids, "lp": lps, "top": tops, "finish": "stop"}
    return {"ids": ids, "lp": lps, "top": tops, "finish": "length"}


def read(
    w: World,
    arm: str,
    doc: tuple[int, int],
    text: Sequence[int],
    path: Path,
    *,
    stop: bool = False,
    top: bool = True,
) -> dict[str, Any]:
    """The arm's teacher-forced read of ``text`` after the question, as ``suites/drift.py``'s
    ``_read`` makes it: a text that ended at a stop has its last token read from a one-token greedy
    (decode) step, at its listed logprob or, unlisted, the lowest listed one (an upper bound)."""
    ids = list(text)
    forced = ids[:-1] if stop else ids
    rows = _logprobs(w, arm, doc, ids, range(len(forced)), path) if forced else np.zeros((0, VOCAB))
    lps = [float(rows[i, tok]) for i, tok in enumerate(forced)]
    tops = [_top(r) for r in rows] if top else []
    if stop:
        last = _top(_logprobs(w, arm, doc, ids, [len(forced)], "decode")[0])
        listed = dict((a, b) for a, b in last)
        lps.append(float(listed.get(ids[-1], min(listed.values()))))
        tops.append(last)
    out: dict[str, Any] = {"of": text_digest(ids), "lp": lps, "stop": stop}
    if top:
        out["top"] = tops
    return out


def reference(w: World, doc: tuple[int, int], n: int) -> list[int]:
    """The document's reference solution: sampled from the baseline (a text the model finds
    typical, as a human solution is; a uniform one would make any sharpening a perplexity change)."""
    rng, ids = np.random.default_rng([w.seed, *doc, 9]), []
    for t in range(n):
        p = np.exp(_logprobs(w, "baseline", doc, ids, [t], "prefill")[0])
        p[STOP] = 0.0
        ids.append(int(rng.choice(VOCAB, p=p / p.sum())))
    return ids


def _record(
    arm: str, item: str, response: dict[str, Any], forced: int, sent: str, decoded: int | None
) -> Record:
    tokens = {"prompt": PROMPT_TOKENS, "scored": forced} | ({} if decoded is None else {"decoded": decoded})
    return Record(
        run_id="r", arm=arm, variant=arm, suite="drift", suite_version=3, item_id=item, repeat=0,
        prompt_hash=f"p-{item}", target=None, response=response, extracted=None,
        metrics={"loglik": math.fsum(response["lp"]), "tokens": float(forced)}, tokens=tokens,
        extra={"sent_hash": sent, "prompt_tokens": PROMPT_TOKENS + forced},
    )  # fmt: skip


def records(
    w: World,
    n_docs: int,
    *,
    path: Path = "prefill",
    decode_tokens: int = 64,
    forced_tokens: int = 16,
    seed: int = 0,
) -> list[Pair]:
    """``n_docs`` paired drift records (baseline, candidate) of documents ``seed``: the forced
    reference text on ``path``, the greedy generation (``decode_tokens``; 0: none) and the reads a
    version 3 run holds: on a prefill engine each arm's read of its own text, and of the other's
    where the two differ; on a decode engine the cross reads only (``decode.lp`` is the own read)."""
    pairs = []
    for d in range(n_docs):
        doc, item = (seed, d), f"train/{d:05d}"
        ref = reference(w, doc, forced_tokens)
        sent = hashlib.sha256(json.dumps([seed, d, *ref]).encode()).hexdigest()[:16]
        gens = (
            {arm: greedy(w, arm, doc, decode_tokens) for arm in ("baseline", "candidate")}
            if decode_tokens
            else {}
        )
        arms = {}
        for arm, other in (("baseline", "candidate"), ("candidate", "baseline")):
            forced = read(w, arm, doc, ref, path)
            response: dict[str, Any] = {"path": path, "ids": ref, "lp": forced["lp"], "top": forced["top"]}
            if gens:
                own, theirs = gens[arm], gens[other]
                reads = (
                    [read(w, arm, doc, own["ids"], path, stop=own["finish"] == "stop")]
                    if path == "prefill"
                    else []
                )
                if theirs["ids"] != own["ids"]:
                    reads.append(
                        read(w, arm, doc, theirs["ids"], path, stop=theirs["finish"] == "stop", top=False)
                    )
                response |= {"decode": own, "reads": reads}
            arms[arm] = _record(
                arm, item, response, forced_tokens, sent, len(gens[arm]["ids"]) if gens else None
            )
        pairs.append(Pair(item, 0, arms["baseline"], arms["candidate"]))
    return pairs
