"""KV-cache capacity per arm, compared (pure functions): what the run folder's arms recorded
(``server.capacity``, ``throughput.json``), read back as the candidate's ratio to the baseline.

A quantized KV cache or smaller weights buy room for more tokens, which is throughput a latency
sweep on an idle server does not show. Each engine states its pool once at startup, and its own
package reads it (``Engine.capacity``; the log parsers are ``llamacpp_capacity``,
``sglang_capacity`` and ``vllm_capacity``). SGLang and vLLM size the pool from free memory, so
tokens are the capacity; llama.cpp's pool is fixed by ``-c``, so the same tokens take less memory
instead: what the candidate buys there is tokens per MiB, not more tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["capacity_ratio"]


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
        memory = baseline.get("pool_memory") or "free memory"  # the CPU backend's is set explicitly
        ratio, basis = tokens, f"KV pool tokens (the pool sized from {memory}, the same on both arms)"
    else:
        ratio, basis = density, "KV tokens per MiB (pool size fixed by -c)"
    return {
        "ratio": ratio,
        "basis": basis,
        "kv_tokens_ratio": tokens,
        "kv_tokens_per_mib_ratio": density,
        "weights_mib_ratio": weights,
    }
