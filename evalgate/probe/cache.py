"""``evalgate probe cache``: does one tenant's cached prefix show in another tenant's requests?

A shared prefix cache serves a prompt faster when someone else sent its prefix: a timing side
channel on other people's prompts (vLLM CVE-2025-46570, fixed by a per-request ``cache_salt``).
Per probe, fresh random token content: the victim sends prefix P under salt A; then, in random
order, SAME (P + q, salt A: the positive control), CROSS (P + q, salt B) and COLD (a fresh prefix
of the same length, salt B), one at a time, one output token each, the cache flushed before each
probe where the server allows it. Two oracles decide (``decide``):

- exact, where the server reports cached tokens: CROSS reads none, SAME at least P minus a page;
- timing, paired within each probe (``stats.cache_timing_test``), an equivalence test against a
  margin (``--share`` of the cache's measured gap, at least ``--min-margin``): SAME must be
  faster than COLD by more than the margin (else the probe is blind: ERROR), CROSS faster than
  COLD significantly beyond the margin is a BLOCK, and a PASS needs the upper bound of CROSS's
  speed-up below the margin (else UNDERPOWERED).

The prefix length is calibrated first: the shortest of ``CALIBRATION_LENGTHS`` at which a hit is
at least ``MIN_GAP`` times faster than a miss. A server that takes no salt has no isolation to
test (``Scorer.cached_request`` refuses): NO_ISOLATION, exit 2, with what to do instead.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evalgate.engines.api import CacheObservation, NoCacheIsolation, Scorer
from evalgate.errors import ConfigError, InfraError
from evalgate.probe.report import EXIT_CODES, no_isolation_report
from evalgate.stats import TimingResult, cache_timing_test
from evalgate.store.probe_report import PROBE_SCHEMA, ProbeSettings

__all__ = [
    "CALIBRATION_LENGTHS",
    "CONDITIONS",
    "MIN_GAP",
    "CacheProbe",
    "answer_problems",
    "decide",
    "run_cache_probe",
]

CONDITIONS = ("same", "cross", "cold")
CALIBRATION_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
MIN_GAP = 1.5
"""A hit must be this many times faster than a miss for the timing test to see a leak."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CacheProbe:
    """``evalgate probe cache`` as a ``Probe``."""

    settings: ProbeSettings
    name = "cache_isolation"
    deterministic = False

    async def run(self, scorer: Scorer, *, progress: Progress) -> dict[str, Any]:
        return await run_cache_probe(scorer, self.settings, progress=progress)


def answer_problems(obs: Sequence[dict[str, Any]]) -> list[str]:
    """Why answers (``_obs`` rows) cannot be read at all: a request that came back with no answer
    (no choices, a null text), or cached tokens that are no count of the prompt's tokens (negative,
    not an integer, more than the prompt). Either is an ERROR, never timed nor read as a leak."""
    out = []
    silent = [o for o in obs if not o.get("answered", True)]
    if silent:
        out.append(
            f"{len(silent)} of {len(obs)} requests came back with no answer (no choices, or a null "
            "text): the server answered nothing, so nothing it did was measured"
        )
    bad = [
        o["cached_tokens"]
        for o in obs
        if o["cached_tokens"] is not None
        and (
            isinstance(o["cached_tokens"], bool)
            or not isinstance(o["cached_tokens"], int)
            or o["cached_tokens"] < 0
            or (isinstance(o.get("prompt_tokens"), int) and o["cached_tokens"] > o["prompt_tokens"])
        )
    ]
    if bad:
        out.append(
            f"{len(bad)} answers report cached tokens that are no count of the prompt's tokens "
            f"(e.g. {bad[0]!r}: negative, not an integer, or more than the prompt): the server's "
            "usage is garbage, so it is read as nothing"
        )
    return out


