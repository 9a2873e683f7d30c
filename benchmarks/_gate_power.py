"""Power at the printed MDE through the whole gate (#29), for ``sim_gate.py``.

The MDE is the one a no-change run prints (its row's ``mde``, from that run's own measured noise),
and the change of exactly that size is then drawn two ways: on top of the server's noise (the
noise flips stay, the regression adds one-way flips: the model ``stats.mde`` states) and
replacing noise flips (the old, favourable shape: discordance max(f, d)). Binary rows run the
gate's rule vectorised over six suites with the agreement gate on, under each policy, and report
the target row's rejection beside the whole gate's BLOCK rate; the first replicates go through
``evalgate.gate.decide``, which must agree on the printed MDE, the p-values and the verdict.
Graded rows (an F1-like value, six suites) and ``--repeats 4`` rows (per-item means of four
sampled 0/1 outcomes, common seeds) are tested with the gate's own sign-flip signs, at the level
``decide`` gives their row; their power is that row's own test at that level (Holm's first
step), a lower bound on its power in the family.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import numpy as np
from scipy import stats as st

from evalgate import stats
from evalgate.gate import GatePolicy, decide
from evalgate.gate._rows import MIN_DIFFERING, RESAMPLES
from evalgate.store.records import Pair, Record

ALPHA = 0.05
SIZES = (200, 300, 1172, 1319, 2376, 14042)
NOISES = (0.01, 0.03, 0.05)
POLICIES = {
    "difference": GatePolicy(),
    "regression": GatePolicy(policy="regression"),
    "non-inferiority": GatePolicy(policy="non-inferiority", margin="2pt"),
}


def _midp(n10: np.ndarray, n01: np.ndarray, two_sided: bool) -> np.ndarray:
    nd = n10 + n01
    if two_sided:
        k = np.minimum(n10, n01)
        p = np.where(n10 == n01, 1.0, 2 * st.binom.cdf(k, nd, 0.5) - st.binom.pmf(k, nd, 0.5))
    else:
        p = st.binom.sf(n10, nd, 0.5) + 0.5 * st.binom.pmf(n10, nd, 0.5)
    return np.where(nd == 0, 1.0, np.clip(p, 0.0, 1.0))


def _budget(count: np.ndarray, n: int, budget: float = 0.05) -> np.ndarray:
    return np.where(count == 0, 1.0, np.minimum(1.0, st.binom.sf(count - 1, n, budget)))


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each row of ``p`` (replicates x tests), vectorised (sim_gate.py too)."""
    m = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * np.take_along_axis(p, order, axis=1), axis=1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.minimum(stepped, 1.0), axis=1)
    return out


def _holm_reject(p: np.ndarray) -> np.ndarray:
    return holm(p) < ALPHA


@functools.cache
def _printed(n: int, nd: int, level: float, alternative: str) -> float:
    return min(1.0, stats.mde(n, nd / n, alpha=level, alternative=alternative))  # type: ignore[arg-type]


def _rec(arm: str, suite: str, i: int, metric: str, value: float) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite=suite, suite_version=1, item_id=str(i), repeat=0,
        prompt_hash="h", target=None, response=None, extracted=None, metrics={metric: float(value)},
    )  # fmt: skip


def _pairs(suite: str, base: np.ndarray, cand: np.ndarray, metric: str = "acc") -> list[Pair]:
    return [
        Pair(str(i), 0, _rec("baseline", suite, i, metric, b), _rec("candidate", suite, i, metric, c))
        for i, (b, c) in enumerate(zip(base, cand, strict=True))
    ]


def _binary_pairs(suite: str, c: np.ndarray) -> list[Pair]:
    cells = ((1, 1), (1, 0), (0, 1), (0, 0))
    values = np.array([v for v, k in zip(cells, c, strict=True) for _ in range(int(k))], dtype=float)
    return _pairs(suite, values[:, 0], values[:, 1])


def _draw(rng: np.random.Generator, n: int, f: float, d: np.ndarray, shape: str) -> np.ndarray:
    """(reps, 4) cells n11, n10, n01, n00 at accuracy 0.6 with a regression d per replicate."""
    if shape == "on top":
        p10, p01 = f / 2 + d, np.full_like(d, f / 2)
    else:
        psi = np.maximum(f, d)
        p10, p01 = (psi + d) / 2, (psi - d) / 2
    same = np.clip(1 - p10 - p01, 0, 1)
    probs = np.column_stack([0.6 * same, p10, p01, 0.4 * same])
    return rng.multinomial(n, probs / probs.sum(axis=1, keepdims=True))


