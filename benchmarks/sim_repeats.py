"""Sampled runs (``--temperature 0.7``, with and without ``--repeats``), simulated through the whole
gate: every replicate is built as records and judged by ``evalgate.gate.decide`` with the agreement
gate on, under every policy, and the whole gate's BLOCK rate is reported beside each row's.

Items have heterogeneous chances of being right, p_i ~ Beta(0.7, 0.5) (mean 0.58: some items
always right, some never, many in between, as a reasoning model sampled at temperature 0.7 looks).
Repeat r of item i draws one uniform u per arm; the arms share it on a fraction ``coupling`` of the
(item, repeat) pairs (llama.cpp shared 85 % of its sampled answers between two launches of one
model, docs/measurements.md; 0 is an engine that does not share seeds, the hard case) and draw
their own on the rest. An arm is right when u < p_i (baseline, and the --aa arm: the baseline
again) or u < p'_i (candidate).

1. The whole gate at an exact A/A (p' = p) and at a 3 pt drop (every p_i scaled by 1 - 0.03 /
   mean p), per policy: k = 1 with --aa (the A/A arm's flips are the agreement row's reference),
   k = 1 without it (the fixed 5 % budget: what ``settle`` now refuses before launch, printed),
   k = 2 and 4 (the sampled agreement row). The BLOCK rate of the verdict, and of the agreement
   row (significant after Holm); non-inferiority's BLOCK at an A/A is its power at the margin, not a
   false alarm (its agreement row's is).
2. The sampled agreement row under --policy regression, truths given as the two-sided estimand's
   regression part mean (p_i - p'_i)_+^2 (what the row estimated before, from the items the baseline
   led on the same draws): an exact A/A; 0.5 pt spread (every item loses the same chance c);
   0.5 pt concentrated (a few items never right any more); and the boundary, where the row's own
   estimand E e = mean a_i delta_i equals the margin (a_i: the chance of a same-seed regression).
   Shown: E e, the row's mean estimate (unbiased: the split of ``stats.sampled_excess_test``), the
   old same-draw selection's mean (its bias), the row's rejection and the whole gate's BLOCK.
3. The accuracy row alone, vectorized (1,000 replicates cost seconds): false BLOCK and power of a
   3 pt drop at k = 1, 4, 16, with common and with independent draws; a few replicates of each go
   through ``decide`` and the script stops if a p-value differs.

    nice -n 10 python benchmarks/sim_repeats.py --seed 0            # ~12 min on one core
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate import stats
from evalgate.config import EvalgateConfig
from evalgate.engines import registered_engine
from evalgate.engines.fake import FakeEngine
from evalgate.errors import ConfigError
from evalgate.gate import DEFAULT_AA_MARGIN, GatePolicy, decide
from evalgate.gate._repeats import RESAMPLES, item_means
from evalgate.request import CompareRequest
from evalgate.run.settle import settle
from evalgate.stats._resampling import _chunks
from evalgate.store.records import Pair, Record

ALPHA = 0.05
FAMILY = 3  # a generation suite's tests: accuracy, agreement, unanswered
SUITE, METRIC = "s", "acc"
POLICIES = ("difference", "regression", "non-inferiority")
Arms = tuple[np.ndarray, np.ndarray, np.ndarray]


def draw(rng: np.random.Generator, p: np.ndarray, q: np.ndarray, k: int, reps: int, coupling: float) -> Arms:
    """(reps, items, k) 0/1 outcomes of the baseline, the candidate and the A/A arm; each of the
    latter two shares the baseline's uniform on ``coupling`` of its (item, repeat) pairs."""
    shape = (reps, p.size, k)
    u = rng.random(shape)
    v = np.where(rng.random(shape) < coupling, u, rng.random(shape))
    w = np.where(rng.random(shape) < coupling, u, rng.random(shape))
    pb, pc = p[None, :, None], q[None, :, None]
    return (u < pb).astype(np.float64), (v < pc).astype(np.float64), (w < pb).astype(np.float64)


# -- the whole gate --------------------------------------------------------------------------------


