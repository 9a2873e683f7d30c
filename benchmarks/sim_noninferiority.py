"""Non-inferiority on graded and --repeats suites through the whole gate (#29).

The truth sits exactly at the margin (a mean change of -2 pt, margin 2 pt), so every PASS is a
type I error; the gate must keep it at or below alpha = 0.05. Each replicate is built as records
and judged by ``evalgate.gate.decide`` (agreement gate on, ``--policy non-inferiority --margin
2pt``); --repeats runs go in as ``verdict_for`` passes them (per-item means, graded, and the
per-repeat pairs for the sampled agreement row). Beside the gate, the percentile bootstrap's
lower bound alone (the interval the gate used before #29) on the same data, for comparison.

Scenarios, n items each:

- sparse graded: 10 % of the items lose 0.2, the rest identical;
- sparse both ways: 14 % lose 0.25, 6 % gain 0.25;
- dense graded: every item moves, N(-0.02, 0.1) (F1-like);
- --repeats 4, deterministic items: a right item loses one of its four repeats (8 % of items).

    python benchmarks/sim_noninferiority.py --seed 0 --reps 500

Monte Carlo error of a rate near 0.05 at 500 replicates: 0.010 (one standard error).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate import stats
from evalgate.gate import GatePolicy, decide
from evalgate.gate._repeats import item_means
from evalgate.store.records import Pair, Record

MARGIN, K = 0.02, 4
POLICY = GatePolicy(policy="non-inferiority", margin="2pt")
Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _rec(arm: str, item: str, r: int, value: float) -> Record:
    """One arm's record of repeat ``r`` of ``item``: metric ``m`` is ``value``, and the response
    is the same text on both arms exactly when the values are equal."""
    return Record(
        run_id="sim", arm=arm, variant=arm, suite="s", suite_version=1, item_id=item, repeat=r, prompt_hash=item,
        target="7", response=f"{value}", extracted=None, metrics={"m": value}, extra={},
    )  # fmt: skip


def repeat_pairs(x: np.ndarray, y: np.ndarray) -> list[Pair]:
    """Per-repeat pairs from (items, repeats) outcome arrays (``tests/gate/test_noninferiority.py``
    builds its runs with it too)."""
    return [
        Pair(f"i{i}", r, _rec("baseline", f"i{i}", r, x[i, r]), _rec("candidate", f"i{i}", r, y[i, r]))
        for i in range(x.shape[0])
        for r in range(x.shape[1])
    ]


def sparse(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    a = gen.uniform(0.3, 1.0, (n, 1))
    return a, a - 0.2 * (gen.random((n, 1)) < 0.1)


def both_ways(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    a = gen.uniform(0.3, 0.7, (n, 1))
    u = gen.random((n, 1))
    return a, a - 0.25 * (u < 0.14) + 0.25 * ((u >= 0.14) & (u < 0.2))


def dense(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    a = gen.uniform(0.35, 0.65, (n, 1))
    return a, np.clip(a + gen.normal(-MARGIN, 0.1, (n, 1)), 0, 1)


def repeats(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    right = gen.random((n, 1)) < 0.7
    x = np.repeat(right.astype(float), K, axis=1)
    y = x.copy()
    y[(right[:, 0]) & (gen.random(n) < 0.08 / 0.7), int(gen.integers(K))] = 0.0
    return x, y


SCENARIOS: dict[str, Draw] = {
    "sparse graded (10 % lose 0.2)": sparse,
    "sparse both ways (14 % -0.25, 6 % +0.25)": both_ways,
    "dense graded, N(-0.02, 0.1)": dense,
    "--repeats 4, one repeat lost on 8 %": repeats,
}


def judge(x: np.ndarray, y: np.ndarray) -> tuple[bool, bool]:
    """(the row shows non-inferiority, the whole gate passes)."""
    pairs = repeat_pairs(x, y)
    if x.shape[1] > 1:
        v = decide(
            {"s": (["m"], item_means(pairs, ["m"]))}, policy=POLICY, kinds={"s": "continuous"},
            sampled={"s": pairs},
        )  # fmt: skip
    else:
        v = decide({"s": (["m"], pairs)}, policy=POLICY, kinds={"s": "continuous"})
    return v.suites[0].status == "pass", v.verdict == "PASS"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200])
    args = ap.parse_args()
    gen = np.random.default_rng(args.seed)
    start = time.perf_counter()
    five = np.repeat((gen.random((5, 1)) < 0.6).astype(float), K, axis=1)
    print(f"5 items x {K} repeats, identical outcomes: {decide_once(five)}\n")
    print(f"P(non-inferiority shown) at the margin (truth -2 pt, margin 2 pt), {args.reps} replicates")
    print("| scenario | n | row: gate's bound | gate PASS | percentile bound alone |")
    print("|---|--:|--:|--:|--:|")
    for name, draw in SCENARIOS.items():
        for n in args.n:
            row = gate = old = 0
            for _ in range(args.reps):
                x, y = draw(gen, n)
                r, g = judge(x, y)
                row, gate = row + r, gate + g
                ci = stats.paired_bootstrap(
                    x.mean(axis=1), y.mean(axis=1), n_resamples=2000, confidence=0.9,
                    rng=np.random.default_rng(int(gen.integers(2**32))),
                )  # fmt: skip
                old += ci.low > -MARGIN
            print(
                f"| {name} | {n} | {row / args.reps:.3f} | {gate / args.reps:.3f} | {old / args.reps:.3f} |",
                flush=True,
            )
    print(f"\n{time.perf_counter() - start:.0f} s")


def decide_once(x: np.ndarray) -> str:
    pairs = repeat_pairs(x, x.copy())
    v = decide(
        {"s": (["m"], item_means(pairs, ["m"]))},
        policy=POLICY,
        kinds={"s": "continuous"},
        sampled={"s": pairs},
    )
    return f"{v.verdict} (lower bound {v.suites[0].ci_low * 100:+.1f} pt)"


if __name__ == "__main__":
    main()
