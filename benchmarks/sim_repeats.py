"""Sampled runs (--repeats k), simulated: the per-item-mean test's false BLOCK and power, and the
sampled agreement row's false BLOCK.

Items have heterogeneous chances of being right, p_i ~ Beta(0.7, 0.5) (mean 0.58: some items
always right, some never, many in between, as a reasoning model sampled at temperature 0.7 looks).
Repeat r of item i draws one uniform u per arm; with common seeds the arms share it on a fraction
``--coupling`` of the (item, repeat) pairs (llama.cpp shared 85 % of its sampled answers between
two launches of one model in the A/A run in docs/measurements.md) and draw their own on the rest. An arm is
right when u < p_i (baseline) or u < p'_i (candidate).

- H0 (the candidate is the baseline): p'_i = p_i. The gate's primary row at k = 1 is McNemar's
  mid-p on the 0/1 outcomes; at k > 1 the sign-flip test of the per-item means with the gate's
  own seeded sign matrix (the very one ``decide`` draws for suite "s", metric "acc"), applied to
  every replicate at once. False BLOCK = the row's p < alpha (before Holm, the strictest count).
- Power: a 3 pt drop, every item's chance scaled by 1 - 0.03 / mean(p), on 500 items, at the level
  Holm's first step demands in a suite's family of three (accuracy, agreement, unanswered).
- The sampled agreement row (``stats.sampled_excess_test``, margin 3 pt) under H0, and at its
  boundary: every item's chance moved by sqrt(0.03) (mean excess = the margin).

A few replicates of every scenario are rebuilt as records and run through
``evalgate.gate.decide``; the script stops if a p-value differs, so the numbers are the gate's.

    python benchmarks/sim_repeats.py --seed 0            # about 2 min on one core
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate import stats
from evalgate.gate import GatePolicy, decide
from evalgate.gate.agreement import DEFAULT_AA_MARGIN
from evalgate.gate.repeats import RESAMPLES, item_means
from evalgate.stats._resampling import _chunks
from evalgate.store.records import Pair, Record

ALPHA = 0.05
FAMILY = 3  # a generation suite's tests: accuracy, agreement, unanswered
SUITE, METRIC = "s", "acc"


def draw(
    rng: np.random.Generator, p: np.ndarray, q: np.ndarray, k: int, reps: int, coupling: float
) -> tuple[np.ndarray, np.ndarray]:
    """(reps, items, k) 0/1 outcomes of both arms; ``coupling`` of the pairs share their uniform."""
    shape = (reps, p.size, k)
    u = rng.random(shape)
    v = np.where(rng.random(shape) < coupling, u, rng.random(shape))
    return (u < p[None, :, None]).astype(np.float64), (v < q[None, :, None]).astype(np.float64)


def midp(n10: np.ndarray, n01: np.ndarray) -> np.ndarray:
    """Two-sided McNemar mid-p (Fagerland et al. 2013), as the gate's binary row computes it."""
    nd, k = n10 + n01, np.minimum(n10, n01)
    p = 2 * st.binom.cdf(k, nd, 0.5) - st.binom.pmf(k, nd, 0.5)
    return np.where(nd == 0, 1.0, np.clip(p, 0.0, 1.0))


def signs(n: int) -> np.ndarray:
    """The gate's sign matrix for suite "s", metric "acc" on n items (drawn as sign_flip_test does)."""
    rng = np.random.default_rng(stats.stable_seed("sign-flip", SUITE, METRIC))
    return np.concatenate([rng.integers(0, 2, size=(c, n)) * 2 - 1 for c in _chunks(RESAMPLES, n)]).astype(
        np.float64
    )


def primary_p(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gate's primary-row p-value per replicate: McNemar at k = 1, sign-flip on means above."""
    if x.shape[2] == 1:
        b, c = x[:, :, 0], y[:, :, 0]
        return midp(((b == 1) & (c == 0)).sum(axis=1), ((b == 0) & (c == 1)).sum(axis=1))
    d = y.mean(axis=2) - x.mean(axis=2)  # (reps, items)
    stat = d.mean(axis=1)
    tol = 1e-9 * np.maximum(1.0, np.abs(d).mean(axis=1))
    perm = signs(d.shape[1]) @ d.T / d.shape[1]  # (resamples, reps)
    return (1 + (np.abs(perm) >= np.abs(stat) - tol).sum(axis=0)) / (RESAMPLES + 1)


def _rec(arm: str, i: int, r: int, value: float) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite=SUITE, suite_version=1, item_id=str(i), repeat=r,
        prompt_hash="h", target=None, response=None, extracted=None, metrics={METRIC: float(value)},
    )  # fmt: skip