class Gate:
    """Builds a replicate's records (cached: one per arm, item, repeat and outcome) and decides it."""

    def __init__(self, margin: str) -> None:
        self.margin = margin
        self._recs: dict[tuple[str, int, int, float], Record] = {}

    def _rec(self, arm: str, i: int, r: int, value: float) -> Record:
        key = (arm, i, r, value)
        if key not in self._recs:
            self._recs[key] = Record(
                run_id="sim", arm=arm, variant=arm, suite=SUITE, suite_version=1, item_id=str(i), repeat=r,
                prompt_hash="h", target=None, response=None, extracted=None, metrics={METRIC: value},
            )  # fmt: skip
        return self._recs[key]

    def pairs(self, x: np.ndarray, y: np.ndarray, arm: str = "candidate") -> list[Pair]:
        n, k = x.shape
        return [
            Pair(str(i), r, self._rec("baseline", i, r, float(x[i, r])), self._rec(arm, i, r, float(y[i, r])))
            for i in range(n)
            for r in range(k)
        ]

    def policy(self, name: str) -> GatePolicy:
        return GatePolicy(policy=name, margin=self.margin if name == "non-inferiority" else None)

    def decide(self, x: np.ndarray, y: np.ndarray, z: np.ndarray | None, policy: str):  # type: ignore[no-untyped-def]
        """The verdict of one replicate: k = 1 binary (with the A/A arm ``z`` when given), else
        per-item means with the sampled agreement row."""
        pairs = self.pairs(x, y)
        aa = {SUITE: self.pairs(x, z, "aa")} if z is not None else None
        if x.shape[1] == 1:
            return decide({SUITE: ([METRIC], pairs)}, policy=self.policy(policy), aa_pairs=aa)
        return decide(
            {SUITE: ([METRIC], item_means(pairs, [METRIC]))}, policy=self.policy(policy),
            kinds={SUITE: "continuous"}, sampled={SUITE: pairs},
        )  # fmt: skip


def rates(gate: Gate, arms: Arms, policy: str, with_aa: bool) -> tuple[float, float, float]:
    """Over the replicates: verdict BLOCK, agreement row significant, and its mean estimate (the
    sampled row's excess, or the --aa row's excess over the A/A arm; the flip rate otherwise)."""
    x, y, z = arms
    block = agree = 0
    est = 0.0
    for j in range(x.shape[0]):
        v = gate.decide(x[j], y[j], z[j] if with_aa else None, policy)
        a = v.agreement[0]
        block += v.verdict == "BLOCK"
        agree += a.significant
        est += a.sampled.excess if a.sampled else a.aa_excess if a.aa_excess is not None else a.flip_rate
    reps = x.shape[0]
    return block / reps, agree / reps, est / reps


def refusal() -> str:
    """What ``settle`` (compare, --dry-run) answers to --temperature 0.7 without --repeats or --aa."""
    req = CompareRequest(engine="fake", baseline="bf16", candidate="fp8", suites=["gsm8k"], temperature=0.7)
    with registered_engine("fake", lambda cfg: FakeEngine()):
        try:
            settle(req, EvalgateConfig(), contact=False)
        except ConfigError as e:
            return f"refused before launch (exit 2): {e} (fix: {e.fix})"
    sys.exit("settle did not refuse --temperature 0.7 without --repeats or --aa")


def table_whole_gate(args: argparse.Namespace, rng: np.random.Generator, p: np.ndarray, gate: Gate) -> None:
    n, reps = p.size, args.reps
    drop = p * (1 - 0.03 / p.mean())
    print(
        f"## 1. The whole gate (decide, agreement gate on), {n} items, {reps} replicates, temperature 0.7\n\n"
        f"BLOCK rate of the verdict / of the agreement row; non-inferiority margin {args.margin}.\n"
    )
    print("| truth | k | draws shared | agreement row | " + " | ".join(POLICIES) + " |")
    print("|---|---|---|---|" + "---|" * len(POLICIES))
    scenarios: list[tuple[str, np.ndarray, int, float, bool]] = [
        ("A/A", p, 1, 0.0, True),
        ("A/A", p, 1, 0.0, False),
        ("A/A", p, 2, 0.0, False),
        ("A/A", p, 4, 0.0, False),
        ("A/A", p, 4, args.coupling, False),
        ("3 pt drop", drop, 1, 0.0, True),
        ("3 pt drop", drop, 4, args.coupling, False),
    ]
    for truth, q, k, coupling, with_aa in scenarios:
        arms = draw(rng, p, q, k, reps, coupling)
        row = (
            "--aa: paired excess over the A/A arm" if with_aa else "fixed 5 % budget" if k == 1 else "sampled"
        )
        cells = []
        for policy in POLICIES:
            block, agree, _ = rates(gate, arms, policy, with_aa)
            cells.append(f"{block:.3f} / {agree:.3f}")
        print(f"| {truth} | {k} | {coupling:.0%} | {row} | " + " | ".join(cells) + " |")
    print(f"\nk = 1 without --aa: {refusal()}\n")