def binary_power(
    rng: np.random.Generator, reps: int, n_check: int, policy_name: str, f: float, shape: str
) -> list[tuple[int, float, float, float]]:
    """Per target suite: (n, mean printed MDE, the target row's rejection, the gate's BLOCK)."""
    policy = POLICIES[policy_name]
    ni, reg = policy.policy == "non-inferiority", policy.policy == "regression"
    alternative = "two-sided" if policy.policy == "difference" else "less"
    level = ALPHA if ni else ALPHA / (2 * len(SIZES))
    zero = np.zeros(reps)
    out = []
    for t, n_t in enumerate(SIZES):
        quiet = _draw(rng, n_t, f, zero, shape)  # the no-change run whose row prints the MDE
        d = np.array([_printed(n_t, int(a + b), level, alternative) for a, b in quiet[:, 1:3]])
        draws = [_draw(rng, n, f, d if i == t else zero, shape) for i, n in enumerate(SIZES)]
        counted = [c[:, 1] if reg else c[:, 1] + c[:, 2] for c in draws]
        agree = np.column_stack([_budget(x, n) for x, n in zip(counted, SIZES, strict=True)])
        if ni:
            z = st.norm.ppf(1 - ALPHA)
            rows = np.column_stack(
                [
                    ~(stats.tango_score(-0.02, c[:, 1], c[:, 2], n) > z)
                    for c, n in zip(draws, SIZES, strict=True)
                ]
            )
            block = rows.any(axis=1) | _holm_reject(agree).any(axis=1)
            row = rows[:, t]
        else:
            ps = np.column_stack([_midp(c[:, 1], c[:, 2], not reg) for c in draws])
            rejected = _holm_reject(np.column_stack([ps, agree]))
            block, row = rejected.any(axis=1), rejected[:, t]
        for j in range(min(n_check, reps)):
            per_suite = {
                f"s{n}": (["acc"], _binary_pairs(f"s{n}", c[j])) for c, n in zip(draws, SIZES, strict=True)
            }
            v = decide(per_suite, policy=policy)
            q = decide({f"s{n_t}": (["acc"], _binary_pairs(f"s{n_t}", quiet[j]))}, policy=policy)
            target = next(r for r in v.suites if r.suite == f"s{n_t}")
            printed = stats.mde(n_t, q.suites[0].flips, alpha=level, alternative=alternative)  # type: ignore[arg-type]
            if (
                (v.verdict == "BLOCK") != block[j]
                or target.mde_alpha != level
                or abs(min(1, printed) - d[j]) > 1e-12
            ):
                sys.exit(
                    f"{policy_name} {shape} n={n_t} replicate {j}: decide says {v.verdict}, the rule {block[j]}"
                )
        out.append((n_t, float(d.mean()), float(row.mean()), float(block.mean())))
    return out


# ----------------------------------------------------------------------------- graded and --repeats


