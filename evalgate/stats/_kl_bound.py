"""A lower bound on KL(P || Q) at one position from the two arms' top-k lists, by token identity.

What the lists say, each being its server's true top-k (best first, exactly k): a token P lists
has its p known, a token P does not list has p <= p_min (P's smallest listed probability); the
same for Q. A forced token's logprob, where given, is known on both arms even outside a list.
The vocabulary is coarsened into one bucket per token known on both sides (S), one bucket A for
the tokens known only on P's side, one B for those known only on Q's side, and one rest R:

    P(A) = pA known,  Q(A) = a in [0, min(|A| q_min, c)],   c = 1 - qS - qB = Q(A) + Q(R)
    Q(B) = qB known,  P(B) = b in [0, min(|B| p_min, d)],   d = 1 - pS - pA = P(B) + P(R)

KL on a coarsening is at most the true KL (data processing) for the true (a, b), so the minimum
over that box of

    F(a, b) = sum_S p log(p / q) + pA log(pA / a) + b log(b / qB) + (d - b) log((d - b) / (c - a))

is a lower bound. F is jointly convex; its free minimum matches the ratios (P / Q the same on A,
B and R), which is the older single-remainder bound (the tokens in both lists plus one rest):
that value was blind to ids, so a candidate that kept each probability but renamed every
alternative scored 0. The box is where a renamed alternative costs: Q cannot hide P's listed
mass pA among tokens it ranks below its own k-th. The minimum is exact, not iterated: with the
lower bounds never binding, it is one of four points (free; a at its cap with b's best reply;
b at its cap with a's best reply; both at their caps), each evaluated, the least taken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["LOGPROB_FLOOR", "REMAINDER_FLOOR", "identity_klds", "parse_forced", "parse_tops", "top1"]

REMAINDER_FLOOR = 1e-6
"""Q's mass outside the tokens it lists (c) below this is not measured: it is 1 - (a sum of up
to ~20 probabilities that servers compute in float32), whose rounding is about 20 * 2**-24 =
1.2e-6, so a rest of 0 (or a little below 0, clamped) where P has 0.3 there says only "at most
~1e-6". Flooring c there (never above P's own mass outside Q's known tokens) only widens the box
and lowers the minimum, so the value stays a lower bound whenever the true mass is under the
floor."""
LOGPROB_FLOOR = math.log(float(np.finfo(np.float32).tiny))
"""A shared token's candidate logprob below log(float32's smallest normal), about -87.3, is not
measured either: llama.cpp reports a probability that underflowed as -inf or as the lowest float
(-3.4e38), which would make one position's KLD 1e38. Floored likewise (never above P's logprob),
and Q's cap on a token it does not list is never below exp(LOGPROB_FLOOR)."""
_TINY = math.exp(LOGPROB_FLOOR)


def _as_float(value: object, where: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {value!r}") from None


def parse_tops(positions: Sequence[Sequence[Sequence[float]]], name: str) -> tuple[np.ndarray, ...]:
    """(ids, logprobs, valid) arrays of shape (positions, k), ragged lists padded with invalid
    entries (id -1, logprob -inf). Refuses an empty list, a NaN or +inf logprob, a non-integer id
    and an id listed twice at one position, naming the position."""
    try:
        arr = np.asarray(positions, dtype=float)
        ok = arr.ndim == 3 and arr.shape[2] == 2 and arr.shape[1] > 0
    except (TypeError, ValueError):  # ragged: pad below
        ok = False
    if ok:
        ids, lps = arr[:, :, 0], arr[:, :, 1]
        valid = np.ones(ids.shape, dtype=bool)
    else:
        k = max((len(top) for top in positions), default=0)
        ids = np.full((len(positions), k), -1.0)
        lps = np.full((len(positions), k), -np.inf)
        valid = np.zeros((len(positions), k), dtype=bool)
        for i, top in enumerate(positions):
            if len(top) == 0:
                raise ValueError(f"{name}[{i}]: empty top list (no distribution to compare)")
            for j, pair in enumerate(top):
                if len(pair) != 2:
                    raise ValueError(f"{name}[{i}][{j}]: expected (token id, logprob), got {pair!r}")
                ids[i, j] = _as_float(pair[0], f"{name}[{i}][{j}] token id")
                lps[i, j] = _as_float(pair[1], f"{name}[{i}][{j}] logprob")
                valid[i, j] = True
    bad = np.isnan(lps) | (lps == np.inf) | (valid & ((ids != np.round(ids)) | (ids < 0)))
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}[{i}][{j}]: the token id must be a non-negative integer and the logprob not NaN "
            f"or +inf, got ({ids[i, j]!r}, {lps[i, j]!r})"
        )
    ordered = np.sort(np.where(valid, ids, -1 - np.arange(ids.shape[1])), axis=1)
    dup = (np.diff(ordered, axis=1) == 0).any(axis=1)
    if dup.any():
        raise ValueError(f"{name}[{int(np.argmax(dup))}]: a token id is listed twice")
    return ids, lps, valid


