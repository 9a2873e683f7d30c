"""Is evalgate's client path faster than lm-eval's ``local-completions`` on the same instant server?

One stub server (benchmarks/_stub_server.py, its own process) answers instantly, so items/s is the
harness's own cost. The same items (evalgate's seeded ARC-Easy and GSM8K selection, with
``--data-dir``) go through:

* evalgate: ``LlamaCppScorer`` via ``LmEvalSuite.run``, ``--concurrency`` items at a time (as
  ``runner._run_suite``), tokenizing with ``/tokenize`` and scoring with a token-id grammar;
* lm-eval ``local-completions`` (``LocalCompletionsAPI``), ``num_concurrent=--concurrency``,
  ``batch_size=1``, ``tokenizer_backend="auto"``: with a server that has ``/tokenizer_info`` (as
  vLLM does) lm-eval picks its ``remote`` tokenizer, what a user gets with no HF download;
* the same lm-eval model with its tokenizer swapped for a zero-cost local lookup: a lower bound for
  ``tokenizer_backend=huggingface`` (what llama-server users must configure), for reference.

Both sides apply the task's filters and ``process_results`` per document (lm-eval on its own,
freshly built task objects), and neither writes records. Rounds alternate the order; medians are reported, and the answers of
the two harnesses are checked to be identical.

    python benchmarks/harness_overhead.py --data-dir ../shared/data --profile 25
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_eval.utils  # before evalgate: SHIPPED is lm-eval as installed
from _stub_server import _PIECE, serve_in_subprocess

from evalgate.engines import ServerHandle
from evalgate.engines.llamacpp import LlamaCppScorer
from evalgate.suites import Item, SuiteOptions, default_registry
from evalgate.suites._lmeval import LmEvalSuite, _load_task, score

SHIPPED = dict(vars(lm_eval.utils))


@contextlib.contextmanager
def lmeval_as_shipped() -> Iterator[None]:
    """Undo, for the lm-eval side only, anything evalgate may patch in ``lm_eval.utils`` (e.g. a
    template cache), so each harness is timed with its own code."""
    now = dict(vars(lm_eval.utils))
    changed = [k for k, v in SHIPPED.items() if now.get(k) is not v]
    for k in changed:
        setattr(lm_eval.utils, k, SHIPPED[k])
    try:
        yield
    finally:
        for k in changed:
            setattr(lm_eval.utils, k, now[k])


Answers = dict[str, list[Any]]  # suite -> per item: [(loglik, greedy), ...] or the generated text


def agree(a: Answers, b: Answers) -> bool:
    """Same answers, log-likelihoods to 1e-5 (evalgate records them rounded to 6 places)."""

    def same(x: Any, y: Any) -> bool:
        if isinstance(x, str) or isinstance(y, str):
            return x == y
        return len(x) == len(y) and all(
            abs(p - q) < 1e-5 and g == h for (p, g), (q, h) in zip(x, y, strict=True)
        )

    return a.keys() == b.keys() and all(len(a[k]) == len(b[k]) and all(map(same, a[k], b[k])) for k in a)


def evalgate_round(
    url: str, work: list[tuple[LmEvalSuite, list[Item]]], opts: SuiteOptions, conc: int
) -> Answers:
    """evalgate's path: a fresh scorer (empty tokenize cache), suites in turn, ``conc`` items at once."""

    async def go() -> Answers:
        handle = ServerHandle("stub", url, "stub-key", [], Path(os.devnull))
        scorer = LlamaCppScorer(handle, concurrency=conc)
        out: Answers = {}
        try:
            for suite, items in work:
                sem = asyncio.Semaphore(scorer.concurrency)

                async def one(item: Item, _suite: LmEvalSuite = suite, _sem: asyncio.Semaphore = sem) -> Any:
                    async with _sem:
                        return (await _suite.run(item, scorer, opts)).response

                resps = await asyncio.gather(*(one(it) for it in items))
                out[suite.name] = [[(ll, g) for ll, g in r] if isinstance(r, list) else r for r in resps]
        finally:
            await scorer.aclose()
        return out

    return asyncio.run(go())


