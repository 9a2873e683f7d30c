"""SGLang's KV pool as it states it: sized from free GPU memory at startup, so tokens are the
capacity.

- ``/server_info``: ``max_total_num_tokens`` (the scheduler's init info, merged in by
  ``build_server_info`` in ``sglang/srt/utils/common.py``), and per DP rank
  ``internal_states[].memory_usage`` = ``{"weight", "kvcache" (GB), "token_capacity", ...}``
  (``managers/scheduler_components/memory_usage.py``, ``build_memory_usage``).
- The log. SGLang 0.5.23 (``mem_cache/memory_pool.py``, ``_finalize_allocation_log``) writes
  ``KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, K size: X GB, V size: Y GB`` (MLA
  pools: ``KV size: X GB``); older SGLang wrote the same line without ``dtype: ...,``. With a
  post-capture resize the pool line reads ``KV Cache VA upper bound. dtype: ...`` and the size that
  holds is ``Post-capture KV sizing: KV cache allocated. dtype: %s, #tokens: %d, KV size: %.2f GB``
  (``model_executor/model_runner_components/kv_pool_runtime.py``). The scheduler also logs
  ``max_total_num_tokens=N, chunked_prefill_size=..., max_running_requests=M, ...``
  (``managers/scheduler.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalgate.engines._logs import GIB_TO_MIB, per_tag

__all__ = ["server_info_capacity", "sglang_capacity", "total_tokens"]


def total_tokens(info: Mapping[str, Any]) -> int | None:
    """``max_total_num_tokens`` of a server info answer, summed over DP ranks where it is per rank."""
    tokens = info.get("max_total_num_tokens")
    if tokens is None:
        states = [s for s in info.get("internal_states") or [] if isinstance(s, Mapping)]
        per_dp = [s["max_total_num_tokens"] for s in states if s.get("max_total_num_tokens") is not None]
        tokens = sum(int(t) for t in per_dp) if per_dp else None
    return int(tokens) if tokens is not None else None


_POOL = r"(?:Post-capture KV sizing: KV cache allocated|KV Cache is allocated)\."
_DTYPE = r"dtype: (?:torch\.)?(\w+)"


def sglang_capacity(log: str) -> dict[str, Any] | None:
    """SGLang's scheduler log: the pool is sized from free memory, so tokens are the capacity."""
    dp = r"\bDP\d+\b"
    tokens = per_tag(r"max_total_num_tokens=(\d+)", log, dp)
    if not tokens:
        tokens = per_tag(_POOL + r"(?: dtype: [\w.]+,)? #tokens: (\d+)", log, dp)
    if not tokens:
        return None
    k = per_tag(_POOL + r".*K size: ([\d.]+) GB", log, dp)
    v = per_tag(_POOL + r".*V size: ([\d.]+) GB", log, dp)
    kv = per_tag(_POOL + r".*KV size: ([\d.]+) GB", log, dp)
    gb = sum(k.values()) + sum(v.values()) if k and v else (sum(kv.values()) if kv else None)
    running = re.search(r"max_running_requests=(\d+)", log)
    pool_dtype = re.findall(_POOL + r" " + _DTYPE, log, re.MULTILINE)
    dtype = pool_dtype[-1] if pool_dtype else None
    if dtype is None:
        arg = re.search(r"kv_cache_dtype='([^']+)'", log)
        dtype = arg.group(1) if arg else None
    return {
        "engine": "sglang",
        "source": "sglang log",
        "kv_tokens": int(sum(tokens.values())),
        "kv_mib": round(gb * GIB_TO_MIB, 2) if gb is not None else None,
        "kv_types": dtype,
        "max_running_requests": int(running.group(1)) if running else None,
        "pool_sized_by_memory": True,
    }


def server_info_capacity(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """SGLang ``GET /server_info``: the scheduler's ``max_total_num_tokens`` (else the DP ranks'
    ``memory_usage.token_capacity``) and the ranks' ``memory_usage.kvcache`` GB as the pool size.
    ``kv_cache_dtype`` here is the flag as given ("auto" says nothing of the pool); the launch
    replaces it with the dtype of the log's allocation line."""
    tokens = total_tokens(info)
    usage = _memory_usage(info)
    if tokens is None and usage:
        caps = [u.get("token_capacity") for u in usage]
        tokens = sum(int(c) for c in caps) if all(isinstance(c, int) for c in caps) else None
    if tokens is None:
        return None
    gbs = [u.get("kvcache") for u in usage]
    gb = sum(float(g) for g in gbs) if gbs and all(isinstance(g, (int, float)) for g in gbs) else None
    return {
        "engine": "sglang",
        "source": "sglang /server_info",
        "kv_tokens": tokens,
        "kv_mib": round(gb * GIB_TO_MIB, 2) if gb else None,
        "kv_types": info.get("kv_cache_dtype"),
        "max_running_requests": info.get("max_running_requests"),
        "context_length": info.get("context_length") or info.get("max_req_input_len"),
        "pool_sized_by_memory": True,
    }


def _memory_usage(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    states = [s for s in info.get("internal_states") or [] if isinstance(s, Mapping)]
    return [s["memory_usage"] for s in states if isinstance(s.get("memory_usage"), Mapping)]