@functools.cache
def _signs(n: int, suite: str, metric: str) -> list[np.ndarray]:
    """The very sign chunks ``stats.sign_flip_test`` draws for this suite and metric."""
    rng = np.random.default_rng(stats.stable_seed("sign-flip", suite, metric))
    size = max(1, 4_000_000 // n)
    chunks = [min(size, RESAMPLES - i) for i in range(0, RESAMPLES, size)]
    return [(rng.integers(0, 2, size=(k, n)) * 2 - 1).astype(np.int8) for k in chunks]


def sign_flip_p(d: np.ndarray, suite: str, metric: str, two_sided: bool) -> np.ndarray:
    """The gate's sign-flip p of every replicate (rows of ``d``), its own seeded signs."""
    n = d.shape[1]
    stat = d.mean(axis=1)
    tol = 1e-9 * np.maximum(1.0, np.abs(d).mean(axis=1))
    hits = np.zeros(d.shape[0])
    dt = d.T
    for s in _signs(n, suite, metric):
        perm = (s.astype(float) @ dt) / n
        hits += (
            (np.abs(perm) >= np.abs(stat) - tol).sum(axis=0)
            if two_sided
            else (perm <= stat + tol).sum(axis=0)
        )
    return (hits + 1) / (RESAMPLES + 1)


def _graded_mde(d: np.ndarray, level: float, alternative: str) -> np.ndarray:
    """The row's MDE as the gate prints it: the whole range (not estimable) when fewer than
    MIN_DIFFERING items differ, else ``stats.mde_mean`` on the differences' root mean square."""
    rms = np.sqrt((d * d).mean(axis=1))
    n = d.shape[1]
    few = (d != 0).sum(axis=1) < MIN_DIFFERING
    return np.where(few, 1.0, _mde_of(rms, n, level, alternative))


def _mde_of(rms: np.ndarray, n: int, level: float, alternative: str) -> np.ndarray:
    return np.array(
        [min(1.0, stats.mde_mean(n, float(s), span=1.0, alpha=level, alternative=alternative)) for s in rms]
    )  # type: ignore[arg-type]


Drawer = Callable[[np.random.Generator, int, int, float, np.ndarray, str], tuple[np.ndarray, np.ndarray]]


def graded_draw(
    rng: np.random.Generator, reps: int, n: int, f: float, d: np.ndarray, shape: str
) -> tuple[np.ndarray, np.ndarray]:
    """F1-like values Beta(2, 1); a share f of items redrawn on the candidate (the noise); a loss
    d on top: ``concentrated`` sets a share d / mean of items to 0, ``spread`` takes d off every item."""
    base = rng.beta(2, 1, (reps, n))
    cand = np.where(rng.random((reps, n)) < f, rng.beta(2, 1, (reps, n)), base)
    if shape == "concentrated":
        cand = np.where(rng.random((reps, n)) < (d / (2 / 3))[:, None], 0.0, cand)
    else:
        cand = cand - d[:, None]
    return base, cand


def repeats_draw(
    rng: np.random.Generator, reps: int, n: int, f: float, d: np.ndarray, shape: str, k: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """Per-item means of k sampled 0/1 outcomes, item accuracy Beta(1.2, 0.8) (mean 0.6), common
    seeds: the candidate's outcome redrawn for a share of item-repeats so that f of them differ;
    a loss d on top: ``concentrated`` makes a share d / 0.6 of items always wrong, ``spread``
    turns each right outcome wrong with probability d / 0.6."""
    p = rng.beta(1.2, 0.8, (reps, n, 1))
    x = rng.random((reps, n, k)) < p
    redraw = rng.random((reps, n, k)) < f / 0.32  # E[2 p (1 - p)] = 0.32 under Beta(1.2, 0.8)
    y = np.where(redraw, rng.random((reps, n, k)) < p, x)
    q = (d / 0.6)[:, None, None]
    if shape == "concentrated":
        y = y & ~(rng.random((reps, n, 1)) < q)
    else:
        y = y & ~(rng.random((reps, n, k)) < q)
    return x.mean(axis=2), y.mean(axis=2)


def sign_flip_power(
    rng: np.random.Generator, reps: int, n: int, f: float, shape: str, draw: Drawer, level: float
) -> tuple[float, float]:
    """(mean printed MDE, the row's rejection at ``level``) at a loss of the printed MDE."""
    base, cand = draw(rng, reps, n, f, np.zeros(reps), shape)
    d = _graded_mde(cand - base, level, "two-sided")
    base, cand = draw(rng, reps, n, f, d, shape)
    p = sign_flip_p(cand - base, "s", "f1", two_sided=True)
    return float(d.mean()), float((p < level).mean())


def graded_check(rng: np.random.Generator, draw: Drawer, n: int = 200) -> float:
    """The level ``decide`` tests a graded row of six suites at, and its MDE and p on one draw."""
    per_suite, first = {}, None
    for i in range(len(SIZES)):
        base, cand = draw(rng, 1, n, 0.3, np.zeros(1), "spread")
        per_suite[f"s{i}" if i else "s"] = (["f1"], _pairs(f"s{i}" if i else "s", base[0], cand[0], "f1"))
        first = first if first is not None else (base, cand)
    v = decide(per_suite, policy=GatePolicy(), kinds=dict.fromkeys(per_suite, "continuous"))
    row = next(r for r in v.suites if r.suite == "s")
    base, cand = first  # type: ignore[misc]
    want = float(_graded_mde(cand - base, row.mde_alpha, "two-sided")[0])  # type: ignore[arg-type]
    p = float(sign_flip_p(cand - base, "s", "f1", two_sided=True)[0])
    if abs(row.mde - want) > 1e-12 or abs(row.p_value - p) > 1e-9:
        sys.exit(f"graded: decide's row (MDE {row.mde}, p {row.p_value}) differs from the rule ({want}, {p})")
    return float(row.mde_alpha)  # type: ignore[arg-type]


def repeats_level(rng: np.random.Generator, n: int = 100, k: int = 4) -> float:
    """The level ``decide`` tests a --repeats row of six suites at (their sampled agreement rows
    are gated too), and that its MDE is the rule's."""
    per_suite, sampled, first = {}, {}, None
    for i in range(len(SIZES)):
        suite = f"s{i}" if i else "s"
        p = rng.beta(1.2, 0.8, (n, 1))
        x, y = rng.random((n, k)) < p, rng.random((n, k)) < p
        sampled[suite] = [
            Pair(str(j), r, _rec("baseline", suite, j, "f1", x[j, r]), _rec("candidate", suite, j, "f1", y[j, r]))
            for j in range(n) for r in range(k)
        ]  # fmt: skip
        per_suite[suite] = (["f1"], _pairs(suite, x.mean(axis=1), y.mean(axis=1), "f1"))
        first = first if first is not None else (x.mean(axis=1), y.mean(axis=1))
    v = decide(per_suite, policy=GatePolicy(), kinds=dict.fromkeys(per_suite, "continuous"), sampled=sampled)
    row = next(r for r in v.suites if r.suite == "s")
    base, cand = first  # type: ignore[misc]
    want = float(_graded_mde((cand - base)[None, :], row.mde_alpha, "two-sided")[0])  # type: ignore[arg-type]
    if abs(row.mde - want) > 1e-12:
        sys.exit(f"--repeats: decide's MDE {row.mde} differs from the rule's {want}")
    return float(row.mde_alpha)  # type: ignore[arg-type]
