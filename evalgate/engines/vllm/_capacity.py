"""vLLM's KV pool as its log states it, sized from free GPU memory at startup: ``GPU KV cache size:
N tokens`` and ``Available KV cache memory: X GiB`` (one line per engine core / worker) on the v1
engine, or ``# GPU blocks: N`` on v0; ``Maximum concurrency for L tokens per request: Xx``."""

from __future__ import annotations

import re
from typing import Any

from evalgate.engines._logs import GIB_TO_MIB, number, per_tag

__all__ = ["vllm_capacity"]


def vllm_capacity(log: str) -> dict[str, Any] | None:
    """vLLM: the v1 engine's ``GPU KV cache size: N tokens``, else v0's ``# GPU blocks``."""
    core = r"\((?:EngineCore\w*|Worker\w*|VllmWorker\w*)(?: pid=\d+)?\)"
    tokens = per_tag(r"GPU KV cache size: ([\d,]+) tokens", log, core)
    source = "vllm log"
    if not tokens:
        blocks = per_tag(r"# (?:GPU|cuda|CUDA) blocks: (\d+)", log, core)
        if not blocks:
            return None
        size = re.search(r"block_size=(\d+)", log)
        tokens = {k: b * (int(size.group(1)) if size else 16) for k, b in blocks.items()}
        source = "vllm log (GPU blocks x block size)"
    mem = per_tag(r"Available KV cache memory: ([\d.]+) GiB", log, core)
    conc = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log)
    dtype = re.search(r"kv_cache_dtype=(\w+)", log)
    return {
        "engine": "vllm",
        "source": source,
        "kv_tokens": int(sum(tokens.values())),
        "kv_mib": round(sum(mem.values()) * GIB_TO_MIB, 2) if mem else None,
        "kv_types": dtype.group(1) if dtype else None,
        "max_concurrency": float(conc.group(2)) if conc else None,
        "max_concurrency_at_tokens": int(number(conc.group(1))) if conc else None,
        "pool_sized_by_memory": True,
    }
