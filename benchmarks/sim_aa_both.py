"""`--aa both`: how often the "candidate non-deterministic where the baseline is not" note appears,
by the number of repeat items (``--aa-items``), the arms' own non-identity rates and alpha 0.05.

Each replicate draws N items. Non-determinism sits on some items more than others (a long answer
has more steps at which a batch-dependent kernel can tip a near-tie), so a share q = 0.3 of the
items is "fragile" and the rest never change: the baseline's repeat differs on a fragile item with
probability b / q and the candidate's with c / q, independently given the item (marginal rates b
and c, positively correlated through the fragile items). The note is the exact one-sided McNemar
test of ``stats.identical_shares`` at p < 0.05, the function ``gate/_repeatability.py`` calls; a
few replicates also go through ``suite_repeatability`` on real records to check they agree.

    python benchmarks/sim_aa_both.py --seed 0 --reps 4000

Monte Carlo error of a rate near 0.05 at 4000 replicates: 0.0035 (one standard error).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate import stats
from evalgate.gate._repeatability import suite_repeatability
from evalgate.store.records import Pair, Record

FRAGILE = 0.3
CASES = (  # (baseline, candidate) non-identity rates
    (0.0, 0.0),
    (0.05, 0.05),
    (0.10, 0.10),
    (0.0, 0.02),
    (0.0, 0.05),
    (0.02, 0.07),
    (0.05, 0.15),
)
SIZES = (50, 100, 200, 500)


def draw(n: int, b: float, c: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per item: whether the baseline's repeat and the candidate's repeat gave the same output."""
    fragile = rng.random(n) < FRAGILE
    same_b = ~(fragile & (rng.random(n) < b / FRAGILE))
    same_c = ~(fragile & (rng.random(n) < c / FRAGILE))
    return same_b, same_c


def _record(arm: str, item: str, text: str) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite="s", suite_version=1, item_id=item, repeat=0,
        prompt_hash="h", target="yes", response=text, extracted=text, metrics={"acc": 1.0},
    )  # fmt: skip


def check_gate_agrees(rng: np.random.Generator) -> None:
    """The gate's row on records gives the same p as the pure function on the flags."""
    for _ in range(5):
        same_b, same_c = draw(60, 0.05, 0.15, rng)
        base = [Pair(f"q{i}", 0, _record("baseline", f"q{i}", "a"), _record("aa", f"q{i}", "a" if s else "b"))
                for i, s in enumerate(same_b)]  # fmt: skip
        cand = [Pair(f"q{i}", 0, _record("candidate", f"q{i}", "a"), _record("aa_candidate", f"q{i}", "a" if s else "b"))
                for i, s in enumerate(same_c)]  # fmt: skip
        row = suite_repeatability("s", base, cand, alpha=0.05)
        keys = sorted(f"q{i}" for i in range(60))
        order = [int(k[1:]) for k in keys]
        want = stats.identical_shares(list(same_b[order]), list(same_c[order]))
        assert abs(row.p_value - want.pvalue) < 1e-12 and row.n == want.n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--alpha", type=float, default=0.05)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    check_gate_agrees(rng)
    print(
        f"share of replicates with the note (p < {args.alpha}), {args.reps} replicates, fragile share {FRAGILE}"
    )
    print("baseline  candidate  " + "  ".join(f"N={n:<4}" for n in SIZES))
    for b, c in CASES:
        cells = []
        for n in SIZES:
            hits = 0
            for _ in range(args.reps):
                same_b, same_c = draw(n, b, c, rng)
                hits += stats.identical_shares(list(same_b), list(same_c)).pvalue < args.alpha
            cells.append(f"{hits / args.reps:.3f} ")
        print(f"{b:8.0%}  {c:9.0%}  " + "  ".join(cells))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