def _solve(f: Callable[[float], float], target: float) -> float:
    """c in [0, 1] with f(c) = target, f increasing (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def row_estimand(p: np.ndarray, q: np.ndarray, coupling: float) -> float:
    """E e of the regression row: mean over items of a_i delta_i, a_i = P(same-seed regression)."""
    a = coupling * np.maximum(p - q, 0) + (1 - coupling) * p * (1 - q)
    return float((a * (p - q)).mean())


def old_estimate(x: np.ndarray, y: np.ndarray) -> float:
    """The same-draw selection the row used before: items whose repeats favour the baseline, their
    two-sided excess (the per-replicate mean, averaged over replicates)."""
    k = x.shape[2]
    d = x - y
    s = d.sum(axis=2)
    e = (s * s - (d * d).sum(axis=2)) / (k * (k - 1))
    return float(np.where(s > 0, e, 0.0).mean())


def table_regression_row(
    args: argparse.Namespace, rng: np.random.Generator, p: np.ndarray, gate: Gate
) -> None:
    n, reps, coupling = p.size, args.row_reps, 0.0
    target = 0.005
    c = _solve(lambda c: float((np.minimum(p, c) ** 2).mean()), target)
    spread = p - np.minimum(p, c)
    order = np.random.default_rng(args.seed + 1).permutation(n)  # the items that stop being right
    upto = int(np.searchsorted(np.cumsum(p[order] ** 2) / n, target)) + 1
    concentrated = p.copy()
    concentrated[order[:upto]] = 0.0
    b = _solve(lambda c: row_estimand(p, p - np.minimum(p, c), coupling), DEFAULT_AA_MARGIN)
    boundary = p - np.minimum(p, b)
    print(
        f"## 2. The sampled agreement row under --policy regression, margin {DEFAULT_AA_MARGIN * 100:.0f} pt, "
        f"{n} items, {reps} replicates, draws not shared\n"
    )
    print(
        "| truth | k | mean (p - p')_+^2 | row's estimand E e | row's mean estimate | same-draw selection "
        "(before) | row rejects | whole gate BLOCK |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, q in (
        ("A/A", p),
        (f"0.5 pt spread (every item -{c * 100:.1f} pt)", spread),
        (f"0.5 pt concentrated ({upto} items never right)", concentrated),
        (f"boundary: E e = margin (every item -{b * 100:.1f} pt)", boundary),
    ):
        for k in (2, 4):
            arms = draw(rng, p, q, k, reps, coupling)
            block, agree, est = rates(gate, arms, "regression", False)
            two_sided = float((np.maximum(p - q, 0) ** 2).mean())
            print(
                f"| {name} | {k} | {two_sided * 100:.2f} pt | {row_estimand(p, q, coupling) * 100:+.2f} pt | "
                f"{est * 100:+.2f} pt | {old_estimate(arms[0], arms[1]) * 100:+.2f} pt | {agree:.3f} | {block:.3f} |"
            )
    print()


# -- the accuracy row alone, vectorized ---------------------------------------------------------------


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


def check(name: str, gate: Gate, x: np.ndarray, y: np.ndarray, primary: np.ndarray) -> None:
    """Replicate j through ``decide``: its primary p must be ours."""
    for j in range(x.shape[0]):
        got = gate.decide(x[j], y[j], None, "difference").suites[0].p_value
        if not math.isclose(got, primary[j], rel_tol=1e-9, abs_tol=1e-12):
            sys.exit(
                f"{name}: replicate {j}: decide's primary p {got} differs from the simulation's {primary[j]}"
            )


def table_accuracy_row(args: argparse.Namespace, rng: np.random.Generator, p: np.ndarray, gate: Gate) -> None:
    n, reps = p.size, args.accuracy_reps
    drop = p * (1 - 0.03 / p.mean())
    se = math.sqrt(ALPHA * (1 - ALPHA) / reps)
    print(
        f"## 3. The accuracy row alone, {n} items, {reps} replicates (Monte Carlo SE at {ALPHA}: {se:.4f})\n"
    )
    print(
        "| k | primary test | false BLOCK at alpha (H0) | power, 3 pt drop, alpha/3 | same, independent draws |"
    )
    print("|---|---|---|---|---|")
    power: dict[tuple[int, float], float] = {}
    for k in (1, 4, 16):
        x, y, _ = draw(rng, p, p, k, reps, args.coupling)
        p0 = primary_p(x, y)
        check(f"H0 k={k}", gate, x[: args.check, :, :], y[: args.check], p0)
        for coupling in (args.coupling, 0.0):
            x1, y1, _ = draw(rng, p, drop, k, reps, coupling)
            p1 = primary_p(x1, y1)
            check(f"drop k={k}", gate, x1[: args.check], y1[: args.check], p1)
            power[k, coupling] = float((p1 < ALPHA / FAMILY).mean())
        test = "McNemar mid-p" if k == 1 else "sign-flip, per-item means"
        print(
            f"| {k} | {test} | {float((p0 < ALPHA).mean()):.4f} | {power[k, args.coupling]:.3f} | "
            f"{power[k, 0.0]:.3f} |"
        )
    for coupling in (args.coupling, 0.0):
        a, b = power[4, coupling], power[1, coupling]
        print(f"\npower ratio, 3 pt drop on {n} items, k = 4 against k = 1, draws shared {coupling:.0%}: "
              f"{a / max(b, 1e-9):.2f}x ({a:.3f} vs {b:.3f}); k = 16: {power[16, coupling]:.3f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--items", type=int, default=300, help="items of the whole-gate scenarios (1, 2)")
    ap.add_argument("--reps", type=int, default=200, help="replicates of each whole-gate scenario (1)")
    ap.add_argument(
        "--row-reps", type=int, default=400, help="replicates of each regression-row scenario (2)"
    )
    ap.add_argument("--accuracy-items", type=int, default=500)
    ap.add_argument("--accuracy-reps", type=int, default=1000, help="replicates of the accuracy row (3)")
    ap.add_argument(
        "--coupling", type=float, default=0.85, help="share of (item, repeat) draws the arms share"
    )
    ap.add_argument("--margin", default="5pt", help="the non-inferiority margin of table 1")
    ap.add_argument(
        "--check", type=int, default=2, help="replicates per accuracy scenario run through decide"
    )
    ap.add_argument("--only", choices=("1", "2", "3"), help="run one table")
    args = ap.parse_args()
    rng, t0 = np.random.default_rng(args.seed), time.perf_counter()
    p = rng.beta(0.7, 0.5, args.items)
    gate = Gate(args.margin)
    print(
        f"p ~ Beta(0.7, 0.5) (mean {p.mean():.3f} on {args.items} items); alpha {ALPHA}; seed {args.seed}; "
        f"Monte Carlo SE at {ALPHA}: {math.sqrt(ALPHA * (1 - ALPHA) / args.reps):.4f} ({args.reps} replicates), "
        f"{math.sqrt(ALPHA * (1 - ALPHA) / args.row_reps):.4f} ({args.row_reps})\n"
    )
    if args.only in (None, "1"):
        table_whole_gate(args, rng, p, gate)
    if args.only in (None, "2"):
        table_regression_row(args, rng, p, gate)
    if args.only in (None, "3"):
        table_accuracy_row(args, rng, rng.beta(0.7, 0.5, args.accuracy_items), gate)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
