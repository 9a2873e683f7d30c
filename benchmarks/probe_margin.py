"""How often does ``probe cache``'s timing test block, before and after its equivalence margin?

Simulates ``--reps`` seeded runs of ``--probes`` probes per scenario: per probe, SAME, CROSS and
COLD latencies with log-normal noise (``--noise``, per request), COLD at 1, SAME at 1 / gap, CROSS
at 1 / speed-up. Each run goes through ``stats.cache_timing_test`` once and is judged two ways:

* before (the rule until #44): BLOCK when CROSS is significantly faster than COLD at all
  (``leak_p < alpha``), so any systematic speed-up blocks once the probes see it;
* after: BLOCK when CROSS is significantly faster than COLD beyond the margin
  (``block_p < alpha``; the margin is ``--share`` of the gap and at least ``--min-margin``).

Scenarios: no speed-up, a 1.09x speed-up that is not the cache (seen on real SGLang with 0
cached tokens), and real cross-tenant hits (CROSS as fast as SAME at gaps of 1.5x and 2.8x), at a
quiet and a busy machine's noise. Prints the block rate of both rules per scenario, as measured.

    python benchmarks/probe_margin.py --seed 0 --reps 300
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.stats import DEFAULT_LEAK_SHARE, DEFAULT_MIN_MARGIN, cache_timing_test

SCENARIOS = (  # name, cache gap (COLD / SAME), CROSS speed-up (COLD / CROSS)
    ("isolated, gap 2.8x", 2.8, 1.0),
    ("1.09x not the cache, gap 2.8x", 2.8, 1.09),
    ("1.09x not the cache, gap 1.5x", 1.5, 1.09),
    ("cross-tenant hit, gap 1.5x", 1.5, 1.5),
    ("cross-tenant hit, gap 2.8x", 2.8, 2.8),
)


def block_rates(
    gap: float, speedup: float, *, probes: int, noise: float, reps: int, alpha: float, seed: int,
    share: float = DEFAULT_LEAK_SHARE, min_margin: float = DEFAULT_MIN_MARGIN, n_resamples: int = 2000,
) -> tuple[float, float]:  # fmt: skip
    """(before, after): the share of ``reps`` seeded runs each rule blocks."""
    rng = np.random.default_rng(seed)
    before = after = 0
    for _ in range(reps):
        cold, same, cross = (
            mean * np.exp(rng.normal(0, noise, probes)) for mean in (1.0, 1.0 / gap, 1.0 / speedup)
        )
        r = cache_timing_test(
            same,
            cross,
            cold,
            share=share,
            min_margin=min_margin,
            alpha=alpha,
            n_resamples=n_resamples,
            rng=rng,
        )
        before += r.leak_p < alpha
        after += r.status == "block"
    return before / reps, after / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.25], help="log-sd per request")
    args = ap.parse_args()
    print(f"{args.reps} runs of {args.probes} probes, alpha {args.alpha}, share {DEFAULT_LEAK_SHARE}, "
          f"min margin {DEFAULT_MIN_MARGIN}x")  # fmt: skip
    print(f"{'scenario':34} {'noise':>6} {'before':>8} {'after':>8}")
    for name, gap, speedup in SCENARIOS:
        for noise in args.noise:
            b, a = block_rates(
                gap,
                speedup,
                probes=args.probes,
                noise=noise,
                reps=args.reps,
                alpha=args.alpha,
                seed=args.seed,
            )
            print(f"{name:34} {noise:6.2f} {b:8.1%} {a:8.1%}")


if __name__ == "__main__":
    main()
