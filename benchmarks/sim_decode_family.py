"""The drift family's verdicts over replicates (#53): how often the whole gate falsely BLOCKs an A/A
pair on a non-deterministic engine, and an honest small drift, with every decode-path row in it.

Each replicate builds real drift suite version 3 records from the toy model world of the tests
(``tests/helpers/drift_world.py``: a seeded next-token model, greedy decoding, teacher-forced
reads, the reads a prefill engine's run holds) on fresh documents and a fresh model, and runs
``evalgate.gate.decide`` with ``GatePolicy`` defaults under ``--policy regression`` and
``difference``. Scenarios:

- ``aa-noise``: the candidate is the baseline up to a seeded per-position logit noise (KL about
  1e-5 nats/token, on every pass: a GPU's batch-dependent reductions), which now and then flips a
  near-tie, so some documents' greedy texts part; every BLOCK is a false one.
- ``honest``: a drift of 0.1 x the KL budget on every pass, in a random direction (most
  documents part somewhere at a near-tie): a candidate the gate should PASS.

The world by default has each document end at a stop token somewhere in ``decode/4..decode``
(lengths vary, as solutions do) and a small prefill-only logit noise on both arms (``--path-noise``:
a prefill pass never reads exactly what decode steps read), so the length and within-arm rows have
something to size. Prints per scenario and policy the shares of BLOCK, powered PASS, PASS with an UNDERPOWERED gated
row (``pass-weak``) and anything else (INCONCLUSIVE, ERROR), each with its Clopper-Pearson 95 %
interval, the rows that blocked and those UNDERPOWERED (measure/path/span), and the wall time. Rows the gate does not
build (before the fix: cross, length, consistency) are simply absent.

    python -m benchmarks.sim_decode_family --reps 200          # about 5 s a replicate (both policies), one core
    python benchmarks/sim_decode_family.py --reps 5 --docs 20 --decode 64   # a smoke run
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.gate import DEFAULT_KLD_BUDGET, GatePolicy, decide
from evalgate.stats import clopper_pearson
from tests.helpers.drift_world import Fault, World, records

POLICIES = ("regression", "difference")
OUTCOMES = ("BLOCK", "PASS", "pass-weak", "other")
SCENARIOS = {
    "aa-noise": lambda rep: Fault(kl=1e-5, where="both", seed=rep),
    "honest": lambda rep: Fault(kl=0.1 * DEFAULT_KLD_BUDGET, where="both", seed=rep),
}


def outcome(verdict) -> tuple[str, list[str], list[str]]:
    """(BLOCK, PASS powered, pass-weak: a PASS with an UNDERPOWERED gated row, or other; the
    blocking rows; the UNDERPOWERED rows)."""
    gated = [r for d in verdict.drift for r in d.rows if r.gated]
    blocking = [f"{r.measure}/{r.path}/{r.span or 'all'}" for r in gated if r.status == "block"]
    weak = [f"{r.measure}/{r.path}/{r.span or 'all'}" for r in gated if r.status == "underpowered"]
    if verdict.verdict == "BLOCK":
        return "BLOCK", blocking, weak
    if verdict.verdict == "PASS":
        return ("pass-weak" if weak else "PASS"), blocking, weak
    return "other", blocking, weak


Counts = tuple[collections.Counter, collections.Counter, collections.Counter]


def simulate(scenario: str, args: argparse.Namespace) -> dict[str, Counts]:
    """Per policy: (outcome counts, blocking-row counts, underpowered-row counts) over the replicates."""
    out = {p: (collections.Counter(), collections.Counter(), collections.Counter()) for p in POLICIES}
    length = None if args.no_stop else (args.decode // 4, args.decode)
    for rep in range(args.reps):
        fault = SCENARIOS[scenario](rep)
        world = World(seed=args.seed * 100_003 + rep, length=length, path_noise=args.path_noise, fault=fault)
        pairs = records(world, args.docs, path=args.path, decode_tokens=args.decode, seed=rep)
        for policy in POLICIES:
            v = decide(
                {"drift": (("loglik", "tokens"), pairs)},
                policy=GatePolicy(policy=policy),
                kinds={"drift": "drift"},
            )
            kind, rows, weak = outcome(v)
            out[policy][0][kind] += 1
            out[policy][1].update(rows)
            out[policy][2].update(weak)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--docs", type=int, default=50)
    ap.add_argument("--decode", type=int, default=256, help="greedy tokens per document")
    ap.add_argument(
        "--path", choices=("prefill", "decode"), default="prefill", help="the engine's forced path"
    )
    ap.add_argument("--scenarios", nargs="+", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--path-noise",
        type=float,
        default=0.02,
        help="logit noise of the prefill pass on both arms (prefill and decode kernels differ)",
    )
    ap.add_argument(
        "--no-stop",
        action="store_true",
        help="generations never stop on their own (default: each document ends somewhere in decode/4..decode)",
    )
    args = ap.parse_args(argv)
    print(
        f"## The drift family's verdicts: {args.reps} replicates, {args.docs} documents, "
        f"{args.decode} greedy tokens, {args.path} engine, prefill noise {args.path_noise}, "
        f"{'no stop' if args.no_stop else 'natural lengths'}, GatePolicy defaults, seed {args.seed}"
    )
    for scenario in args.scenarios:
        t0 = time.perf_counter()
        result = simulate(scenario, args)
        wall = time.perf_counter() - t0
        print(f"\n### {scenario} ({wall:.1f} s, {wall / max(1, args.reps):.2f} s a replicate)")
        print("| policy | " + " | ".join(OUTCOMES) + " | rows that blocked | rows UNDERPOWERED |")
        print("|---" * (len(OUTCOMES) + 3) + "|")
        for policy, (counts, rows, weak) in result.items():
            cells = []
            for kind in OUTCOMES:
                lo, hi = clopper_pearson(counts[kind], args.reps)
                cells.append(f"{counts[kind] / args.reps:.3f} [{lo:.3f}, {hi:.3f}]")
            blocked = ", ".join(f"{name} x{k}" for name, k in rows.most_common()) or "none"
            under = ", ".join(f"{name} x{k}" for name, k in weak.most_common()) or "none"
            print(f"| {policy} | " + " | ".join(cells) + f" | {blocked} | {under} |")


if __name__ == "__main__":
    main()
