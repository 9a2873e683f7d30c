"""SGLang's KV pool as it states it: sized from free GPU memory at startup, so tokens are the
capacity. ``max_total_num_tokens`` in ``/server_info`` (one per DP rank in ``internal_states`` on
newer SGLang), and the scheduler's log lines ``KV Cache is allocated. #tokens: N, K size: X GB,
V size: Y GB`` and ``max_total_num_tokens=N, ...``."""

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


def sglang_capacity(log: str) -> dict[str, Any] | None:
    """SGLang's scheduler log: the pool is sized from free memory, so tokens are the capacity."""
    dp = r"\bDP\d+\b"
    tokens = per_tag(r"max_total_num_tokens=(\d+)", log, dp)
    if not tokens:
        tokens = per_tag(r"KV Cache is allocated\. #tokens: (\d+)", log, dp)
    if not tokens:
        return None
    k = per_tag(r"KV Cache is allocated\..*K size: ([\d.]+) GB", log, dp)
    v = per_tag(r"KV Cache is allocated\..*V size: ([\d.]+) GB", log, dp)
    kv = per_tag(r"KV Cache is allocated\..*KV size: ([\d.]+) GB", log, dp)
    gb = sum(k.values()) + sum(v.values()) if k and v else (sum(kv.values()) if kv else None)
    running = re.search(r"max_running_requests=(\d+)", log)
    dtype = re.search(r"kv_cache_dtype='([^']+)'", log)
    return {
        "engine": "sglang",
        "source": "sglang log",
        "kv_tokens": int(sum(tokens.values())),
        "kv_mib": round(gb * GIB_TO_MIB, 2) if gb is not None else None,
        "kv_types": dtype.group(1) if dtype else None,
        "max_running_requests": int(running.group(1)) if running else None,
        "pool_sized_by_memory": True,
    }


def server_info_capacity(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """SGLang ``GET /server_info``: server args plus the scheduler's ``max_total_num_tokens``."""
    tokens = total_tokens(info)
    if tokens is None:
        return None
    return {
        "engine": "sglang",
        "source": "sglang /server_info",
        "kv_tokens": tokens,
        "kv_mib": None,
        "kv_types": info.get("kv_cache_dtype"),
        "max_running_requests": info.get("max_running_requests"),
        "context_length": info.get("context_length") or info.get("max_req_input_len"),
        "pool_sized_by_memory": True,
    }
