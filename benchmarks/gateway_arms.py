"""One llama-server per arm against N workers behind smg per arm, side by side (#34).

    python benchmarks/gateway_arms.py --data-dir ../shared/data [--workers 2] [--rounds 2] [--limit 20]

Each round runs, in alternating order (the machine is noisy), the same ``evalgate compare
--baseline bf16 --candidate fp8kv`` and the same ``evalgate bench`` on both layouts, with the same
cores and slots in all: one server of ``threads`` threads and ``parallel`` slots, or ``workers``
servers of threads/workers threads and parallel/workers slots each behind one smg. Prints the
compare's wall time, items per second and verdict, the bench's output tok/s per concurrency level,
and each ratio gateway / one server. With ``--deterministic`` the per-item records of the two
layouts are also compared, record by record.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUITES = "arc_easy,gsm8k,drift"


def config(workers: int, threads: int, parallel: int, deterministic: bool) -> str:
    per = max(1, threads // workers), max(1, parallel // workers)
    lines = ["[llamacpp]", f"workers = {workers}", f"threads = {per[0]}", f"parallel = {per[1]}"]
    if deterministic:
        lines.append("deterministic = true")
    return "\n".join(lines) + "\n"


def evalgate(*args: str) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "evalgate", *args], capture_output=True, text=True)
    return proc.returncode, time.perf_counter() - t0, proc.stdout + proc.stderr


def records(run: Path) -> dict[tuple[str, str, str], Any]:
    out = {}
    for path in sorted((run / "items").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            out[(r["arm"], r["suite"], r["item_id"])] = (r["metrics"], r["response"])
    return out


def one(layout: str, workers: int, args: argparse.Namespace, tmp: Path, r: int) -> dict[str, Any]:
    folder = tmp / f"{layout}-{r}"
    folder.mkdir()
    cfg = folder / "evalgate.toml"
    cfg.write_text(config(workers, args.threads, args.parallel, args.deterministic), encoding="utf-8")
    run = folder / "run"
    compare = ["compare", "--config", str(cfg), "--baseline", "bf16", "--candidate", "fp8kv"]
    compare += [
        "--suites",
        SUITES,
        "--limit",
        str(args.limit),
        "--data-dir",
        str(args.data_dir),
        "--out",
        str(run),
    ]
    if args.deterministic:
        compare.append("--deterministic")
    code, wall, text = evalgate(*compare)
    if code not in (0, 1):
        raise SystemExit(f"{layout} compare failed ({code}):\n{text[-2000:]}")
    verdict = json.loads((run / "verdict.json").read_text(encoding="utf-8"))
    n = len(records(run))
    bench = [
        "bench",
        "--config",
        str(cfg),
        "--levels",
        args.levels,
        "--input-len",
        "128",
        "--output-len",
        "32",
    ]
    code, _, text = evalgate(*bench, "--out", str(folder / "bench"))
    if code != 0:
        raise SystemExit(f"{layout} bench failed ({code}):\n{text[-2000:]}")
    tp = json.loads((folder / "bench" / "throughput.json").read_text(encoding="utf-8"))
    levels = {
        int(row["concurrency"]): row.get("output_tok_s")
        for row in (tp.get("arms", {}).get("baseline", {}).get("levels") or [])
    }
    return {"wall": wall, "records": n, "verdict": verdict.get("verdict"), "tok_s": levels, "run": run}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per arm, in all (default: 2)")
    ap.add_argument("--parallel", type=int, default=4, help="slots per arm, in all (default: 4)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--levels", default="1,2,4")
    ap.add_argument("--deterministic", action="store_true")
    args = ap.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {"one": [], "gateway": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [("one", 1), ("gateway", args.workers)]
            for layout, workers in order if r % 2 == 0 else order[::-1]:
                rows[layout].append(one(layout, workers, args, Path(tmp), r))
                got = rows[layout][-1]
                print(f"round {r} {layout}: {got['wall']:.1f} s, {got['records']} records, {got['verdict']}, "
                      f"tok/s {got['tok_s']}", flush=True)  # fmt: skip
            if args.deterministic:
                same = records(rows["one"][-1]["run"]) == records(rows["gateway"][-1]["run"])
                print(f"round {r}: per-item records {'identical' if same else 'DIFFER'}", flush=True)
    print(f"\n| layout | compare wall s | items/s | bench output tok/s at {args.levels} |")
    print("|---|---|---|---|")
    for layout, got in rows.items():
        wall = sum(g["wall"] for g in got) / len(got)
        rate = sum(g["records"] / g["wall"] for g in got) / len(got)
        levels = sorted(got[0]["tok_s"])
        tok = " / ".join(f"{sum(g['tok_s'].get(c) or 0 for g in got) / len(got):.1f}" for c in levels)
        print(
            f"| {'1 server' if layout == 'one' else f'{args.workers} workers + smg'} | {wall:.1f} | {rate:.2f} | {tok} |"
        )
    one_wall = sum(g["wall"] for g in rows["one"]) / len(rows["one"])
    gw_wall = sum(g["wall"] for g in rows["gateway"]) / len(rows["gateway"])
    print(f"\nratio gateway / one server: wall x{gw_wall / one_wall:.2f}")


if __name__ == "__main__":
    main()
