"""Drift rows from few documents (#53): the fewest at which "within the budget, powered" holds.

Section ``few`` of benchmarks/sim_drift.py, kept in its own file (sim_drift.py would pass 600
lines); ``python benchmarks/sim_drift.py --section few`` runs it too. A gated drift row PASSes
("within the budget, powered") when the upper bound of ``stats.ratio_budget_test`` is below the
budget. Every replicate here has the true theta exactly AT the budget (0.01), so each PASS is a
false one and its rate should be at most alpha (0.05). Per document: numer = the KL sum, denom =
the token count (uniform on 32..256, as sim_drift.py draws them); the per-document mean KLD from
sim_drift.py's LAWS scaled to mean 0.01, or a light-tailed law (gamma with CV 0.3) as the
favourable case.

- ``all``: n documents, every one differing (no zeros): n = 3 .. 30 (``--all-n``).
- ``half``: the rows of ``all`` (the same draws), PASS when the bound at alpha / 2 is below the
  budget: not what the gate does today; what a stricter all-differing bound would buy.
- ``zero``: exactly k documents differ among n = 50 and 12, the rest exactly 0 (the
  zero-inflated path): the population share of differing documents is k / n and their mean KLD
  the budget / share, so theta = share x size = the budget; the rate is conditional on k.
- ``rule``: a mix of rows, all differing at n = 5 .. 100, and n = 12 / 30 / 50 with each document
  differing with probability pi (the count binomial, their mean KLD the budget / pi): P(PASS) as
  the gate is, with the floors (fewer than ``--min-docs`` documents or ``--min-differing``
  differing ones: UNDERPOWERED, never PASS), and with the floors and an all-differing row's
  bound taken at alpha / 2.
- ``resamples``: three cells at 2,000 and 10,000 resamples on the same draws (the gate: 10,000).

    python benchmarks/sim_drift.py --section few --seed 0 --parts all half --all-n 3 4 5 6 8 10 12 15 20 30 50 100 200
    python benchmarks/sim_drift.py --section few --seed 0 --parts zero
    python benchmarks/sim_drift.py --section few --seed 0 --parts rule resamples

(1,000 replicates a cell by default, ``--ratio-reps``; on a shared 2-core machine about 3, 2.5
and 5.5 minutes.)

Each rate comes with its Clopper-Pearson 95 % interval; at 1,000 replicates a rate of 0.05 has a
standard error of 0.007.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_drift import DEFAULT_KLD_BUDGET, LAWS, Law  # also puts the repository on sys.path

from evalgate import stats

BUDGET = DEFAULT_KLD_BUDGET
LIGHT_SHAPE = 1 / 0.3**2
FEW_LAWS: dict[str, Law] = {
    **LAWS,
    "gamma CV 0.3": (lambda g, n: g.gamma(LIGHT_SHAPE, 0.01 / LIGHT_SHAPE, n), 0.01),
}
"""sim_drift.py's laws and a light-tailed one (nearly normal), each scaled here to mean BUDGET."""
ALL_NS = (3, 4, 5, 6, 8, 10, 12, 15, 20, 30)
ZERO_NS = (50, 12)
ZERO_KS = (1, 2, 3, 4, 5, 6, 8, 10, 15)
MIN_DOCS, MIN_DIFFERING = 30, 4
"""The floors' defaults: the constants chosen from the ``half`` and ``zero`` tables (#53)."""
PARTS = ("all", "half", "zero", "rule", "resamples")


def draw_row(
    gen: np.random.Generator, law: Law, n: int, k: int | None, pi: float
) -> tuple[np.ndarray, np.ndarray]:
    """(numer, tokens) of n documents: ``k`` of them differing (None: each with probability pi),
    their mean KLD from ``law`` scaled to BUDGET / pi, so theta = BUDGET."""
    draw, mean = law
    tokens = gen.integers(32, 257, n).astype(float)
    differ = np.arange(n) < k if k is not None else gen.random(n) < pi
    kld = draw(gen, n) * (BUDGET / pi / mean)
    return np.where(differ, kld * tokens, 0.0), tokens


