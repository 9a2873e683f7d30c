"""KV-cache capacity per arm, read from what each engine itself reports (pure functions).

A quantized KV cache or smaller weights buy room for more tokens, which is throughput a latency
sweep on an idle server does not show. Each engine states its pool once at startup:

- SGLang: ``max_total_num_tokens`` in ``/server_info`` (``/get_server_info`` before 0.4.7) and
  the log lines ``KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB`` and
  ``max_total_num_tokens=N, ...``.
- vLLM: ``GPU KV cache size: N tokens`` and ``Available KV cache memory: X GiB`` (one line
  per engine core / worker), or ``# GPU blocks: N`` on the v0 engine.
- llama.cpp: ``llama_kv_cache: size = X MiB (C cells, L layers, S/S seqs), K (t): ..``.
  Its pool is fixed by ``-c``, so the same tokens take less memory instead: what the
  candidate buys there is tokens per MiB, not more tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "capacity_from_log",
    "capacity_ratio",
    "llamacpp_capacity",
    "sglang_capacity",
    "sglang_server_info_capacity",
    "vllm_capacity",
]

_GIB_TO_MIB = 1024.0  # SGLang's "GB" and vLLM's "GiB" are both 2**30 bytes


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _per_tag(pattern: str, log: str, tag: str) -> dict[str, float]:
    """Last value of ``pattern`` per process tag (DP rank, worker), so restarts are not double-counted."""
    out: dict[str, float] = {}
    for line in log.splitlines():
        m = re.search(pattern, line)
        if m:
            t = re.search(tag, line)
            out[t.group(0) if t else ""] = _num(m.group(1))
    return out


def llamacpp_capacity(log: str) -> dict[str, Any] | None:
    """llama-server (``-lv 4`` or default verbosity): KV pool tokens, MiB and types, weights MiB."""
    m = re.search(
        r"llama_kv_cache\w*:\s+size\s*=\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)"
        r"(?:, K \((\w+)\):\s*[\d.]+ MiB, V \((\w+)\))?",
        log,
    )
    if not m:
        return None
    kv_mib, cells, _layers, _used, seqs = (float(m.group(1)), *(int(m.group(i)) for i in (2, 3, 4, 5)))
    unified = re.search(r"kv_unified\s*=\s*'?(true|false)", log)
    n_ctx = re.search(r"llama_context:\s+n_ctx\s*=\s*(\d+)", log)
    # Without a unified cache each sequence has its own stream of `cells`.
    tokens = int(n_ctx.group(1)) if n_ctx else cells * (1 if unified and unified.group(1) == "true" else seqs)
    size = re.search(r"file size\s*=\s*([\d.]+) MiB", log)  # the GGUF; buffers add CPU repacks
    weights = [size.group(1)] if size else re.findall(r"model buffer size\s*=\s*([\d.]+) MiB", log)
    slots = re.search(r"n_slots\s*=\s*(\d+)", log)
    return {
        "engine": "llamacpp",
        "source": "llama-server log",
        "kv_tokens": tokens,
        "kv_mib": kv_mib,
        "kv_types": f"K {m.group(6)}, V {m.group(7)}" if m.group(6) else None,
        "weights_mib": round(sum(float(w) for w in weights), 2) if weights else None,
        "slots": int(slots.group(1)) if slots else None,
        "pool_sized_by_memory": False,
    }


def sglang_capacity(log: str) -> dict[str, Any] | None:
    """SGLang's scheduler log: the pool is sized from free memory, so tokens are the capacity."""
    dp = r"\bDP\d+\b"
    tokens = _per_tag(r"max_total_num_tokens=(\d+)", log, dp)
    if not tokens:
        tokens = _per_tag(r"KV Cache is allocated\. #tokens: (\d+)", log, dp)
    if not tokens:
        return None
    k = _per_tag(r"KV Cache is allocated\..*K size: ([\d.]+) GB", log, dp)
    v = _per_tag(r"KV Cache is allocated\..*V size: ([\d.]+) GB", log, dp)
    kv = _per_tag(r"KV Cache is allocated\..*KV size: ([\d.]+) GB", log, dp)
    gb = sum(k.values()) + sum(v.values()) if k and v else (sum(kv.values()) if kv else None)
    running = re.search(r"max_running_requests=(\d+)", log)
    dtype = re.search(r"kv_cache_dtype='([^']+)'", log)
    return {
        "engine": "sglang",
        "source": "sglang log",
        "kv_tokens": int(sum(tokens.values())),
        "kv_mib": round(gb * _GIB_TO_MIB, 2) if gb is not None else None,
        "kv_types": dtype.group(1) if dtype else None,
        "max_running_requests": int(running.group(1)) if running else None,
        "pool_sized_by_memory": True,
    }