def lmeval_round(lm: Any, work: list[tuple[LmEvalSuite, list[Item]]], tasks: dict[str, Any]) -> Answers:
    """lm-eval's model layer on the very same Instances, then per-document scoring with lm-eval's
    own task objects (``tasks``: fresh ones, untouched by evalgate)."""
    out: Answers = {}
    # lm-eval's tqdm bars cannot all be disabled
    with lmeval_as_shipped(), contextlib.redirect_stderr(io.StringIO()):
        for suite, items in work:
            insts = [inst for it in items for inst in it.payload[2]]
            if insts[0].request_type == "loglikelihood":
                flat = iter(lm.loglikelihood(insts, disable_tqdm=True))
            else:
                flat = iter(lm.generate_until(insts, disable_tqdm=True))
            answers = []
            for it in items:
                _, doc, instances, _ = it.payload
                resps = [next(flat) for _ in instances]
                score(tasks[suite.name], doc, instances, resps)
                answers.append([(ll, g) for ll, g in resps] if isinstance(resps[0], tuple) else resps[0])
            out[suite.name] = answers
    return out


class LocalTokenizer:
    """A zero-cost stand-in for an in-process HF tokenizer: a lookup table filled from the stub's
    ``/tokenize`` before timing (same ids as the server), so lm-eval pays no tokenizer cost."""

    eos_token, bos_token, pad_token, bos_token_id = "</s>", None, None, None
    eos_token_id = eot_token = 1

    def __init__(self, lm: Any, texts: list[str]) -> None:
        self.table: dict[str, list[int]] = {}
        self.pieces: dict[int, str] = {1: "</s>"}
        for text in texts:
            ids = lm.tokenizer.encode(text)
            self.table[text] = ids
            self.pieces.update(zip(ids, _PIECE.findall(text), strict=True))

    def encode(self, text: str) -> list[int]:
        return self.table[text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.pieces[t] for t in tokens)

    def batch_decode(self, batch: list[list[int]]) -> list[str]:
        return [self.decode(t) for t in batch]


def tokenized_texts(work: list[tuple[LmEvalSuite, list[Item]]]) -> list[str]:
    """Every string lm-eval's ``_encode_pair`` and ``generate_until`` will tokenize."""
    texts = []
    for _, items in work:
        for it in items:
            for ctx, cont in (inst.args[:2] for inst in it.payload[2]):
                if isinstance(cont, dict):
                    texts.append(ctx)
                    continue
                n = len(ctx) - len(ctx.rstrip())
                ctx, cont = (ctx[:-n], ctx[-n:] + cont) if n else (ctx, cont)
                texts += [ctx + cont, ctx]
    return texts


def make_lm(url: str, conc: int, local_tokenizer: LocalTokenizer | None = None) -> Any:
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    lm = LocalCompletionsAPI(
        base_url=f"{url}/v1/completions", model="stub", tokenizer_backend="auto",
        num_concurrent=conc, batch_size=1, max_retries=3, tokenized_requests=True,
    )  # fmt: skip
    assert lm.tokenizer_backend == "remote", lm.tokenizer_backend
    if local_tokenizer is not None:
        lm.tokenizer = local_tokenizer
    return lm


def stub_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/stub/stats", timeout=10) as resp:
        return dict(json.load(resp))


