"""FP8 (e4m3) KV cache: scales, quantize/dequantize, decode attention, and scale calibration.

Each kernel has a PyTorch reference (float32 math, runs anywhere) and a Triton twin whose name ends
in `_triton`. Names resolve on first use: the Triton module must be imported after the Triton mode
is chosen (see `evalgate.kernels._triton`), and `evalgate.kernels.fp8_kv.sglang_json` must stay
usable without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "E4M3_MAX": "e4m3",
    "ROUNDINGS": "e4m3",
    "dequantize_fp8": "e4m3",
    "kv_scale": "e4m3",
    "quantize_fp8": "e4m3",
    "decode_attention_ref": "attention",
    "paged_decode_attention_ref": "attention",
    "KVScaleCalibrator": "calibrate",
    "KVScales": "calibrate",
    "export_sglang_kv_scales": "calibrate",
    "load_sglang_kv_scales": "sglang_json",
    "sglang_kv_scales_dict": "sglang_json",
    "quantize_fp8_triton": None,
    "dequantize_fp8_triton": None,
    "decode_attention_triton": None,
    "paged_decode_attention_triton": None,
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Resolve public names lazily (PEP 562); Triton names go through `triton_module`."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name = _WHERE[name]
    if module_name is None:
        from evalgate.kernels._triton import triton_module

        return getattr(triton_module("fp8"), name)
    return getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
