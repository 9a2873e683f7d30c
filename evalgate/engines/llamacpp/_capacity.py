"""llama.cpp's KV cache as its log states it, parsed once (``-lv 4`` or default verbosity)::

    llama_kv_cache: size =  90.00 MiB (  1024 cells,  30 layers,  4/4 seqs), K (f16): 45.00 MiB, V (f16): 45.00 MiB

The pool is fixed by ``-c``, so a smaller KV type holds the same tokens in less memory: what a
candidate buys here is tokens per MiB, not more tokens (``evalgate.store.capacity.capacity_ratio``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["KVLine", "kv_buffer_sizes", "kv_cache_line", "llamacpp_capacity"]

_LINE = re.compile(r"llama_kv_cache\w*:\s+size\s*=\s*([\d.]+) MiB(.*)")
_SHAPE = re.compile(r"^ \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)")
_BUFFER = re.compile(r"\b([KV]) \((\w+)\):\s*([\d.]+) MiB")


@dataclass(frozen=True)
class KVLine:
    """The first ``llama_kv_cache: size = ...`` line of a log."""

    mib: float
    cells: int | None
    """Cells per stream; None when the line has no shape (older builds)."""
    seqs: int | None
    buffers: tuple[tuple[str, str, float], ...]
    """(K or V, type, MiB) per buffer."""


def kv_cache_line(log: str) -> KVLine | None:
    m = _LINE.search(log)
    if not m:
        return None
    rest = m.group(2)
    shape = _SHAPE.search(rest)
    buffers = tuple((w, t, float(s)) for w, t, s in _BUFFER.findall(rest))
    return KVLine(
        float(m.group(1)),
        int(shape.group(1)) if shape else None,
        int(shape.group(4)) if shape else None,
        buffers,
    )


def kv_buffer_sizes(log: str) -> dict[str, float]:
    """``{"total": 90.0, "K_f16": 45.0, "V_f16": 45.0}``: recorded per arm, proof the KV type took effect."""
    line = kv_cache_line(log)
    if line is None:
        return {}
    return {"total": line.mib, **{f"{which}_{dtype}": mib for which, dtype, mib in line.buffers}}


def llamacpp_capacity(log: str) -> dict[str, Any] | None:
    """The KV pool in tokens, MiB and types, and the weights' MiB, from llama-server's log."""
    line = kv_cache_line(log)
    if line is None or line.cells is None or line.seqs is None:
        return None
    unified = re.search(r"kv_unified\s*=\s*'?(true|false)", log)
    n_ctx = re.search(r"llama_context:\s+n_ctx\s*=\s*(\d+)", log)
    # Without a unified cache each sequence has its own stream of `cells`.
    per_stream = 1 if unified and unified.group(1) == "true" else line.seqs
    tokens = int(n_ctx.group(1)) if n_ctx else line.cells * per_stream
    size = re.search(r"file size\s*=\s*([\d.]+) MiB", log)  # the GGUF; buffers add CPU repacks
    weights = [size.group(1)] if size else re.findall(r"model buffer size\s*=\s*([\d.]+) MiB", log)
    slots = re.search(r"n_slots\s*=\s*(\d+)", log)
    types = {which: dtype for which, dtype, _ in line.buffers}
    return {
        "engine": "llamacpp",
        "source": "llama-server log",
        "kv_tokens": tokens,
        "kv_mib": line.mib,
        "kv_types": f"K {types['K']}, V {types['V']}" if {"K", "V"} <= set(types) else None,
        "weights_mib": round(sum(float(w) for w in weights), 2) if weights else None,
        "slots": int(slots.group(1)) if slots else None,
        "pool_sized_by_memory": False,
    }