async def run_cache_probe(
    scorer: Scorer, settings: ProbeSettings, *, progress: Progress | None = None
) -> dict[str, Any]:
    """The probe report (probe.json) for the server behind ``scorer``; NO_ISOLATION when it takes
    no salt. Requests go one at a time."""
    say = progress or (lambda _: None)
    rng = np.random.default_rng(settings.seed)
    start = time.monotonic()
    pool = await _token_pool(scorer, rng)
    context = await scorer.context_length()
    try:
        if settings.prefix_tokens is not None:
            room = (context or 0) - settings.suffix_tokens - settings.max_tokens
            if context and settings.prefix_tokens > room:
                raise ConfigError(
                    f"--prefix-tokens {settings.prefix_tokens} does not fit the server's context of "
                    f"{context} tokens (with the {settings.suffix_tokens}-token suffix and the answer)",
                    fix=f"pass --prefix-tokens {max(16, room)} or less, or omit it (calibrated)",
                )
            length, calibration = settings.prefix_tokens, []
        else:
            length, calibration = await _calibrate(scorer, settings, pool, rng, context, say)
        say(f"prefix: {length} tokens; {settings.probes} probes")
        rows, flushes = [], []
        for i in range(settings.probes):
            flushes.append(await scorer.flush_cache())
            rows.append(await _probe(scorer, settings, pool, rng, length))
            say(
                f"probe {i + 1}/{settings.probes}: "
                + ", ".join(f"{c} {rows[-1][c]['latency_s']:.3f} s" for c in CONDITIONS)
            )
    except NoCacheIsolation as exc:
        return no_isolation_report("cache_isolation", exc, settings)
    seconds = time.monotonic() - start
    timing = cache_timing_test(
        *([r[c]["latency_s"] for r in rows] for c in CONDITIONS),
        share=settings.share,
        min_margin=settings.min_margin,
        alpha=settings.alpha,
        rng=np.random.default_rng(settings.seed + 1),
    )
    verdict, reasons, oracle = decide(rows, timing, length=length, page=settings.page_tokens)
    return {
        "schema": PROBE_SCHEMA,
        "probe": "cache_isolation",
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "reasons": reasons,
        "settings": settings.model_dump(mode="json"),
        "prefix_tokens": length,
        "context_length": context,
        "calibration": calibration,
        "flush": sorted({str(f) for f in flushes}),
        "conditions": {c: _condition(rows, c) for c in (*CONDITIONS, "victim")},
        "oracle": oracle,
        "timing": asdict(timing),
        "cache_gap": float(np.exp(timing.gap)),
        "margin": float(np.exp(timing.margin)),
        "seconds": round(seconds, 1),
        "probes": rows,
    }


def decide(
    rows: Sequence[dict[str, Any]], timing: TimingResult, *, length: int, page: int
) -> tuple[str, list[str], dict[str, Any]]:
    """The verdict from both oracles (module docstring), its reasons, and the exact oracle's counts."""
    cross = [r["cross"]["cached_tokens"] for r in rows]
    same = [r["same"]["cached_tokens"] for r in rows]
    reported = all(c is not None for c in cross + same)
    leaked = [c for c in cross if c]
    short = [s for s in same if s is not None and s < length - page]
    oracle = {
        "reported": reported,
        "cross_cached_max": max((c for c in cross if c is not None), default=None),
        "cross_probes_with_cached_tokens": len(leaked),
        "same_cached_min": min((s for s in same if s is not None), default=None),
        "same_probes_below_prefix": len(short),
    }
    garbage = answer_problems([r[c] for r in rows for c in (*CONDITIONS, "victim") if c in r])
    if garbage:
        return "ERROR", garbage, oracle
    reasons = []
    if leaked:
        reasons.append(
            f"CROSS read {max(leaked)} cached tokens of another tenant's prefix in {len(leaked)} of {len(rows)} probes"
        )
    if timing.status == "block":
        reasons.append(timing.reason)
    if reasons:
        return "BLOCK", reasons, oracle
    if short:
        reasons.append(
            f"the positive control failed: SAME read only {min(short)} cached tokens of a {length}-token prefix "
            f"in {len(short)} probes (the cache did not keep the victim's prefix)"
        )
    if timing.status == "error":
        reasons.append(timing.reason)
    if reasons:
        return "ERROR", reasons, oracle
    if not reported:
        reasons.append("the server reports no cached tokens: the timing test alone decides")
    reasons.append(timing.reason)
    return ("PASS" if timing.status == "pass" else "UNDERPOWERED"), reasons, oracle


