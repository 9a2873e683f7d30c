"""``python -m sglang.bench_serving`` as the load generator, for users who trust SGLang's numbers.

One bench_serving run per concurrency level (``--max-concurrency C --request-rate inf``), on the
``random-ids`` dataset so no dataset is downloaded, with fixed input and output lengths
(``--random-range-ratio 1``). Its ``--output-file`` JSONL (one object per run) is parsed into
the same level rows the built-in generator writes. Each run is bounded by ``--num-prompts`` and
by a subprocess timeout.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["bench_serving_command", "parse_bench_serving", "run_levels"]

_STARTUP_S = 120.0  # bench_serving loads a tokenizer before it sends anything


def bench_serving_command(
    base_url: str,
    *,
    concurrency: int,
    num_prompts: int,
    input_len: int,
    output_len: int,
    output_file: Path,
    model: str | None = None,
    seed: int = 0,
    python: str = sys.executable,
) -> list[str]:
    """The exact command for one level; ``--backend sglang`` uses SGLang's native /generate."""
    cmd = [
        python, "-m", "sglang.bench_serving",
        "--backend", "sglang",
        "--base-url", base_url,
        "--dataset-name", "random-ids",
        "--random-input-len", str(input_len),
        "--random-output-len", str(output_len),
        "--random-range-ratio", "1.0",
        "--num-prompts", str(num_prompts),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--seed", str(seed),
        "--output-file", str(output_file),
        "--disable-tqdm",
    ]  # fmt: skip
    if model:
        cmd += ["--model", model]
    return cmd


def _ms(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return round(float(value), 2)


def parse_bench_serving(text: str, *, planned: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Level rows from bench_serving JSONL; ``planned`` maps concurrency to prompts sent.

    bench_serving counts only completed requests, so a shortfall against ``planned`` is the
    number of failed ones (it does not say whether they were rejected or broke)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        r = json.loads(line)  # bench_serving writes request_rate inf as Infinity, which json accepts
        c = int(r.get("max_concurrency") or 0)
        completed = int(r.get("completed") or 0)
        sent = (planned or {}).get(c, completed)
        failed = max(0, sent - completed)
        status = "ok" if not failed else ("limit" if not completed else "errors")
        rows.append(
            {
                "concurrency": c,
                "status": status,
                "reason": f"{failed} of {sent} requests failed" if failed else "",
                "planned": sent,
                "requests": sent,
                "ok": completed,
                "errors": failed,
                "rejected": 0,
                "queued": 0,
                "cut": 0,
                "duration_s": _ms(r.get("duration")),
                "output_tokens": r.get("total_output_tokens"),
                "output_tok_s": _ms(r.get("output_throughput")),
                "request_s": _ms(r.get("request_throughput")),
                "ttft_p50_ms": _ms(r.get("median_ttft_ms")),
                "ttft_p99_ms": _ms(r.get("p99_ttft_ms")),
                "itl_p50_ms": _ms(r.get("median_itl_ms")),
                "itl_p99_ms": _ms(r.get("p99_itl_ms")),
            }
        )
    return rows


def run_levels(target: Any, settings: Any, levels: Sequence[int], model: str | None) -> list[dict[str, Any]]:
    """Run bench_serving once per level against ``target`` and parse what it wrote."""
    if importlib.util.find_spec("sglang") is None:
        raise ConfigError(
            "--generator sglang needs SGLang's bench_serving", fix="pip install 'evalgate[sglang]'"
        )
    env = {**os.environ}
    if target.api_key:
        env["OPENAI_API_KEY"] = target.api_key  # bench_serving's only way to take a key
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="evalgate-bench-") as tmp:
        for c in levels:
            out = Path(tmp) / f"c{c}.jsonl"
            n = settings.requests_for(c)
            cmd = bench_serving_command(
                target.base_url, concurrency=c, num_prompts=n, input_len=settings.input_len,
                output_len=settings.output_len, output_file=out, model=model, seed=settings.seed,
            )  # fmt: skip
            limit = settings.max_seconds_per_level + _STARTUP_S
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
            except subprocess.TimeoutExpired:
                rows.append(_failed(c, n, "limit", f"bench_serving did not finish within {limit:g} s"))
                break
            parsed = parse_bench_serving(out.read_text() if out.exists() else "", planned={c: n})
            if proc.returncode != 0 or not parsed:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                rows.append(
                    _failed(c, n, "errors", f"bench_serving exited {proc.returncode}: {tail[0][:200]}")
                )
                break
            rows += parsed
            if parsed[-1]["status"] == "limit":
                break
    return rows


def _failed(c: int, n: int, status: str, reason: str) -> dict[str, Any]:
    return {"concurrency": c, "status": status, "reason": reason, "planned": n, "output_tok_s": None}