def sglang_server_info_capacity(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """SGLang ``GET /server_info``: server args plus the scheduler's ``max_total_num_tokens``."""
    tokens = info.get("max_total_num_tokens")
    if tokens is None:
        states = [s for s in info.get("internal_states") or [] if isinstance(s, Mapping)]
        per_dp = [s["max_total_num_tokens"] for s in states if s.get("max_total_num_tokens") is not None]
        tokens = sum(int(t) for t in per_dp) if per_dp else None
    if tokens is None:
        return None
    return {
        "engine": "sglang",
        "source": "sglang /server_info",
        "kv_tokens": int(tokens),
        "kv_mib": None,
        "kv_types": info.get("kv_cache_dtype"),
        "max_running_requests": info.get("max_running_requests"),
        "context_length": info.get("context_length") or info.get("max_req_input_len"),
        "pool_sized_by_memory": True,
    }


def vllm_capacity(log: str) -> dict[str, Any] | None:
    """vLLM: the v1 engine's ``GPU KV cache size: N tokens``, else v0's ``# GPU blocks``."""
    core = r"\((?:EngineCore\w*|Worker\w*|VllmWorker\w*)(?: pid=\d+)?\)"
    tokens = _per_tag(r"GPU KV cache size: ([\d,]+) tokens", log, core)
    source = "vllm log"
    if not tokens:
        blocks = _per_tag(r"# (?:GPU|cuda|CUDA) blocks: (\d+)", log, core)
        if not blocks:
            return None
        size = re.search(r"block_size=(\d+)", log)
        tokens = {k: b * (int(size.group(1)) if size else 16) for k, b in blocks.items()}
        source = "vllm log (GPU blocks x block size)"
    mem = _per_tag(r"Available KV cache memory: ([\d.]+) GiB", log, core)
    conc = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log)
    dtype = re.search(r"kv_cache_dtype=(\w+)", log)
    return {
        "engine": "vllm",
        "source": source,
        "kv_tokens": int(sum(tokens.values())),
        "kv_mib": round(sum(mem.values()) * _GIB_TO_MIB, 2) if mem else None,
        "kv_types": dtype.group(1) if dtype else None,
        "max_concurrency": float(conc.group(2)) if conc else None,
        "max_concurrency_at_tokens": int(_num(conc.group(1))) if conc else None,
        "pool_sized_by_memory": True,
    }


def capacity_from_log(log: str) -> dict[str, Any] | None:
    """Whichever engine wrote ``log``; None when it states no KV pool (e.g. a truncated log)."""
    for parse in (llamacpp_capacity, vllm_capacity, sglang_capacity):
        found = parse(log)
        if found is not None:
            return found
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(b / a, 3) if a and b is not None else None


def capacity_ratio(baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None) -> dict[str, Any]:
    """Candidate over baseline: pool tokens, tokens per MiB, and the headline with its basis.

    Engines that size the pool from free memory (SGLang, vLLM) turn savings into tokens, so the
    token ratio is the headline. llama.cpp's pool is fixed by ``-c``; there the headline is
    tokens per MiB, i.e. how many more tokens the same KV memory would hold."""
    if not baseline or not candidate:
        return {"ratio": None, "basis": "capacity not reported by both arms"}
    tokens = _ratio(baseline.get("kv_tokens"), candidate.get("kv_tokens"))
    density = None
    if baseline.get("kv_mib") and candidate.get("kv_mib"):
        density = _ratio(
            baseline["kv_tokens"] / baseline["kv_mib"], candidate["kv_tokens"] / candidate["kv_mib"]
        )
    weights = _ratio(baseline.get("weights_mib"), candidate.get("weights_mib"))
    by_memory = bool(baseline.get("pool_sized_by_memory")) and bool(candidate.get("pool_sized_by_memory"))
    if by_memory or density is None:
        ratio, basis = tokens, "KV pool tokens (pool sized from free memory)"
    else:
        ratio, basis = density, "KV tokens per MiB (pool size fixed by -c)"
    return {
        "ratio": ratio,
        "basis": basis,
        "kv_tokens_ratio": tokens,
        "kv_tokens_per_mib_ratio": density,
        "weights_mib_ratio": weights,
    }
