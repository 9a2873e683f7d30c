"""What the gate really does, simulated: false BLOCK, power at the printed MDE, non-inferiority.

Paired binary outcomes are drawn as counts (multinomial per replicate) for a run of six suites of
50 to 14,042 items (the sizes of a smoke suite, a 300-item run and the full ARC-Challenge, GSM8K,
ARC-Easy and MMLU test sets) and judged with the gate's own rule, vectorised over replicates:
McNemar mid-p and the flip-budget binomial (or, with --aa, ``stats.excess_test``) in one Holm
family at alpha 0.05; non-inferiority as the lower bound of each suite's 1 - 2 alpha Tango interval
against -margin. Before the tables, a few replicates of every scenario are rebuilt as records
and run through ``evalgate.gate.decide`` itself; the script stops if any p-value or verdict
differs from the vectorised rule, so the numbers are the gate's.

    python benchmarks/sim_gate.py --seed 0 --reps 2000

Monte Carlo error of a rate near 0.05 at 2,000 replicates: 0.005 (one standard error).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _gate_power as gp

from evalgate import stats
from evalgate.gate import DEFAULT_AA_MARGIN, DEFAULT_FLIP_BUDGET, GatePolicy, decide
from evalgate.gate._rows import RESAMPLES
from evalgate.store.records import Pair, Record

ALPHA = 0.05
SIZES = (50, 300, 1172, 1319, 2376, 14042)
LARGE = (3000, 5000, 8000, 10042, 12032, 14042)
Counts = np.ndarray  # (reps, 4): n11, n10, n01, n00


# ----------------------------------------------------------------------------- the rule, vectorised


def midp(n10: np.ndarray, n01: np.ndarray, two_sided: bool = True) -> np.ndarray:
    nd = n10 + n01
    if two_sided:  # Fagerland et al. 2013: 2 P(X <= k) - P(X = k), 1 at a tie
        k = np.minimum(n10, n01)
        p = 2 * st.binom.cdf(k, nd, 0.5) - st.binom.pmf(k, nd, 0.5)
    else:  # H1: regression, n10 large
        p = st.binom.sf(n10, nd, 0.5) + 0.5 * st.binom.pmf(n10, nd, 0.5)
    return np.where(nd == 0, 1.0, np.clip(p, 0.0, 1.0))


def budget_p(flips: np.ndarray, n: int, budget: float = DEFAULT_FLIP_BUDGET) -> np.ndarray:
    return np.where(flips == 0, 1.0, np.minimum(1.0, st.binom.sf(flips - 1, n, budget)))


@functools.cache
def _excess(only_c: int, only_a: int, n: int) -> float:
    return stats.excess_test(only_c, only_a, n, margin=DEFAULT_AA_MARGIN).pvalue


def excess_p(only_c: np.ndarray, only_a: np.ndarray, n: int) -> np.ndarray:
    return np.array([_excess(int(x), int(y), n) for x, y in zip(only_c, only_a, strict=True)])


def ni_pass(c: Counts, n: int, margin: float, alpha: float = ALPHA) -> np.ndarray:
    """Lower bound of the 1 - 2 alpha Tango interval above -margin <=> the score at -margin > z."""
    z = st.norm.ppf(1 - alpha)
    return stats.tango_score(-margin, c[:, 1], c[:, 2], n) > z


# ----------------------------------------------------------------------------- draws


def cells(
    rng: np.random.Generator, n: int, reps: int, *, flips: float, delta: float = 0.0, acc: float = 0.6
) -> Counts:
    """(n11, n10, n01, n00) with P(n10) - P(n01) = -delta and P(n10) + P(n01) = max(flips, |delta|)."""
    psi = max(flips, abs(delta))
    p10, p01 = (psi - delta) / 2, (psi + delta) / 2
    same = 1 - psi
    return rng.multinomial(n, [same * acc, p10, p01, same * (1 - acc)], size=reps)


def aa_cells(rng: np.random.Generator, n: int, reps: int, *, noise: float, excess: float) -> np.ndarray:
    """Joint draws of the candidate's flip (rate noise + excess, half each way) and the A/A arm's
    (rate noise), independent per item: (cand 10 & aa same, cand 01 & aa same, cand 10 & aa flip,
    cand 01 & aa flip, cand same & aa flip, neither)."""
    x, y = noise + excess, noise
    probs = [x / 2 * (1 - y), x / 2 * (1 - y), x / 2 * y, x / 2 * y, (1 - x) * y, (1 - x) * (1 - y)]
    return rng.multinomial(n, probs, size=reps)


# ----------------------------------------------------------------------------- the check against decide


def _rec(arm: str, suite: str, i: int, value: int) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite=suite, suite_version=1, item_id=str(i), repeat=0,
        prompt_hash="h", target=None, response=None, extracted=None, metrics={"acc": float(value)},
    )  # fmt: skip


def _pairs(suite: str, outcomes: list[tuple[int, int]]) -> list[Pair]:
    return [
        Pair(str(i), 0, _rec("baseline", suite, i, b), _rec("candidate", suite, i, c))
        for i, (b, c) in enumerate(outcomes)
    ]


def _from_counts(suite: str, c: np.ndarray) -> list[Pair]:
    cellv = ((1, 1), (1, 0), (0, 1), (0, 0))
    return _pairs(suite, [v for v, k in zip(cellv, c, strict=True) for _ in range(int(k))])


def _from_aa(suite: str, c: np.ndarray) -> tuple[list[Pair], list[Pair]]:
    """(baseline vs candidate, baseline vs A/A) pairs of the same items from an ``aa_cells`` draw."""
    items: list[tuple[int, int, int]] = []  # (baseline, candidate, aa)
    for (b, cand, aa), k in zip(
        ((1, 0, 1), (0, 1, 0), (1, 0, 0), (0, 1, 1), (1, 1, 0), (1, 1, 1)), c, strict=True
    ):
        items += [(b, cand, aa)] * int(k)
    cand_pairs = _pairs(suite, [(b, x) for b, x, _ in items])
    aa_pairs = [
        Pair(str(i), 0, p.baseline, _rec("aa", suite, i, a))
        for i, (p, (_, _, a)) in enumerate(zip(cand_pairs, items, strict=True))
    ]
    return cand_pairs, aa_pairs


def check(
    name: str,
    verdicts: list[str],
    built: list[tuple[dict, dict | None]],
    policy: GatePolicy,
    ps: list[np.ndarray],
) -> None:
    """Run ``decide`` on the rebuilt replicates; stop when its p-values or verdict differ."""
    for j, (per_suite, aa) in enumerate(built):
        v = decide(per_suite, policy=policy, aa_pairs=aa)
        got = [r.p_value for r in v.suites if r.primary] + [a.p_value for a in v.agreement]
        want = [float(p[j]) for p in ps]
        if v.verdict != verdicts[j] or not np.allclose(got, want, rtol=1e-9, atol=1e-12):
            sys.exit(
                f"{name}: replicate {j} differs from evalgate.gate.decide: {v.verdict} vs {verdicts[j]}, {got} vs {want}"
            )


# ----------------------------------------------------------------------------- scenarios


def aa_false_block(rng: np.random.Generator, reps: int, noise: float, n_check: int) -> float:
    """Identical arms on a server whose answers flip at ``noise`` (half each way); no --aa."""
    draws = [cells(rng, n, reps, flips=noise) for n in SIZES]
    ps = [midp(c[:, 1], c[:, 2]) for c in draws] + [
        budget_p(c[:, 1] + c[:, 2], n) for c, n in zip(draws, SIZES, strict=True)
    ]
    block = (gp.holm(np.column_stack(ps)) < ALPHA).any(axis=1)
    built = [
        ({f"s{n}": (["acc"], _from_counts(f"s{n}", c[j])) for c, n in zip(draws, SIZES, strict=True)}, None)
        for j in range(n_check)
    ]
    check(f"A/A noise {noise}", ["BLOCK" if b else "PASS" for b in block[:n_check]], built, GatePolicy(), ps)
    return float(block.mean())


def with_aa(
    rng: np.random.Generator,
    reps: int,
    noise: float,
    excess: float,
    n_check: int,
    sizes: tuple[int, ...] = SIZES,
) -> float:
    """--aa: the candidate flips at the A/A rate + ``excess`` (half each way), accuracy unchanged."""
    draws = [aa_cells(rng, n, reps, noise=noise, excess=excess) for n in sizes]
    mc = [midp(c[:, 0] + c[:, 2], c[:, 1] + c[:, 3]) for c in draws]
    ex = [excess_p(c[:, 0] + c[:, 1], c[:, 4], n) for c, n in zip(draws, sizes, strict=True)]
    block = (gp.holm(np.column_stack(mc + ex)) < ALPHA).any(axis=1)
    built = []
    for j in range(n_check):
        both = {f"s{n}": _from_aa(f"s{n}", c[j]) for c, n in zip(draws, sizes, strict=True)}
        built.append(
            ({s: (["acc"], cp) for s, (cp, _) in both.items()}, {s: ap for s, (_, ap) in both.items()})
        )
    check(
        f"--aa noise {noise}",
        ["BLOCK" if b else "PASS" for b in block[:n_check]],
        built,
        GatePolicy(),
        mc + ex,
    )
    return float(block.mean())


def ni(rng: np.random.Generator, reps: int) -> dict[str, float]:
    margin, flips = 0.02, 0.10
    out = {}
    for n in (300, 1172, 2376, 14042):  # one suite at delta = -margin: PASS would be the error
        out[f"type I, one suite of {n}, delta -2 pt"] = float(
            ni_pass(cells(rng, n, reps, flips=flips, delta=-margin), n, margin).mean()
        )
    draws = [cells(rng, n, reps, flips=flips) for n in LARGE]
    new = np.all([ni_pass(c, n, margin) for c, n in zip(draws, LARGE, strict=True)], axis=0)
    old = np.all(
        [ni_pass(c, n, margin, alpha=ALPHA / len(LARGE)) for c, n in zip(draws, LARGE, strict=True)], axis=0
    )
    out["power, six large suites, delta 0 (1 - 2 alpha per row)"] = float(new.mean())
    out["power, six large suites, delta 0 (before: 1 - 2 alpha / 6)"] = float(old.mean())
    for f in (0.0, 0.02, 0.10):
        c = cells(rng, 50, reps, flips=f)
        out[f"BLOCK, 50-item suite at delta 0, {f:.0%} flips (1 - 2 alpha)"] = float(
            1 - ni_pass(c, 50, margin).mean()
        )
        out[f"BLOCK, 50-item suite at delta 0, {f:.0%} flips (before: 1 - 2 alpha / 6)"] = float(
            1 - ni_pass(c, 50, margin, alpha=ALPHA / 6).mean()
        )
    bound = stats.paired_diff_ci(25, 0, 0, 25, confidence=1 - 2 * ALPHA).low
    out["lower 90 % bound of 50 identical answers (pt)"] = bound * 100
    return out


def ni_check(rng: np.random.Generator, n_check: int) -> None:
    """The vectorised NI rule against decide on a few six-suite draws, one a 50-item suite."""
    sizes, policy = (50, *LARGE[1:]), GatePolicy(policy="non-inferiority", margin="2pt", agreement_gate=False)
    for _ in range(n_check):
        draws = [cells(rng, n, 1, flips=0.1)[0] for n in sizes]
        want = all(ni_pass(c[None, :], n, 0.02)[0] for c, n in zip(draws, sizes, strict=True))
        v = decide(
            {f"s{n}": (["acc"], _from_counts(f"s{n}", c)) for c, n in zip(draws, sizes, strict=True)},
            policy=policy,
        )
        if (v.verdict == "PASS") != bool(want):
            sys.exit(
                f"non-inferiority: decide says {v.verdict}, the vectorised rule {'PASS' if want else 'BLOCK'}"
            )


def graded(rng: np.random.Generator, reps: int, n_check: int, n: int = 200) -> dict[str, float]:
    """A graded metric (F1-like, Beta(8, 2) per item) through the gate's sign-flip test: the very
    sign matrix the gate draws for suite "s", metric "f1" (seeded from those names), applied to all
    replicates at once; the first ``n_check`` replicates also go through ``decide``."""
    signs = np.random.default_rng(stats.stable_seed("sign-flip", "s", "f1")).integers(
        0, 2, size=(RESAMPLES, n)
    )
    signs = signs * 2 - 1
    out = {}
    for name, shift, noise in (
        ("F1 0.8 -> 0.6 on every item", -0.2, 0.0),
        ("noise only (sd 0.05 per item)", 0.0, 0.05),
    ):
        base = rng.beta(8, 2, (reps, n))
        cand = base + shift + rng.normal(0, noise, (reps, n))
        d = cand - base
        stat = d.mean(axis=1)
        perm = signs @ d.T / n  # (resamples, reps)
        tol = 1e-9 * np.maximum(1.0, np.abs(d).mean(axis=1))
        p = (1 + (np.abs(perm) >= np.abs(stat) - tol).sum(axis=0)) / (RESAMPLES + 1)
        block = p < ALPHA  # one test in the family: the graded agreement row is not gated
        for j in range(n_check):
            pairs = [
                Pair(str(i), 0, _f1("baseline", i, b), _f1("candidate", i, c))
                for i, (b, c) in enumerate(zip(base[j], cand[j], strict=True))
            ]
            v = decide({"s": (["f1"], pairs)}, policy=GatePolicy(), kinds={"s": "continuous"})
            if v.suites[0].p_value != p[j] or (v.verdict == "BLOCK") != block[j]:
                sys.exit(f"graded: replicate {j} differs from decide: p {v.suites[0].p_value} vs {p[j]}")
        out[f"{name}: BLOCK rate ({reps} reps)"] = float(block.mean())
    return out


def _f1(arm: str, i: int, value: float) -> Record:
    return Record(
        run_id="sim", arm=arm, variant=arm, suite="s", suite_version=1, item_id=str(i), repeat=0,
        prompt_hash="h", target=None, response=None, extracted=None, metrics={"f1": float(value)},
    )  # fmt: skip


def power_tables(
    rng: np.random.Generator,
    reps: int,
    reps_graded: int,
    n_check: int,
    binary: bool = True,
    graded: bool = True,
) -> None:
    """Power at the printed MDE (#29): binary rows through the whole gate under every policy, the
    change drawn on top of the noise and replacing noise flips; graded and --repeats rows."""
    sizes = ", ".join(map(str, gp.SIZES))
    print(f"\nPower at the printed MDE: six suites of {sizes} items, agreement gate on; the MDE is the "
          "one a no-change run prints from its own measured flips (mean shown), the change of that size "
          "is drawn in one suite at a time, the other five unchanged.")  # fmt: skip
    for policy in gp.POLICIES if binary else ():
        for shape in ("on top", "replacing"):
            print(f"\n| {policy}, change {shape} of the noise: suite n | noise | printed MDE (pt) | its row "
                  "| whole gate BLOCK |\n|---|---|---|---|---|")  # fmt: skip
            for f in gp.NOISES:
                for n, d, row, block in gp.binary_power(rng, reps, n_check, policy, f, shape):
                    print(f"| {n} | {f:.0%} | {d * 100:.2f} | {row:.3f} | {block:.3f} |")
    if not graded:
        return
    graded_level = gp.graded_check(rng, gp.graded_draw)
    repeats_level = gp.repeats_level(rng)
    for name, draw, level in (
        ("graded (F1-like)", gp.graded_draw, graded_level),
        ("--repeats 4 (per-item means)", gp.repeats_draw, repeats_level),
    ):
        print(f"\n| {name}, difference, row at alpha {level:.3g}: suite n | noise | shape | printed MDE (pt) "
              "| its row |\n|---|---|---|---|---|")  # fmt: skip
        for n in gp.SIZES:
            for f in gp.NOISES:
                for shape in ("concentrated", "spread"):
                    r = reps_graded if n < 10_000 else max(100, reps_graded // 3)
                    d, pw = gp.sign_flip_power(rng, r, n, f, shape, draw, level)  # type: ignore[arg-type]
                    print(f"| {n} | {f:.0%} | {shape} | {d * 100:.2f} | {pw:.3f} ({r} reps) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument(
        "--check", type=int, default=3, help="replicates per scenario rebuilt and run through decide"
    )
    ap.add_argument(
        "--skip-graded",
        action="store_true",
        help="skip the graded-metric scenario (the slowest); with --only-power: binary rows only",
    )
    ap.add_argument("--skip-power", action="store_true", help="skip power at the printed MDE (#29)")
    ap.add_argument("--only-power", action="store_true", help="only power at the printed MDE (#29)")
    ap.add_argument("--skip-binary", action="store_true", help="with --only-power: graded and --repeats only")
    ap.add_argument("--reps-graded", type=int, default=500, help="replicates per graded / --repeats cell")
    args = ap.parse_args()
    rng, reps, se = np.random.default_rng(args.seed), args.reps, math.sqrt(ALPHA * (1 - ALPHA) / args.reps)
    t0 = time.perf_counter()
    print(
        f"six suites of {', '.join(map(str, SIZES))} items; alpha {ALPHA}; {reps} replicates; seed {args.seed}"
    )
    print(f"Monte Carlo standard error at a rate of {ALPHA}: {se:.4f}\n")
    if args.only_power:
        power_tables(rng, reps, args.reps_graded, args.check, binary=not args.skip_binary,
                     graded=not args.skip_graded)  # fmt: skip
        print(f"\nchecked against evalgate.gate.decide: all equal; {time.perf_counter() - t0:.0f} s")
        return
    print("| A/A false BLOCK, no --aa (flip budget 5 %) | rate |\n|---|---|")
    for noise in (0.0, 0.01, 0.03, 0.05):
        print(f"| {noise:.0%} symmetric noise | {aa_false_block(rng, reps, noise, args.check):.4f} |")
    print("\n| --aa, candidate at exactly A/A + 3 pt: false BLOCK | rate |\n|---|---|")
    for noise in (0.0, 0.02, 0.05, 0.10):
        print(f"| A/A noise {noise:.0%} | {with_aa(rng, reps, noise, DEFAULT_AA_MARGIN, args.check):.4f} |")
    q8_aa = with_aa(rng, reps, 0.04, 0.018, 1, sizes=(14042,))
    c = cells(rng, 14042, reps, flips=0.058)
    q8 = float((np.minimum(midp(c[:, 1], c[:, 2]), budget_p(c[:, 1] + c[:, 2], 14042)) * 2 < ALPHA).mean())
    print(f"\nQ8_0-like candidate (1.8 % real flips) on a server with 4 % noise, 14,042 items: BLOCK {q8:.3f} "
          f"without --aa (5.8 % flips against the 5 % budget), {q8_aa:.3f} with --aa")  # fmt: skip
    if not args.skip_power:
        power_tables(rng, reps, args.reps_graded, args.check)
    ni_check(rng, args.check)
    print("\n| non-inferiority, margin 2 pt, 10 % flips | rate |\n|---|---|")
    for k, v in ni(rng, reps).items():
        print(f"| {k} | {v:.4f} |" if "bound" not in k else f"| {k} | {v:+.1f} |")
    if not args.skip_graded:
        print("\n| graded metric, 200 items, sign-flip test (10,000 resamples) | rate |\n|---|---|")
        for k, v in graded(rng, reps, args.check).items():
            print(f"| {k} | {v:.4f} |")
    print(
        f"\nchecked against evalgate.gate.decide on {args.check} replicate(s) per scenario: all equal; {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