def check(name: str, x: np.ndarray, y: np.ndarray, primary: np.ndarray, agreement: np.ndarray | None) -> None:
    """Replicate j through ``decide``: its primary p (and the agreement row's) must be ours."""
    for j in range(x.shape[0]):
        k = x.shape[2]
        pairs = [
            Pair(str(i), r, _rec("baseline", i, r, x[j, i, r]), _rec("candidate", i, r, y[j, i, r]))
            for i in range(x.shape[1])
            for r in range(k)
        ]
        if k == 1:
            v = decide({SUITE: ([METRIC], pairs)}, policy=GatePolicy())
        else:
            v = decide(
                {SUITE: ([METRIC], item_means(pairs, [METRIC]))}, policy=GatePolicy(),
                kinds={SUITE: "continuous"}, sampled={SUITE: pairs},
            )  # fmt: skip
        got = v.suites[0].p_value
        if not math.isclose(got, primary[j], rel_tol=1e-9, abs_tol=1e-12):
            sys.exit(
                f"{name}: replicate {j}: decide's primary p {got} differs from the simulation's {primary[j]}"
            )
        if agreement is not None and not math.isclose(v.agreement[0].p_value, agreement[j], rel_tol=1e-9):
            sys.exit(
                f"{name}: replicate {j}: decide's agreement p {v.agreement[0].p_value} vs {agreement[j]}"
            )


def agreement_p(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The sampled agreement row's p per replicate, with the gate's seed (one test per replicate)."""
    seed = stats.stable_seed("sampled-agreement", SUITE, METRIC)
    return np.array([
        stats.sampled_excess_test(x[j], y[j], margin=DEFAULT_AA_MARGIN, n_resamples=RESAMPLES,
                            rng=np.random.default_rng(seed)).pvalue
        for j in range(x.shape[0])
    ])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=1000, help="replicates of the accuracy scenarios")
    ap.add_argument("--agreement-reps", type=int, default=100, help="replicates of the agreement row")
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument(
        "--coupling", type=float, default=0.85, help="share of (item, repeat) draws the arms share"
    )
    ap.add_argument("--check", type=int, default=2, help="replicates per scenario run through decide")
    args = ap.parse_args()
    rng, n, t0 = np.random.default_rng(args.seed), args.items, time.perf_counter()
    p = rng.beta(0.7, 0.5, n)
    drop = p * (1 - 0.03 / p.mean())
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.reps)
    print(
        f"{n} items, p ~ Beta(0.7, 0.5) (mean {p.mean():.3f}); coupling {args.coupling:.0%}; alpha {ALPHA}; "
        f"{args.reps} replicates (Monte Carlo SE at {ALPHA}: {se:.4f}); seed {args.seed}\n"
    )
    print(
        "| k | primary test | false BLOCK at alpha (H0) | power, 3 pt drop, alpha/3 | same, independent samples |"
    )
    print("|---|---|---|---|---|")
    power: dict[tuple[int, float], float] = {}
    for k in (1, 4, 16):
        x, y = draw(rng, p, p, k, args.reps, args.coupling)
        p0 = primary_p(x, y)
        check(f"H0 k={k}", x[: args.check], y[: args.check], p0, None)
        for coupling in (args.coupling, 0.0):
            x1, y1 = draw(rng, p, drop, k, args.reps, coupling)
            p1 = primary_p(x1, y1)
            check(f"drop k={k}", x1[: args.check], y1[: args.check], p1, None)
            power[k, coupling] = float((p1 < ALPHA / FAMILY).mean())
        test = "McNemar mid-p" if k == 1 else "sign-flip, per-item means"
        print(
            f"| {k} | {test} | {float((p0 < ALPHA).mean()):.4f} | {power[k, args.coupling]:.3f} | "
            f"{power[k, 0.0]:.3f} |"
        )
    for coupling in (args.coupling, 0.0):
        a, b = power[4, coupling], power[1, coupling]
        print(f"\npower ratio, 3 pt drop on {n} items, k = 4 against k = 1, coupling {coupling:.0%}: "
              f"{a / max(b, 1e-9):.2f}x ({a:.3f} vs {b:.3f}); k = 16: {power[16, coupling]:.3f}")  # fmt: skip
    reps = args.agreement_reps
    print(
        f"\n| sampled agreement row, margin {DEFAULT_AA_MARGIN:.0%}, {reps} replicates | k | BLOCK rate at alpha |"
    )
    print("|---|---|---|")
    for name, q in (("H0: the candidate is the baseline", p), ("boundary: excess = margin", None)):
        for k in (4, 16):
            cand = (
                q
                if q is not None
                else np.clip(p + np.where(p < 0.5, 1, -1) * math.sqrt(DEFAULT_AA_MARGIN), 0, 1)
            )
            x, y = draw(rng, p, cand, k, reps, args.coupling)
            pa = agreement_p(x, y)
            check(f"agreement {name} k={k}", x[:1], y[:1], primary_p(x[:1], y[:1]), pa[:1])
            print(f"| {name} | {k} | {float((pa < ALPHA).mean()):.4f} |")
    print(f"\nchecked against evalgate.gate.decide: all equal; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
