"""The longest-length row through the whole gate, under every policy (#21, #29).

A long-context run of four lengths (1k, 2k, 4k, 8k), n items per length, is drawn as paired
counts per length (a multinomial per replicate): the baseline is right with probability 0.7 and
the server's own noise flips f = 4.2 % of the items, half each way. A change of d points at a
length is drawn two ways:

- on top of the noise: P(lost) = f/2 + d, P(gained) = f/2 (discordance f + d);
- replacing noise flips: P(lost) = (psi + d)/2, P(gained) = (psi - d)/2, psi = max(f, d).

Each replicate is rebuilt as records (``extra["context_length"]`` and ``sent_hash``, as the
long_context suite writes them) and judged by ``evalgate.gate.decide`` itself, agreement gate on
(the default flip budget), under ``difference``, ``regression`` and ``non-inferiority --margin
2pt``. Per cell: the share of replicates in which the pooled row blocks, the longest-length row
blocks (after Holm), the agreement row blocks, and the whole gate says BLOCK.

Under non-inferiority the longest-length row tests a loss beyond the margin (``_lengths.py``), so
a candidate inside the margin at every length must block at most alpha of the time there; the
pooled row can still block such a candidate when n is too small to show non-inferiority, which is
its job, not this row's.

    python benchmarks/sim_lengths.py --seed 0 --reps 200

Monte Carlo error of a rate near 0.05 at 200 replicates: 0.015 (one standard error).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.gate import GatePolicy, decide
from evalgate.store.records import Pair, Record

LENGTHS = (1024, 2048, 4096, 8192)
BASE = 0.7
FLIPS = 2 * BASE * 0.03
"""The server's own discordance where nothing changes (3 % of right answers flip, as many back)."""
SUITE, METRIC = "long_context", "string_match_all"
POLICIES = {
    "difference": GatePolicy(),
    "regression": GatePolicy(policy="regression"),
    "non-inferiority 2pt": GatePolicy(policy="non-inferiority", margin="2pt"),
}
OUTCOMES = ((1, 1), (1, 0), (0, 1), (0, 0))


def probs(d: float, how: str) -> list[float]:
    """P(n11, n10, n01, n00) of one item at a loss of ``d`` (accuracy units)."""
    psi = max(FLIPS, d)  # replacing: the noise flips turn one way, as many as the change needs
    lost, gained = (FLIPS / 2 + d, FLIPS / 2) if how == "on top" else ((psi + d) / 2, (psi - d) / 2)
    return [BASE - lost, lost, gained, 1 - BASE - gained]


def _rec(arm: str, item: str, length: int, ok: int) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite=SUITE, suite_version=1, item_id=item, repeat=0,
        prompt_hash=item, target=None, response=None, extracted=None, metrics={METRIC: float(ok)},
        extra={"context_length": length, "sent_hash": item},
    )  # fmt: skip


class Pool:
    """Pairs built once per (length, outcome) and sliced per replicate: building records is not
    what is measured, the gate is."""

    def __init__(self, n: int) -> None:
        self.pairs = {
            (length, cell): [
                Pair(f"{length}/{cell}/{i}", 0, _rec("baseline", f"{length}/{cell}/{i}", length, b),
                     _rec("candidate", f"{length}/{cell}/{i}", length, c))
                for i in range(n)
            ]
            for length in LENGTHS
            for cell, (b, c) in enumerate(OUTCOMES)
        }  # fmt: skip

    def run(self, counts: np.ndarray) -> list[Pair]:
        """Pairs of one replicate from its (lengths, 4) counts."""
        return [
            p
            for j, length in enumerate(LENGTHS)
            for cell in range(4)
            for p in self.pairs[length, cell][: counts[j, cell]]
        ]


def judge(pairs: list[Pair], policy: GatePolicy) -> tuple[bool, bool, bool, bool]:
    """(pooled row, longest-length row, agreement row, whole gate) blocked."""
    v = decide({SUITE: ([METRIC], pairs)}, policy=policy)
    trend = v.lengths[0].trend
    assert trend is not None
    return (
        v.suites[0].status == "block",
        trend.status == "block",
        any(a.status == "block" for a in v.agreement),
        v.verdict == "BLOCK",
    )


SCENARIOS: tuple[tuple[str, tuple[float, ...], bool], ...] = (
    # (name, loss per length in points, also at 2,000 items per length)
    ("no change", (0, 0, 0, 0), True),
    ("8k only: -7 pt", (0, 0, 0, 7), False),
    ("every length: -3.5 pt", (3.5, 3.5, 3.5, 3.5), False),
    ("growing: 0, -2, -4, -7 pt", (0, 2, 4, 7), False),
    ("inside the margin: -1 pt everywhere", (1, 1, 1, 1), True),
    ("inside the margin: -1.5 pt at 8k only", (0, 0, 0, 1.5), True),
    ("at the margin: -2 pt everywhere", (2, 2, 2, 2), False),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--n", type=int, default=200, help="items per length (every scenario, every policy)")
    ap.add_argument("--large", type=int, default=2000, help="items per length of the non-inferiority cells")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    pools = {args.n: Pool(args.n), args.large: Pool(args.large)}
    print(f"P(BLOCK) over {args.reps} replicates through evalgate.gate.decide (agreement gate on), baseline")
    print(
        f"accuracy {BASE}, noise discordance {FLIPS:.1%}; rows: pooled / longest length / agreement / whole gate"
    )
    print("| scenario | change drawn | n per length | policy | pooled | longest | agreement | gate |")
    print("|---|---|--:|---|--:|--:|--:|--:|")
    for name, loss, large in SCENARIOS:
        for how in ("on top", "replacing"):
            cells = [(args.n, list(POLICIES))]
            if large:
                cells.append((args.large, ["non-inferiority 2pt"]))
            for n, policies in cells:
                p = np.array([probs(d / 100, how) for d in loss])
                draws = np.stack(
                    [rng.multinomial(n, p[j], size=args.reps) for j in range(len(LENGTHS))], axis=1
                )
                for pol in policies:
                    hits = np.array([judge(pools[n].run(c), POLICIES[pol]) for c in draws], dtype=float)
                    rates = " | ".join(f"{r:.3f}" for r in hits.mean(axis=0))
                    print(f"| {name} | {how} | {n} | {pol} | {rates} |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
