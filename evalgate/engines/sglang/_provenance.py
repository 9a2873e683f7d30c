"""What an SGLang server ran, from ``/server_info`` and its log (``Engine.provenance``).

SGLang 0.5.23's ``/server_info`` is ``ServerArgs.resolved_dict()`` (``utils/common.py``,
``build_server_info``): every server arg after its own resolution, so ``attention_backend`` is
the backend chosen (``torch_native`` on the CPU), with ``prefill_attention_backend`` and
``decode_attention_backend`` overriding it per phase; ``enable_deterministic_inference`` and
``speculative_algorithm`` as they took effect. Its ``kv_cache_dtype`` is the flag (``auto`` says
nothing), so the cache is read from the memory pool's log line, ``KV Cache is allocated. dtype:
torch.float32, #tokens: ...`` (``mem_cache/memory_pool.py``). The FP8 KV scales come from the
launch's ``kv_scales`` fact (``engines._kv_scales``: the scales file's load line or the 1.0
fallback warning). Fixtures: tests/fixtures/provenance/sglang_cpu_*.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalgate.store.provenance import Provenance, kv_scales_fact

__all__ = ["sglang_provenance"]

_POOL = re.compile(
    r"(?:Post-capture KV sizing: KV cache allocated|KV Cache is allocated)\. dtype: (?:torch\.)?(\w+)"
)


def sglang_provenance(
    args: Mapping[str, Any], log: str = "", *, kv_scales: Mapping[str, Any] | None = None
) -> Provenance:
    """The facts of one SGLang server: ``args`` its ``/server_info`` (or an attached server's
    recorded server args), ``log`` its log (empty for an attached server)."""
    pool = _POOL.findall(log)
    flag = args.get("kv_cache_dtype")
    kv = pool[-1] if pool else (str(flag) if flag and flag != "auto" else None)
    scales = kv_scales_fact(kv, (kv_scales or {}).get("scale"), ("file", "1.0"))
    backend = args.get("attention_backend")
    prefill, decode = args.get("prefill_attention_backend"), args.get("decode_attention_backend")
    if (prefill or decode) and (prefill or backend) != (decode or backend):
        attention = f"prefill {prefill or backend}, decode {decode or backend}"
    else:
        attention = prefill or decode or backend
    dtype, method = args.get("dtype"), args.get("quantization")
    weights = None
    if dtype is not None or method is not None:
        weights = str(dtype or "auto") + (f" ({method})" if method else "")
    deterministic = args.get("enable_deterministic_inference")
    algorithm = args.get("speculative_algorithm")
    return Provenance(
        kv_cache_dtype=kv,
        kv_scales=scales,
        attention_backend=str(attention) if attention else None,
        weight_format=weights,
        batch_invariant=None if deterministic is None else ("on" if deterministic else "off"),
        speculative=("off" if algorithm in (None, "", "NONE") else str(algorithm))
        if "speculative_algorithm" in args
        else None,
        source=", ".join(s for s, read in (("/server_info", args), ("sglang log", log)) if read) or None,
    )
