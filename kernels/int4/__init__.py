"""INT4 weights: group-wise quantization, compressed-tensors packing, and a W4A16 matmul.

The PyTorch reference lives in `evalgate.kernels.int4.quant`; `w4a16_matmul_triton` resolves on
first use so that the Triton mode is chosen first (see `evalgate.kernels._triton`).
"""

from __future__ import annotations

from typing import Any

from evalgate.kernels.int4.quant import (
    Int4Weight,
    dequantize_int4,
    int4_qparams,
    pack_int4,
    quantize_int4,
    quantize_int4_values,
    unpack_int4,
    w4a16_matmul_ref,
)

__all__ = [
    "Int4Weight",
    "dequantize_int4",
    "int4_qparams",
    "pack_int4",
    "quantize_int4",
    "quantize_int4_values",
    "unpack_int4",
    "w4a16_matmul_ref",
    "w4a16_matmul_triton",
]


def __getattr__(name: str) -> Any:
    """Import the Triton kernel only when first asked for (PEP 562)."""
    if name == "w4a16_matmul_triton":
        from evalgate.kernels._triton import triton_module

        return triton_module("int4").w4a16_matmul_triton
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
