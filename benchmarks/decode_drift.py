"""The decode-path drift (#42): what it costs per document against the prefill path, side by side on
one server, and how often a 50-document drift row decides for the CPU default's candidates.

    python benchmarks/decode_drift.py cost [--engine llamacpp|sglang] [--docs 20] [--decode-tokens 64]
    python benchmarks/decode_drift.py power RUN [RUN ...] [--n 50] [--reps 400]

``cost`` launches one baseline server (llama.cpp by default; ``--engine sglang`` needs ``evalgate
setup --sglang-cpu``) and, per GSM8K train document and alternating their order, times the forced
positions (``Scorer.token_distributions``: 32 solution tokens; llama.cpp generates them through
a token-id grammar, SGLang reads them as prompt logprobs) against a greedy generation with its
per-step top-k (``Scorer.decode_distributions``). It prints the median seconds per document of
each, per position, and their ratio.

``power`` reads run folders with a drift suite of more documents than ``--n`` (e.g. ``evalgate
compare --config kv4.toml --baseline bf16 --candidate C --suites drift --limit 100``), draws
``--n`` documents with replacement ``--reps`` times, and runs the gate's decode-path KL row on each
draw: the share that decides (BLOCK: lower bound above the budget; PASS, powered: upper bound
below it), against the share left UNDERPOWERED.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from evalgate import stats
from evalgate.engines.api import LaunchSlot
from evalgate.gate import DEFAULT_KLD_BUDGET, RunData
from evalgate.store.drift_records import forced_of, greedy_of


async def _cost(
    scorer, docs: list[tuple[str, str]], *, forced: int, decode: int, top_k: int
) -> dict[str, list[float]]:
    from evalgate.suites.drift import _read

    out: dict[str, list[float]] = {
        "forced": [], "decode": [], "forced_pos": [], "decode_pos": [], "own": [], "cross": [],
    }  # fmt: skip
    generated: list[tuple[int, ...]] = []
    finish: list[str] = []

    async def run_forced(context: list[int], scored: list[int]) -> None:
        t = time.perf_counter()
        got = await scorer.token_distributions([*context, *scored], start=len(context), top_k=top_k)
        out["forced"].append(time.perf_counter() - t)
        out["forced_pos"].append(len(got))

    async def run_decode(context: list[int], scored: list[int]) -> None:
        t = time.perf_counter()
        got = await scorer.decode_distributions(context, max_tokens=decode, top_k=top_k)
        out["decode"].append(time.perf_counter() - t)
        out["decode_pos"].append(len(got.tokens))
        generated.append(got.tokens)
        finish.append(got.finish_reason)

    async def run_reads(context: list[int]) -> None:
        """Drift suite v3's reads (#53), as ``suites/drift.py`` makes them: on a prefill engine its
        own text re-read with its top-k (the consistency row), and the other arm's text read with
        lp only (the cross row), timed on this arm's own text, the cost of a text that parted at
        its first token (the most a read costs: the whole generation)."""
        ids, stop = list(generated[-1]), finish[-1] == "stop"
        if scorer.forced_path == "prefill":
            t = time.perf_counter()
            await _read(scorer, context, ids, stop, top_k=top_k)
            out["own"].append(time.perf_counter() - t)
        t = time.perf_counter()
        await _read(scorer, context, ids, stop, top_k=1, keep_top=False)
        out["cross"].append(time.perf_counter() - t)

    for i, (question, answer) in enumerate(docs):  # alternate which runs first: the machines are noisy
        context = await scorer.tokenize(question + "\n")
        scored = (await scorer.tokenize(answer))[:forced]
        for step in (run_forced, run_decode) if i % 2 == 0 else (run_decode, run_forced):
            await step(context, scored)
        await run_reads(context)
    return out


def cost(args: argparse.Namespace) -> None:
    from evalgate.config import EvalgateConfig
    from evalgate.engines import get_engine
    from evalgate.suites.drift import _documents
    from evalgate.variants import parse_variant

    cfg = EvalgateConfig()
    if args.engine == "sglang":
        cfg = EvalgateConfig.model_validate({"sglang": {"device": "cpu"}})
    engine = get_engine(args.engine, cfg)
    docs = list(_documents(str(Path(args.data_dir) / "gsm8k/train.jsonl")))[: args.docs]
    spec = engine.launch_spec(parse_variant("bf16"))
    with tempfile.TemporaryDirectory() as logs, engine.launch(spec, LaunchSlot("baseline", Path(logs))) as h:
        scorer = engine.scorer(h)

        async def go() -> dict[str, list[float]]:
            try:
                return await _cost(scorer, docs, forced=32, decode=args.decode_tokens, top_k=20)
            finally:
                await scorer.aclose()

        out = asyncio.run(go())
    f, d = statistics.median(out["forced"]), statistics.median(out["decode"])
    fp, dp = statistics.median(out["forced_pos"]), statistics.median(out["decode_pos"])
    print(f"engine {args.engine}, {len(docs)} documents, forced path: {scorer.forced_path}, top 20")
    print(f"forced ({fp:.0f} positions): {f:.3f} s/document, {f / fp * 1000:.1f} ms/position")
    print(f"greedy decode ({dp:.0f} positions): {d:.3f} s/document, {d / dp * 1000:.1f} ms/position")
    print(f"ratio decode / forced: x{d / f:.2f} per document, x{(d / dp) / (f / fp):.2f} per position")
    # the drift suite's own work per arm and document with a greedy generation (on a prefill
    # engine always; on llama.cpp only with drift.decode_tokens set, else neither version reads
    # anything more): version 2 (forced positions and the generation) against version 3 (and reads)
    before = [fo + de for fo, de in zip(out["forced"], out["decode"], strict=True)]
    own = out["own"] or [0.0] * len(before)
    after = [b + o + x for b, o, x in zip(before, own, out["cross"], strict=True)]
    if scorer.forced_path == "prefill":
        print(f"own re-read (consistency, top 20): {statistics.median(own):.3f} s/document")
    print(f"cross read (lp only, a whole text): {statistics.median(out['cross']):.3f} s/document")
    b, a = statistics.median(before), statistics.median(after)
    print(
        f"drift suite per arm and document, every text parted: v2 {b:.3f} s, v3 {a:.3f} s, "
        f"ratio v3 / v2 x{a / b:.2f}; reads added: {1 + bool(out['own'])} (own re-read "
        f"{'yes' if out['own'] else 'no: forced tokens already decode'}, one cross read)"
    )


def power(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    print(
        f"| candidate | documents | path | mean KL (all) | P(BLOCK) | P(PASS, powered) | P(UNDERPOWERED) | n = {args.n} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run_dir in args.runs:
        run = RunData(run_dir)
        pairs = run.pairs["drift"]
        sums, counts, path = [], [], ""
        for p in pairs:
            g = greedy_of(p.baseline), greedy_of(p.candidate)
            if g[0] is not None and g[1] is not None:
                from evalgate.gate._decode_drift import greedy_klds

                kl = greedy_klds(g[0], g[1])[0]
                path = "decode (greedy)"
            else:
                b, c = forced_of(p.baseline), forced_of(p.candidate)
                forced = None if b.ids is None else list(zip(b.ids, b.lp, c.lp, strict=True))
                kl = stats.position_klds(b.top, c.top, forced=forced)
                path = b.path or "forced"
            if kl.size:
                sums.append(float(kl.sum()))
                counts.append(float(kl.size))
        x, y = np.array(sums), np.array(counts)
        decided = {"block": 0, "pass": 0, "open": 0}
        for _ in range(args.reps):
            idx = rng.integers(0, x.size, size=args.n)
            t = stats.ratio_budget_test(x[idx], y[idx], budget=DEFAULT_KLD_BUDGET, n_resamples=2000, seed=rng)
            key = (
                "block"
                if t.lower > DEFAULT_KLD_BUDGET
                else "pass"
                if t.upper < DEFAULT_KLD_BUDGET
                else "open"
            )
            decided[key] += 1
        share = {k: v / args.reps for k, v in decided.items()}
        print(
            f"| {run.manifest.request.candidate} | {x.size} | {path} | {x.sum() / y.sum():.3g} "
            f"| {share['block']:.3f} | {share['pass']:.3f} | {share['open']:.3f} | |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost", help="seconds per document: forced path, greedy decode, the #53 reads")
    c.add_argument("--engine", choices=("llamacpp", "sglang"), default="llamacpp")
    c.add_argument("--docs", type=int, default=20)
    c.add_argument("--decode-tokens", type=int, default=64)
    c.add_argument("--data-dir", default="../shared/data")
    p = sub.add_parser("power", help="how often a drift row at n documents decides")
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cost(args) if args.what == "cost" else power(args)


if __name__ == "__main__":
    main()