def false_pass(law: Law, n: int, k: int | None, pi: float, reps: int, resamples: int, alpha: float,
               seed: int, rule: tuple[int, int] | None = None) -> np.ndarray:  # fmt: skip
    """PASS counts over ``reps`` (PASS: the one-sided (1 - ``alpha``) upper bound below the
    budget): [as is]; with ``rule`` = (min docs, min differing): [as is, the floors applied, the
    floors and an all-differing row's bound taken at alpha / 2]."""
    gen = np.random.default_rng(seed)
    hits = np.zeros(1 if rule is None else 3, dtype=int)
    for _ in range(reps):
        numer, tokens = draw_row(gen, law, n, k, pi)
        kw = {"budget": BUDGET, "n_resamples": resamples, "seed": int(gen.integers(2**32))}
        res = stats.ratio_budget_test(numer, tokens, alpha=alpha, **kw)
        passed = res.upper < BUDGET
        if rule is None:
            hits += passed
            continue
        floors = n >= rule[0] and res.nonzero >= rule[1]
        strict = passed
        if floors and res.nonzero == n:
            strict = stats.ratio_budget_test(numer, tokens, alpha=alpha / 2, **kw).upper < BUDGET
        hits += [passed, passed and floors, strict and floors]
    return hits


def _rate(hits: int, reps: int) -> str:
    ci = binomtest(hits, reps).proportion_ci(0.95, method="exact")
    return f"{hits / reps:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def _header(cols: list[str]) -> None:
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))


def all_part(args: argparse.Namespace, half: bool = False) -> None:
    """``half``: the same rows (same seeds), PASS when the bound at alpha / 2 is below the budget."""
    alpha = args.alpha / 2 if half else args.alpha
    what = "the upper bound at alpha / 2 (not the gate's: for comparison)" if half else "P(upper < budget)"
    print(f"\n### n documents, every one differing: {what} at theta = budget\n\nalpha {alpha:g}, "
          f"{args.ratio_reps} replicates a cell, {args.resamples} resamples (the gate: 10,000); seed {args.seed}\n")  # fmt: skip
    _header(["n", *FEW_LAWS])
    for n in args.all_n:
        cells = []
        for i, law in enumerate(FEW_LAWS.values()):
            (hits,) = false_pass(
                law, n, n, 1.0, args.ratio_reps, args.resamples, alpha, args.seed * 10_000 + 100 * i + n
            )
            cells.append(_rate(hits, args.ratio_reps))
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)


def zero_part(args: argparse.Namespace) -> None:
    for n in ZERO_NS:
        print(f"\n### k of n = {n} documents differing, the rest exactly 0: P(upper < budget) at theta = budget "
              f"(share k / n, size budget / share)\n\nalpha {args.alpha}, {args.ratio_reps} replicates a cell, "
              f"{args.resamples} resamples (the gate: 10,000); seed {args.seed}\n")  # fmt: skip
        _header(["k", *FEW_LAWS])
        for k in (k for k in ZERO_KS if k < n):
            cells = []
            for i, law in enumerate(FEW_LAWS.values()):
                seed = args.seed * 10_000 + 1000 + 100 * i + k + (50 if n == 12 else 0)
                (hits,) = false_pass(law, n, k, k / n, args.ratio_reps, args.resamples, args.alpha, seed)
                cells.append(_rate(hits, args.ratio_reps))
            print(f"| {k} | " + " | ".join(cells) + " |", flush=True)


