"""Coverage of the item-level and the category-clustered interval of delta under a clustered change (#44).

Paired items come in G clusters (subjects) of m items. The baseline is right with probability
0.6. A baseline-right item turns wrong with probability expit(logit(loss) + sigma * z_g), where
z_g ~ N(0, 1) is drawn once per cluster: the change is stronger in some subjects than in others
(sigma = 0: the same everywhere). A baseline-wrong item turns right with probability ``gain``.
The target is the population delta, averaged over the cluster effect (the subjects run are one
draw of the subjects there could be):

    delta = (1 - 0.6) * gain - 0.6 * E[expit(logit(loss) + sigma z)],

the expectation by Gauss-Hermite quadrature. Per replicate both intervals of
``evalgate.stats.clustered_diff_ci`` are computed on the same draw, one item per cluster
(the paired t interval) and clustered by subject (CR1, t with G - 1 df), as the gate's
per-category section does for a suite's overall delta (gate/_categories.py). Printed per design
and sigma: each interval's coverage of delta and the mean ratio of their widths.

    python benchmarks/clustered_coverage.py --seed 0 --reps 2000

Monte Carlo error of a coverage near 0.95 at 2000 replicates: 0.005 (one standard error).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import expit, logit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalgate.stats import clustered_diff_ci

BASELINE = 0.6
DESIGNS = ((57, 10), (14, 40))
"""(clusters, items per cluster): MMLU's 57 subjects, MMLU-Pro's 14 categories."""
SIGMAS = (0.0, 0.5, 1.0, 1.5)


@dataclass(frozen=True)
class Coverage:
    """One design and sigma over ``reps`` replicates."""

    clusters: int
    per_cluster: int
    sigma: float
    reps: int
    delta: float
    """The population delta every interval is meant to cover."""
    item: float
    """Share of replicates whose item-level interval covers ``delta``."""
    clustered: float
    width_ratio: float
    """Mean over replicates of clustered width / item-level width."""


def true_delta(loss: float, gain: float, sigma: float) -> float:
    """The population delta, E over the cluster effect by 40-point Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite_e.hermegauss(40)  # weight exp(-x^2 / 2)
    mean_loss = float(np.sum(w * expit(logit(loss) + sigma * x)) / np.sum(w))
    return (1 - BASELINE) * gain - BASELINE * mean_loss


def simulate(
    clusters: int, per_cluster: int, sigma: float, *, reps: int, rng: np.random.Generator,
    loss: float = 0.05, gain: float = 0.03, confidence: float = 0.95,
) -> Coverage:  # fmt: skip
    """Coverage of both intervals over ``reps`` seeded replicates of one design."""
    delta = true_delta(loss, gain, sigma)
    labels = np.repeat(np.arange(clusters), per_cluster).tolist()
    items = list(range(clusters * per_cluster))
    hits_item = hits_clustered = 0
    ratios = []
    for _ in range(reps):
        z = rng.standard_normal(clusters)
        lose = np.repeat(expit(logit(loss) + sigma * z), per_cluster)
        b = rng.random(len(items)) < BASELINE
        flip = rng.random(len(items)) < np.where(b, lose, gain)
        c = b ^ flip
        item = clustered_diff_ci(b.astype(float), c.astype(float), items, confidence=confidence)
        grouped = clustered_diff_ci(b.astype(float), c.astype(float), labels, confidence=confidence)
        hits_item += item.low <= delta <= item.high
        hits_clustered += grouped.low <= delta <= grouped.high
        if item.high > item.low:
            ratios.append((grouped.high - grouped.low) / (item.high - item.low))
    ratio = float(np.mean(ratios)) if ratios else float("nan")
    return Coverage(clusters, per_cluster, sigma, reps, delta, hits_item / reps, hits_clustered / reps, ratio)


def main(argv: list[str] | None = None) -> list[Coverage]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--designs", default=",".join(f"{g}x{m}" for g, m in DESIGNS), help="GxM,...")
    ap.add_argument("--sigmas", default=",".join(str(s) for s in SIGMAS))
    args = ap.parse_args(argv)
    designs = [tuple(int(v) for v in d.split("x")) for d in args.designs.split(",")]
    sigmas = [float(s) for s in args.sigmas.split(",")]
    start = time.perf_counter()
    print(f"coverage of delta by 95% intervals over {args.reps} replicates (seed {args.seed}); baseline "
          f"{BASELINE}, loss 5% (logit-normal per cluster, sd sigma), gain 3%")  # fmt: skip
    print("| clusters x items | sigma | delta | item-level | clustered | width ratio |")
    print("|---|--:|--:|--:|--:|--:|")
    out = []
    for g, m in designs:
        for sigma in sigmas:
            rng = np.random.default_rng([args.seed, g, m, int(sigma * 1000)])
            r = simulate(g, m, sigma, reps=args.reps, rng=rng)
            out.append(r)
            print(f"| {g} x {m} | {sigma:g} | {r.delta * 100:+.2f} pt | {r.item:.3f} | {r.clustered:.3f} | "
                  f"{r.width_ratio:.2f} |", flush=True)  # fmt: skip
    print(f"\n{time.perf_counter() - start:.0f} s")
    return out


if __name__ == "__main__":
    main()
