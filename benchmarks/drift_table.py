"""The drift rows of several runs side by side, and their per-document numbers as a CSV (#30).

    python benchmarks/drift_table.py RUN [RUN ...] [--csv benchmarks/data/drift_cpu.csv]

Each RUN is a run folder with a ``drift`` suite (e.g. ``evalgate compare --baseline bf16
--candidate kv4 --suites drift --limit 50``). Prints, per run: the candidate, the mean KL with its
one-sided bounds, the perplexity ratio, top-1 agreement, the per-token KL quantiles, the verdict
and the wall time of the drift suite on each arm (from the manifest). The CSV holds one line per
document and run (KL sum, positions, top-1 agreements, both log-likelihoods), which
``benchmarks/sim_drift.py --section gate`` calibrates its whole-gate simulation to.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from evalgate import stats
from evalgate.gate import RunData, verdict_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--csv", type=Path, default=None, help="write the per-document numbers here")
    args = ap.parse_args()
    lines = []
    print("| candidate | mean KL (nats/token) [lower, upper] | perplexity ratio [lower, upper] | top-1 agree "
          "| KL p50 / p99 / p99.9 | verdict | drift s (baseline / candidate) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for run_dir in args.runs:
        run = RunData(run_dir)
        m = run.manifest
        v = verdict_for(run)
        (section,) = [d for d in v.drift if d.suite == "drift"]
        rows = {r.measure: r for r in section.rows if r.pair == "candidate"}
        kld, ppl, top1 = rows["kld"], rows["ppl_ratio"], rows["top1_agree"]
        q = section.quantiles["candidate"]
        secs = [m.arms[a].durations_s.get("drift", float("nan")) for a in ("baseline", "candidate")]
        print(
            f"| {m.request.candidate} | {kld.estimate:.3g} [{kld.lower:.3g}, {kld.upper:.3g}] "
            f"| {ppl.estimate:.4f} [{ppl.lower:.4f}, {ppl.upper:.4f}] | {top1.estimate:.1%} "
            f"| {q['p50']:.2g} / {q['p99']:.2g} / {q['p99.9']:.2g} | {v.verdict} | {secs[0]:.0f} / {secs[1]:.0f} |"
        )
        for p in run.pairs["drift"]:
            tb, tc = p.baseline.response["top"], p.candidate.response["top"]
            doc = stats.document_drift(tb, tc)
            lines.append({
                "candidate": m.request.candidate, "document": p.item_id, "positions": doc.n,
                "kld_sum": doc.kld_sum, "top1_same": doc.top1_same,
                "loglik_baseline": p.baseline.metrics["loglik"], "loglik_candidate": p.candidate.metrics["loglik"],
            })  # fmt: skip
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(lines[0]))
            w.writeheader()
            w.writerows(lines)
        print(f"wrote {args.csv} ({len(lines)} documents)")


if __name__ == "__main__":
    main()
