"""FP8 e4m3 (torch.float8_e4m3fn) scales, quantize and dequantize: the PyTorch reference.

Semantics, chosen to match the saturating hardware cast (PTX `cvt.rn.satfinite.e4m3x2.f32`) and
torch 2.13's own `.to(torch.float8_e4m3fn)`:
- scale = amax / 448 over finite values, so the largest magnitude maps to the largest e4m3 value;
- x / scale is clamped to [-448, 448] before rounding (saturation, never the 0x7F NaN code);
- +-inf saturates to +-448 (a cache must stay finite so that one bad token cannot poison a
  softmax row through inf - inf);
- NaN stays NaN (0x7F, or 0xFF with the sign bit) and does not enter the scale, so it only
  affects its own element; attention over a NaN element yields NaN, as the unquantized op would.

Rounding is to nearest, ties to even, unless `rounding="toward_zero"` asks for truncation: the
e4m3 value of largest magnitude not above |x / scale|, with its sign. That is how vLLM's CPU
backend writes its cache (issue #45); the numerics check scores both, so that the format's cost
and an implementation's are told apart.
"""

from __future__ import annotations

from typing import Literal

import torch

E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value (1.75 * 2**8)."""

_MIN_SCALE = 2.0**-126
"""Floor for all-zero rows so that 0 / scale stays 0 instead of NaN."""

Granularity = Literal["tensor", "token_head"]
Rounding = Literal["nearest", "toward_zero"]
ROUNDINGS: tuple[Rounding, ...] = ("nearest", "toward_zero")
"""Round to nearest, ties to even (the hardware cast's), and toward zero (truncation)."""


def kv_scale(x: torch.Tensor, *, granularity: Granularity = "token_head") -> torch.Tensor:
    """amax / 448 in float32: per tensor (0-d) or per (token, head) (shape x.shape[:-1]).

    Non-finite values are ignored: inf saturates and NaN propagates element-wise instead.
    """
    a = x.detach().float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype, device=a.device))
    if granularity == "tensor":
        amax = a.amax() if a.numel() else torch.zeros((), device=a.device)
    elif granularity == "token_head":
        amax = a.amax(dim=-1)
    else:
        raise ValueError(f"granularity must be 'tensor' or 'token_head', got {granularity!r}")
    return (amax / E4M3_MAX).clamp_min(_MIN_SCALE)


def _expand_scale(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Broadcast a 0-d (per-tensor) or x.shape[:-1] (per-row) scale over x's last dim."""
    scale = scale.to(device=x.device, dtype=torch.float32)
    if scale.numel() == 1:
        return scale.reshape(())
    if tuple(scale.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"scale shape {tuple(scale.shape)} must be () or {tuple(x.shape[:-1])}")
    return scale.unsqueeze(-1)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor, *, rounding: Rounding = "nearest") -> torch.Tensor:
    """Quantize to float8_e4m3fn: round clamp(x / scale, +-448) to nearest (ties to even) or toward zero.

    Toward zero gives the e4m3 value of largest magnitude not above |x / scale|, with its sign;
    saturation at +-448 and NaN are as for nearest.
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    y = (x.float() / _expand_scale(scale, x)).clamp(-E4M3_MAX, E4M3_MAX)
    q = y.to(torch.float8_e4m3fn)
    if rounding == "nearest":
        return q
    # Rounded up in magnitude: step one code toward zero. Codes are ordered by magnitude within a
    # sign (0x00..0x7E), and a value that rounded up is not zero, so its code minus 1 is the
    # neighbour below; NaN compares false and stays.
    bits = q.view(torch.uint8)
    up = q.float().abs() > y.abs()
    return torch.where(up, bits - 1, bits).view(torch.float8_e4m3fn)


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Back to `dtype`: float32(q) * scale (exact in float32, then one rounding to `dtype`)."""
    if q.dtype == torch.uint8:
        q = q.view(torch.float8_e4m3fn)
    return (q.float() * _expand_scale(scale, q)).to(dtype)