def timed(url: str, fn: Callable[[], Answers]) -> tuple[float, Answers, dict[str, int]]:
    """Seconds, answers, and the requests the stub served meanwhile (counted outside the timing)."""
    before = stub_stats(url)
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    after = stub_stats(url)
    return seconds, out, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def profile(fn: Callable[[], Any], top: int) -> str:
    prof = cProfile.Profile()
    prof.runcall(fn)
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return "\n".join(line for line in buf.getvalue().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="folder laid out like shared/data")
    parser.add_argument("--arc", type=int, default=200, help="ARC-Easy items (loglikelihood)")
    parser.add_argument("--gsm8k", type=int, default=50, help="GSM8K items (generation)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight, both harnesses")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians reported")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile evalgate, top N")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("lm_eval").setLevel(logging.ERROR)

    opts = SuiteOptions(data_dir=args.data_dir, seed=args.seed)
    reg = default_registry()
    work: list[tuple[LmEvalSuite, list[Item]]] = []
    for name, n in (("arc_easy", args.arc), ("gsm8k", args.gsm8k)):
        suite = reg.get(name)
        assert isinstance(suite, LmEvalSuite)
        if n > 0:
            work.append((suite, suite.load(opts, n)))
    _load_task.cache_clear()  # the lm-eval side scores with its own, freshly built task objects
    with lmeval_as_shipped():
        fresh = {s.name: s.task(opts) for s, _ in work}
    n_items = sum(len(items) for _, items in work)
    n_req = sum(len(it.payload[2]) for _, items in work for it in items)
    texts = tokenized_texts(work)
    c = args.concurrency
    print(f"items: {', '.join(f'{s.name} {len(i)}' for s, i in work)} ({n_items} items, {n_req} requests)")
    print(f"concurrency: {c} requests in flight on both sides (evalgate LlamaCppScorer(concurrency={c}),")
    print(f"  lm-eval num_concurrent={c}); instant stub server in its own process on 127.0.0.1")
    print('lm-eval: LocalCompletionsAPI(tokenizer_backend="auto" -> "remote", tokenized_requests=True,')
    print("  batch_size=1, max_retries=3); 'local tok' = same, tokenizer replaced by a zero-cost lookup")

    names = ("evalgate", "lm-eval", "lm-eval local tok")
    times: dict[str, list[float]] = {k: [] for k in names}
    with serve_in_subprocess(lifetime_s=600) as url:
        local_tok = LocalTokenizer(make_lm(url, c), texts)
        for r in range(args.rounds):
            lm, lm_local = make_lm(url, c), make_lm(url, c, local_tok)
            runs: dict[str, Callable[[], Answers]] = {
                "evalgate": lambda: evalgate_round(url, work, opts, c),
                "lm-eval": lambda lm=lm: lmeval_round(lm, work, fresh),
                "lm-eval local tok": lambda lm=lm_local: lmeval_round(lm, work, fresh),
            }
            order = names if r % 2 == 0 else names[::-1]
            answers = {}
            for k in order:
                t, answers[k], served = timed(url, runs[k])
                times[k].append(t)
                if r == 0:
                    calls = ", ".join(f"{p} {m}" for p, m in sorted(served.items()))
                    print(f"  {k:18} requests per round: {calls}")
            same = all(agree(answers["evalgate"], answers[k]) for k in names[1:])
            row = "  ".join(f"{k} {n_items / times[k][-1]:7.1f}" for k in names)
            print(f"round {r + 1}: items/s  {row}  (answers identical: {same})")
            if not same:
                print("ERROR: the harnesses disagree on the answers; the comparison is void")
                return 1
        if args.profile:
            print(f"\ncProfile of one evalgate round (top {args.profile}):")
            print(profile(lambda: evalgate_round(url, work, opts, c), args.profile))

    rate = {k: n_items / statistics.median(v) for k, v in times.items()}
    print(f"\nmedian of {args.rounds} rounds ({n_items} items each):")
    for k in names:
        print(f"  {k:18} {rate[k]:8.1f} items/s  ({statistics.median(times[k]):.2f} s)")
    local, ratio = rate["evalgate"] / rate["lm-eval local tok"], rate["evalgate"] / rate["lm-eval"]
    print(f"ratio evalgate/lm-eval (local tokenizer, reference): {local:.1f}x")
    print(f"acceptance (evalgate >= 3x lm-eval local-completions): {'met' if ratio >= 3 else 'NOT met'}")
    print(
        f"ratio evalgate/lm-eval: {ratio:.1f}x "
        f"(evalgate {rate['evalgate']:.0f} items/s, lm-eval {rate['lm-eval']:.0f} items/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
