"""The server's own rates, for benchmarks/first_command.py on a run that no llama-batched-bench can
measure: the xllamacpp wheel ships none, so each arm's server is launched again by evalgate's
engine with the arm's recorded model, arguments and environment, sent the suite's shape
(``parallel`` prompts of ``prompt`` tokens, ``gen`` generated each), and read from its ``timings``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def run_runtime(manifest: Mapping[str, Any]) -> str:
    """The runtime that served the run, as its manifest's engine version names it."""
    from evalgate.engines.llamacpp import runtime_of

    return runtime_of(str(manifest.get("engine_version", "")))


def rate_source(manifest: Mapping[str, Any], choice: str) -> str:
    """``batched-bench`` (llama.cpp's own benchmark, shipped with llama-server only) or ``server``
    (the run's own server, launched again with the arm's settings, its ``timings`` read):
    ``auto`` takes the bench where the run's runtime ships it."""
    if choice != "auto":
        return choice
    return "batched-bench" if run_runtime(manifest) == "llama-server" else "server"


def server_rates(
    prefill_s: float, prefill: Sequence[Mapping[str, Any]], decode: Sequence[Mapping[str, Any]]
) -> tuple[float, float]:
    """(prefill, decode) tokens/s of requests sent together, as llama-batched-bench counts them:
    the prompt tokens over the prefill batch's wall time ``prefill_s`` (a request's own
    ``prompt_ms`` starts when its first chunk does, so it misses the chunks before), and the
    generated tokens over the longest request's ``predicted_ms`` in a batch that only decoded."""
    pp = sum(int(t["prompt_n"]) for t in prefill) / prefill_s
    tg = sum(int(t["predicted_n"]) for t in decode) / (max(float(t["predicted_ms"]) for t in decode) / 1e3)
    return pp, tg


def _server_case(handle: Any, case: Any) -> tuple[float, float]:
    """``case.parallel`` prompts of ``case.prompt`` token ids (distinct, so no slot holds another's
    prefix): prefilled together (one token out), then sent again to decode ``case.gen`` tokens
    each from the slot that holds it, as llama-batched-bench times the two phases apart (a
    request's own decode time also holds the others' prefill chunks); a warm-up batch first."""
    from evalgate.engines._scoring import server_client
    from evalgate.engines.client import RetryPolicy

    def prompts(seed: int) -> list[list[int]]:
        return [
            [100 + (seed * 7919 + i * 131 + j) % 20000 for j in range(case.prompt)]
            for i in range(case.parallel)
        ]

    async def go() -> tuple[float, float]:
        client = server_client(handle, concurrency=case.parallel, seed=0, retry=RetryPolicy(timeout_s=900))

        async def batch(batch: list[list[int]], gen: int, cache: bool) -> list[Any]:
            body = {"max_tokens": gen, "temperature": 0.0, "ignore_eos": True, "cache_prompt": cache}
            answers = await asyncio.gather(
                *(client.post("/v1/completions", {**body, "prompt": p}) for p in batch)
            )
            return [a["timings"] for a in answers]

        try:
            await batch(prompts(0), case.gen, False)  # the first batch pays for allocations
            fresh = prompts(1)
            t0 = time.perf_counter()
            prefilled = await batch(fresh, 1, True)
            prefill_s = time.perf_counter() - t0
            return server_rates(prefill_s, prefilled, await batch(fresh, case.gen, True))
        finally:
            await client.__aexit__()

    return asyncio.run(go())


def relaunched(manifest: Mapping[str, Any], case: Any) -> tuple[float, float]:
    """One case on the arm's server, launched again by evalgate's engine under the run's runtime
    with the arm's recorded model, arguments and environment."""
    from evalgate.config import LlamaCppConfig
    from evalgate.engines.api import LaunchSlot
    from evalgate.engines.llamacpp import LlamaCppEngine
    from evalgate.variants import LaunchSpec

    info = manifest["launch"][case.arm]
    args = tuple((str(a[0]), None if a[-1] is None or len(a) == 1 else str(a[-1])) for a in info["args"])
    spec = LaunchSpec("llamacpp", info["model"], args, tuple((k, v) for k, v in info.get("env") or []))
    engine = LlamaCppEngine(LlamaCppConfig(runtime=run_runtime(manifest)))  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp, engine.launch(spec, LaunchSlot(case.arm, Path(tmp))) as handle:
        return _server_case(handle, case)