def parse_forced(forced: Sequence[Sequence[float]], n: int) -> np.ndarray:
    """(positions, 3): per position the forced token id, the baseline's and the candidate's
    logprob of it. Refuses another length, a non-integer id and a NaN or +inf logprob."""
    try:
        arr = np.asarray(forced, dtype=float)
    except (TypeError, ValueError):
        arr = np.zeros(0)
    if arr.shape != (n, 3) and not (n == 0 and arr.size == 0):
        raise ValueError(
            f"forced: expected (token id, baseline logprob, candidate logprob) at each of {n} positions, "
            f"got shape {arr.shape}"
        )
    arr = arr.reshape(n, 3)
    ids, lps = arr[:, 0], arr[:, 1:]
    bad = (ids != np.round(ids)) | (ids < 0) | np.isnan(lps).any(axis=1) | (lps == np.inf).any(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"forced[{i}]: the token id must be a non-negative integer and the logprobs not NaN or +inf, "
            f"got {tuple(arr[i])!r}"
        )
    return arr


def top1(ids: np.ndarray, lps: np.ndarray) -> np.ndarray:
    return np.take_along_axis(ids, np.argmax(lps, axis=1)[:, None], axis=1)[:, 0]


def identity_klds(
    p: tuple[np.ndarray, np.ndarray, np.ndarray],
    q: tuple[np.ndarray, np.ndarray, np.ndarray],
    forced: np.ndarray | None = None,
) -> np.ndarray:
    """The bound of the module docstring at every position; ``p``/``q`` as ``parse_tops`` gives
    them, ``forced`` as ``parse_forced`` does (its token joins S)."""
    (p_ids, lp, p_ok), (q_ids, lq, q_ok) = p, q
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p_min = np.exp(np.where(p_ok, lp, np.inf).min(axis=1))
        q_min = np.exp(np.where(q_ok, lq, np.inf).min(axis=1))
        if forced is not None:  # one more column per arm, valid where the list lacks the token
            f = forced[:, 0:1]
            p_ids, q_ids = np.hstack([p_ids, f]), np.hstack([q_ids, f])
            p_ok = np.hstack([p_ok, ~((p_ids[:, :-1] == f) & p_ok).any(axis=1, keepdims=True)])
            q_ok = np.hstack([q_ok, ~((q_ids[:, :-1] == f) & q_ok).any(axis=1, keepdims=True)])
            lp, lq = np.hstack([lp, forced[:, 1:2]]), np.hstack([lq, forced[:, 2:3]])
        match = (p_ids[:, :, None] == q_ids[:, None, :]) & p_ok[:, :, None] & q_ok[:, None, :]
        shared = match.any(axis=2)
        lq_at = np.take_along_axis(lq, match.argmax(axis=2), axis=1)
        p_all = np.where(p_ok, np.exp(lp), 0.0)
        p_s = np.where(shared, p_all, 0.0)
        q_s = np.where(shared, np.exp(lq_at), 0.0)
        lq_eff = np.maximum(lq_at, np.minimum(lp, LOGPROB_FLOOR))
        s_terms = np.where(shared & (p_s > 0), p_s * (lp - lq_eff), 0.0).sum(axis=1)
        only_p = p_ok & ~shared
        only_q = q_ok & ~match.any(axis=1)
        p_a = np.where(only_p, p_all, 0.0).sum(axis=1)
        q_b = np.where(only_q, np.exp(lq), 0.0).sum(axis=1)
        # both sides sum S in P's order: equal inputs give equal sums, so c == d exactly
        d = np.maximum(0.0, 1.0 - p_s.sum(axis=1) - p_a)
        c = np.maximum(0.0, 1.0 - q_s.sum(axis=1) - q_b)
        c = np.maximum(c, np.minimum(p_a + d, REMAINDER_FLOOR))
        n_a, n_b = only_p.sum(axis=1), only_q.sum(axis=1)
        cap_a = np.minimum(np.maximum(n_a * q_min, n_a * _TINY), c)
        cap_b = np.minimum(n_b * p_min, d)
    return np.maximum(0.0, s_terms + _box_min(p_a, q_b, c, d, cap_a, cap_b))


def _box_min(
    p_a: np.ndarray, q_b: np.ndarray, c: np.ndarray, d: np.ndarray, cap_a: np.ndarray, cap_b: np.ndarray
) -> np.ndarray:
    """min over a in [0, cap_a], b in [0, cap_b] of F(a, b) - sum_S, per position. Where pA > 0
    (qB > 0), F falls without bound as a (b) nears 0, so only the caps can bind: the minimum is
    at the free optimum, at one cap with the other coordinate's best reply, or at both caps."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rest_p, rest_q = p_a + d, q_b + c
        a_free = np.where(p_a > 0, p_a * rest_q / rest_p, 0.0)
        b_free = np.where((q_b > 0) & (rest_p > 0), q_b * rest_p / rest_q, 0.0)
        b_reply = np.where(q_b > 0, q_b * d / (c - cap_a + q_b), 0.0)  # best b given a = cap_a
        a_reply = np.where(p_a > 0, p_a * c / (p_a + d - cap_b), 0.0)  # best a given b = cap_b
        a = np.clip(np.stack([a_free, cap_a, a_reply, cap_a]), 0.0, cap_a)
        b = np.clip(np.stack([b_free, b_reply, cap_b, cap_b]), 0.0, cap_b)
        rp, rq = d - b, c - a  # >= 0: b <= cap_b <= d, a <= cap_a <= c
        f = (
            np.where(p_a > 0, p_a * (np.log(p_a) - np.log(a)), 0.0)
            + np.where(b > 0, b * (np.log(b) - np.log(q_b)), 0.0)
            + np.where((rp > 0) & (rp != rq), rp * (np.log(rp) - np.log(rq)), 0.0)
        )
    return np.where(np.isnan(f), np.inf, f).min(axis=0)