# -- the requests ------------------------------------------------------------------------------


async def _token_pool(scorer: Scorer, rng: np.random.Generator) -> list[int]:
    """Token ids of a random hex text, tokenized by the server: ids it really has, drawn from at
    random for each probe's content (fresh content per probe, no shared prefix by chance)."""
    words = [f"{int(x):05x}" for x in rng.integers(0, 16**5, size=1500)]
    pool = sorted(set(await scorer.tokenize(" ".join(words))))
    if len(pool) < 64:
        raise InfraError(
            f"the server's tokenizer gave only {len(pool)} distinct ids for random text",
            fix="probe a server with a real tokenizer",
        )
    return pool


def _draw(
    pool: Sequence[int], rng: np.random.Generator, n: int, *, avoid_first: int | None = None
) -> list[int]:
    ids = [int(pool[i]) for i in rng.integers(0, len(pool), size=n)]
    while avoid_first is not None and ids and ids[0] == avoid_first:
        ids[0] = int(pool[int(rng.integers(0, len(pool)))])
    return ids


def _salt(settings: ProbeSettings) -> str | None:
    """32 hex characters: within vLLM's salt format (at most 128 characters, no ``/ @ \\`` or NUL)."""
    return secrets.token_hex(16) if settings.salted else None


def _obs(o: CacheObservation) -> dict[str, Any]:
    return {
        "latency_s": o.latency_s,
        "cached_tokens": o.cached_tokens,
        "prompt_tokens": o.prompt_tokens,
        "answered": o.text is not None,
    }


async def _probe(
    scorer: Scorer, settings: ProbeSettings, pool: Sequence[int], rng: np.random.Generator, length: int
) -> dict[str, Any]:
    """One probe: the victim, then SAME, CROSS and COLD in random order."""
    prefix = _draw(pool, rng, length)
    tail = _draw(pool, rng, settings.suffix_tokens)
    cold = _draw(pool, rng, length + settings.suffix_tokens, avoid_first=prefix[0])
    a, b = _salt(settings), _salt(settings)
    send = {"same": (prefix + tail, a), "cross": (prefix + tail, b), "cold": (cold, b)}
    row: dict[str, Any] = {}
    row["victim"] = _obs(await scorer.cached_request(prefix, salt=a, max_tokens=settings.max_tokens))
    order = [CONDITIONS[i] for i in rng.permutation(len(CONDITIONS))]
    for name in order:
        ids, salt = send[name]
        row[name] = _obs(await scorer.cached_request(ids, salt=salt, max_tokens=settings.max_tokens))
    row["order"] = order
    return row


async def _calibrate(
    scorer: Scorer,
    settings: ProbeSettings,
    pool: Sequence[int],
    rng: np.random.Generator,
    context: int | None,
    say: Progress,
) -> tuple[int, list[dict[str, Any]]]:
    """The shortest prefix at which SAME is at least ``MIN_GAP`` times faster than COLD in each
    of two probes; the longest that fits when none is."""
    room = (context or CALIBRATION_LENGTHS[-1] + 64) - settings.suffix_tokens - settings.max_tokens - 8
    lengths = [n for n in CALIBRATION_LENGTHS if n <= room] or [max(16, room)]
    table = []
    for n in lengths:
        ratios = []
        for _ in range(2):
            await scorer.flush_cache()
            row = await _probe(scorer, settings, pool, rng, n)
            ratios.append(row["cold"]["latency_s"] / row["same"]["latency_s"])
        table.append({"prefix_tokens": n, "cold_over_same": ratios})
        say(f"calibration: {n} tokens, COLD/SAME {', '.join(f'{r:.2f}' for r in ratios)}")
        if min(ratios) >= MIN_GAP:
            return n, table
    return lengths[-1], table


def _condition(rows: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    """Median latency and the cached tokens of one condition over the probes."""
    lat = [r[name]["latency_s"] for r in rows]
    cached = [r[name]["cached_tokens"] for r in rows if r[name]["cached_tokens"] is not None]
    return {
        "median_latency_s": statistics.median(lat),
        "cached_tokens_min": min(cached) if cached else None,
        "cached_tokens_max": max(cached) if cached else None,
    }
