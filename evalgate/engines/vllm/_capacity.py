"""vLLM's KV pool as its log states it: ``GPU KV cache size: N tokens`` and ``Maximum concurrency
for L tokens per request: Xx`` (one line, 0.33.0 and 0.34.0 ``update_kv_cache_capacity`` in
``v1/core/kv_cache_utils.py``), or ``# GPU blocks: N`` on v0; its memory per engine core / worker.

What sized it: up to 0.33, free memory as profiled at startup (``Available KV cache memory: X GiB``,
``v1/worker/gpu_worker.py``). 0.34.0 on CUDA and ROCm has the extensible KV cache on by default
(``enable_extensible_kv_cache``, ``config/cache.py``): that line is then only the reservation, and
the pool is sized from the memory measured after warmup and CUDA graph capture (``Memory after
warmup: ...``, then ``Extended KV cache to N blocks (X GiB).`` per worker, in
``v1/worker/extensible_kv_cache.py``; the tokens line comes after warmup,
``finalize_extensible_kv_cache`` in ``v1/core/kv_cache_planning.py``). So the memory read here is
the extended pool's where the log has it, the profiled estimate otherwise. Where the driver lacks
VMM, 0.34 logs "Disabling the extensible KV cache" and sizes from the estimate as before.

The device in the size line is "GPU" only on CUDA: vLLM writes ``device_type.upper()`` otherwise
("CPU", "XPU"), plus " + host" with a host pool (0.32.0 ``_kv_cache_device_name`` and
``update_kv_cache_capacity`` in ``v1/core/kv_cache_utils.py``). The CPU worker states its memory as
``Explicitly set (X/Y) GiB for KV cache`` (VLLM_CPU_KVCACHE_SPACE) or ``Auto set (X/Y) GiB ...``
(``v1/worker/cpu_worker.py``), X the KV cache and Y the node's RAM, never ``Available KV cache memory``."""

from __future__ import annotations

import re
from typing import Any

from evalgate.engines._logs import GIB_TO_MIB, number, per_tag

__all__ = ["vllm_capacity"]

_TOKENS = r"\b[A-Z]+(?: \+ host)? KV cache size: ([\d,]+) tokens"
_GPU_MEM = r"Available KV cache memory: ([\d.]+) GiB"
_EXTENDED_MEM = r"Extended KV cache to \d+ blocks \(([\d.]+) GiB\)"
_CPU_MEM = r"(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache"


def vllm_capacity(log: str) -> dict[str, Any] | None:
    """vLLM: the v1 engine's ``GPU KV cache size: N tokens`` (``CPU`` ... on the CPU), else v0's
    ``# GPU blocks``."""
    core = r"\((?:EngineCore\w*|Worker\w*|VllmWorker\w*)(?: pid=\d+)?\)"
    tokens = per_tag(_TOKENS, log, core)
    source = "vllm log"
    if not tokens:
        blocks = per_tag(r"# (?:GPU|cuda|CUDA) blocks: (\d+)", log, core)
        if not blocks:
            return None
        size = re.search(r"block_size=(\d+)", log)
        tokens = {k: b * (int(size.group(1)) if size else 16) for k, b in blocks.items()}
        source = "vllm log (GPU blocks x block size)"
    extended = per_tag(_EXTENDED_MEM, log, core)
    mem = extended or per_tag(_GPU_MEM, log, core) or per_tag(_CPU_MEM, log, core)
    explicit = re.search(r"Explicitly set \([\d.]+/[\d.]+\) GiB for KV cache", log) is not None
    if explicit:
        pool_memory = "explicit (VLLM_CPU_KVCACHE_SPACE)"
    elif extended:
        pool_memory = "memory free after warmup and CUDA graphs (extensible KV cache)"
    else:
        pool_memory = "free memory"
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
        "pool_memory": pool_memory,
    }
