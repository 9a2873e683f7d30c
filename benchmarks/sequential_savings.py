"""How many items does the sequential e-value test save against a full run?

Simulates paired binary evals of ``--n`` items at several flip rates, once with a regression
(delta = ``--delta``, default -0.03) and once under H0 (delta = 0). Each replicate is judged two ways:

* full run: the two-sided mid-p McNemar test on all items, BLOCK when p < alpha;
* sequential: ``evalgate.stats.sequential.replay_stream``, the rule ``compare --sequential`` runs (here its
  accuracy test alone: one suite, agreement gate off), looking
  after every ``--chunk`` items and stopping at the first BLOCK (E >= 1/alpha) or futility
  (``stats.sequential_futile``: even an optimistic projection of the items left keeps E below
  1/alpha); an undecided run is a PASS after the last look.

Per flip rate it prints the mean fraction of items the sequential test used, the same among the
replicates where it reached the full run's verdict, its block rate (power) beside the full run's,
their agreement, and both tests' false-block rates under H0. Numbers are printed as measured.

    python benchmarks/sequential_savings.py --seed 0 --reps 2000
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.stats import mcnemar
from evalgate.stats.sequential import replay_stream


@dataclass(frozen=True)
class Outcome:
    """Per-replicate verdicts and the fraction of items the sequential test consumed."""

    full_block: np.ndarray
    seq_block: np.ndarray
    fraction: np.ndarray


def simulate(
    flip_rate: float,
    delta: float,
    *,
    n: int,
    chunk: int,
    reps: int,
    alpha: float,
    rng: np.random.Generator,
) -> Outcome:
    """Run ``reps`` paired evals and judge each by the full-run and the chunked sequential test."""
    p10, p01 = (flip_rate - delta) / 2, (flip_rate + delta) / 2  # regression, improvement rates
    u = rng.random((reps, n))
    code = np.where(u < p10, 1, np.where(u < p10 + p01, 0, -1))  # 1 regression, 0 improvement, -1 same
    full_block, seq_block, fraction = np.zeros(reps, bool), np.zeros(reps, bool), np.ones(reps)
    for i in range(reps):
        n10, n01 = int((code[i] == 1).sum()), int((code[i] == 0).sum())
        full_block[i] = mcnemar(n10, n01).pvalue < alpha
        out = replay_stream(code[i].tolist(), n_total=n, chunk=chunk, alpha=alpha)
        seq_block[i], fraction[i] = out.decision == "block", out.used / n
    return Outcome(full_block, seq_block, fraction)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the numpy Generator")
    parser.add_argument("--reps", type=int, default=2000, help="replicates per flip rate and scenario")
    parser.add_argument("--n", type=int, default=1000, help="items per eval")
    parser.add_argument("--chunk", type=int, default=50, help="items between sequential looks")
    parser.add_argument("--delta", type=float, default=-0.03, help="true p_candidate - p_baseline under H1")
    parser.add_argument("--flip-rates", type=float, nargs="+", default=[0.05, 0.10, 0.15])
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    kw = {"n": args.n, "chunk": args.chunk, "reps": args.reps, "alpha": args.alpha, "rng": rng}

    print(
        f"n={args.n} items, looks every {args.chunk}, delta={args.delta:+.3f}, alpha={args.alpha}, "
        f"Beta(1,1) mixture, {args.reps} reps, seed {args.seed}"
    )
    head = (
        "flips  | items used: all  same-verdict | block rate: seq  full | agree "
        "| H0 false-block: seq  full | H0 items used"
    )
    print(head)
    print("-" * len(head))
    fractions = []
    for psi in args.flip_rates:
        h1 = simulate(psi, args.delta, **kw)
        h0 = simulate(psi, 0.0, **kw)
        agree = h1.seq_block == h1.full_block
        fractions.append(h1.fraction.mean())
        print(
            f"{psi:5.0%}  | {h1.fraction.mean():15.1%}  {h1.fraction[agree].mean():12.1%} "
            f"| {h1.seq_block.mean():15.1%}  {h1.full_block.mean():4.1%} | {agree.mean():5.1%} "
            f"| {h0.seq_block.mean():19.2%}  {h0.full_block.mean():4.2%} | {h0.fraction.mean():13.1%}"
        )
    met = ", ".join(
        f"{p:.0%}: {'yes' if f <= 0.5 else 'no'}" for p, f in zip(args.flip_rates, fractions, strict=True)
    )
    print(f"target mean fraction of items <= 50 % under H1 -> {met}")
    print(f"elapsed {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