def rule_part(args: argparse.Namespace) -> None:
    rule = (args.min_docs, args.min_differing)
    mix = [(n, 1.0) for n in (5, 8, 12, 20, 30, 50, 100)]
    mix += [(n, pi) for n in (12, 30, 50) for pi in sorted({1 / n, 2 / n, 4 / n, 8 / n, 0.5, 0.9})]
    print(f"\n### The floors applied: fewer than {rule[0]} documents or {rule[1]} differing ones never PASS\n\n"
          f"P(PASS) at theta = budget: as is / the floors / the floors and an all-differing row's bound at "
          f"alpha / 2 (interval: the last); each document differs with probability pi (pi = 1: none is 0); "
          f"alpha {args.alpha}, {args.ratio_reps} replicates a cell, {args.resamples} resamples; seed {args.seed}\n")  # fmt: skip
    _header(["n", "pi", *FEW_LAWS])
    totals = {name: np.zeros(3, dtype=int) for name in FEW_LAWS}
    worst = {name: np.zeros(3, dtype=int) for name in FEW_LAWS}
    for j, (n, pi) in enumerate(mix):
        cells = []
        for i, (name, law) in enumerate(FEW_LAWS.items()):
            seed = args.seed * 10_000 + 5000 + 100 * i + j
            hits = false_pass(law, n, None, pi, args.ratio_reps, args.resamples, args.alpha, seed, rule)
            totals[name] += hits
            worst[name] = np.maximum(worst[name], hits)
            cells.append(f"{hits[0] / args.ratio_reps:.3f} / {hits[1] / args.ratio_reps:.3f} / "
                         f"{_rate(int(hits[2]), args.ratio_reps)}")  # fmt: skip
        print(f"| {n} | {pi:.3g} | " + " | ".join(cells) + " |", flush=True)
    reps = args.ratio_reps * len(mix)
    print(
        "| highest row | | "
        + " | ".join(" / ".join(f"{h / args.ratio_reps:.3f}" for h in w) for w in worst.values())
        + " |"
    )
    print(
        "| all rows pooled | | "
        + " | ".join(" / ".join(f"{h / reps:.3f}" for h in t) for t in totals.values())
        + " |"
    )


def resamples_part(args: argparse.Namespace) -> None:
    cells = [("lognormal s=0.75", 8, 8), ("lognormal s=0.75", 30, 30), ("gamma k=0.5", 50, 4)]
    print(
        f"\n### 2,000 vs 10,000 resamples on the same data\n\n{args.ratio_reps} replicates a cell; seed {args.seed}\n"
    )
    _header(["law", "n", "k", "2,000 resamples", "10,000 resamples"])
    for i, (name, n, k) in enumerate(cells):
        seed = args.seed * 10_000 + 9000 + i
        rates = [
            int(false_pass(FEW_LAWS[name], n, k, k / n, args.ratio_reps, r, args.alpha, seed)[0])
            for r in (2000, 10_000)
        ]
        print(
            f"| {name} | {n} | {k} | " + " | ".join(_rate(h, args.ratio_reps) for h in rates) + " |",
            flush=True,
        )


def few_section(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    if args.quick:
        args.ratio_reps = 20
    run = {
        "all": all_part,
        "half": lambda a: all_part(a, half=True),
        "zero": zero_part,
        "rule": rule_part,
        "resamples": resamples_part,
    }
    for part in PARTS:
        if part in args.parts:
            run[part](args)
    print(f"\nwall {time.perf_counter() - t0:.0f} s")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The section's options (sim_drift.py adds them to its own parser for ``--section few``)."""
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="few: which tables")
    ap.add_argument(
        "--all-n", type=int, nargs="+", default=list(ALL_NS), help="few: documents, all differing"
    )
    ap.add_argument("--min-docs", type=int, default=MIN_DOCS, help="few: the rule's fewest documents")
    ap.add_argument(
        "--min-differing", type=int, default=MIN_DIFFERING, help="few: the rule's fewest differing"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ratio-reps", type=int, default=1000, help="replicates per cell")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (the gate: 10,000)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="a few replicates of everything: does it run")
    add_arguments(ap)
    few_section(ap.parse_args())


if __name__ == "__main__":
    main()
