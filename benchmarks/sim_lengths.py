"""What the longest-length row adds to the gate, simulated (#21).

A long-context run of four lengths (1k, 2k, 4k, 8k), n items per length, is drawn as paired
counts per length (multinomial per replicate): the baseline is right with probability 0.7; a
right answer flips to wrong with probability r, a wrong one to right with probability s, per
length. Each replicate is judged two ways, with the accuracy rows only (the flip budget, a
separate product decision, off):

- pooled: the suite's primary row alone (two-sided McNemar mid-p over all lengths, alpha 0.05);
- pooled + longest: the gate of gate/_lengths.py, Holm over the primary row and the one-sided
  McNemar mid-p on the longest length.

Before the table, a few replicates of every scenario are rebuilt as records and run through
``evalgate.gate.decide`` itself; the script stops if a p-value or verdict differs, so the rates
are the gate's.

    python benchmarks/sim_lengths.py --seed 0 --reps 4000

Monte Carlo error of a rate near 0.05 at 4,000 replicates: 0.0035 (one standard error).
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

from evalgate.gate import GatePolicy, decide
from evalgate.store.records import Pair, Record

ALPHA = 0.05
LENGTHS = (1024, 2048, 4096, 8192)
BASE = 0.7
NOISE = 0.03
"""Flip probability per item in both directions where nothing changes (an A/A-like noise floor)."""


def midp(n10: np.ndarray, n01: np.ndarray, two_sided: bool) -> np.ndarray:
    nd = n10 + n01
    if two_sided:
        k = np.minimum(n10, n01)
        p = np.where(n10 == n01, 1.0, 2 * st.binom.cdf(k, nd, 0.5) - st.binom.pmf(k, nd, 0.5))
    else:  # H1: the candidate worse, n10 large
        p = st.binom.sf(n10, nd, 0.5) + 0.5 * st.binom.pmf(n10, nd, 0.5)
    return np.where(nd == 0, 1.0, np.clip(p, 0.0, 1.0))


def draw(rng: np.random.Generator, n: int, lost: list[float], reps: int) -> np.ndarray:
    """(reps, lengths, 4) counts n11, n10, n01, n00; ``lost``: the extra share of right answers
    that flip to wrong at each length, on top of the symmetric noise."""
    out = []
    for extra in lost:
        r, s = NOISE + extra, NOISE * BASE / (1 - BASE)  # noise alone: as many lost as gained
        probs = [BASE * (1 - r), BASE * r, (1 - BASE) * s, (1 - BASE) * (1 - s)]
        out.append(rng.multinomial(n, probs, size=reps))
    return np.stack(out, axis=1)


def rule(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pooled p, longest one-sided p, Holm-adjusted pair) of each replicate."""
    pooled = counts.sum(axis=1)
    p_pool = midp(pooled[:, 1], pooled[:, 2], two_sided=True)
    last = counts[:, -1]
    p_long = midp(last[:, 1], last[:, 2], two_sided=False)
    lo, hi = np.minimum(p_pool, p_long), np.maximum(p_pool, p_long)
    adj_lo = np.minimum(1.0, 2 * lo)
    adj_hi = np.maximum(adj_lo, hi)
    adj_pool = np.where(p_pool <= p_long, adj_lo, adj_hi)
    adj_long = np.where(p_pool <= p_long, adj_hi, adj_lo)
    return p_pool, p_long, np.stack([adj_pool, adj_long], axis=1)


def _rec(arm: str, item: str, length: int, ok: int) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite="long_context", suite_version=1, item_id=item, repeat=0,
        prompt_hash=item, target=None, response=None, extracted=None, metrics={"string_match_all": float(ok)},
        extra={"context_length": length, "sent_hash": item[-16:]},
    )  # fmt: skip


def check_against_decide(counts: np.ndarray) -> None:
    """Rebuild replicates as records and compare with the gate itself."""
    p_pool, p_long, adj = rule(counts)
    for i in range(counts.shape[0]):
        pairs = []
        for length, row in zip(LENGTHS, counts[i], strict=True):
            k = 0
            for (b, c), m in zip(((1, 1), (1, 0), (0, 1), (0, 0)), row, strict=True):
                for _ in range(int(m)):
                    item = f"t/{length}/{k:04d}"
                    pairs.append(
                        Pair(item, 0, _rec("baseline", item, length, b), _rec("candidate", item, length, c))
                    )
                    k += 1
        v = decide({"long_context": (["string_match_all"], pairs)}, policy=GatePolicy(agreement_gate=False))
        t = v.lengths[0].trend
        assert t is not None
        ours = (p_pool[i], p_long[i], adj[i, 0], adj[i, 1])
        theirs = (v.suites[0].p_value, t.p_value, v.suites[0].p_adjusted, t.p_adjusted)
        if not all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(ours, theirs, strict=True)
        ):
            raise SystemExit(f"replicate {i}: simulated {ours} != gate {theirs}")
        if (v.verdict == "BLOCK") != bool((adj[i] < ALPHA).any()):
            raise SystemExit(f"replicate {i}: verdict {v.verdict} but the rule says otherwise")


SCENARIOS = (
    ("no change (noise flips only)", [0.0, 0.0, 0.0, 0.0]),
    ("8k only: -7 pt", [0.0, 0.0, 0.0, 0.10]),
    ("8k only: -14 pt", [0.0, 0.0, 0.0, 0.20]),
    ("8k only: -21 pt", [0.0, 0.0, 0.0, 0.30]),
    ("every length: -3.5 pt", [0.05, 0.05, 0.05, 0.05]),
    ("growing: 0, -2, -4, -7 pt", [0.0, 0.03, 0.06, 0.10]),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200], help="items per length")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for _, lost in SCENARIOS:
        check_against_decide(draw(rng, 50, lost, 5))
    print(f"checked against evalgate.gate.decide: {len(SCENARIOS) * 5} replicates agree\n")
    print(f"P(BLOCK) over {args.reps} replicates, baseline accuracy {BASE}, noise flips {NOISE:.0%} each way")
    print("| scenario | n per length | pooled row only | pooled + longest (Holm) |")
    print("|---|--:|--:|--:|")
    for name, lost in SCENARIOS:
        for n in args.n:
            counts = draw(rng, n, lost, args.reps)
            p_pool, _, adj = rule(counts)
            only = float((p_pool < ALPHA).mean())
            both = float((adj < ALPHA).any(axis=1).mean())
            print(f"| {name} | {n} | {only:.3f} | {both:.3f} |")
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
