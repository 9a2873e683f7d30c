"""Group-wise INT4 weight quantization in compressed-tensors' `pack-quantized` layout (reference).

Conventions follow compressed-tensors (src/compressed_tensors/quantization/utils/helpers.py,
`calculate_qparams`; lifecycle/forward.py, `_quantize`; and
compressors/quantized_compressors/pack_quantized.py, `pack_to_int32`/`unpack_from_int32`), read
and re-implemented here, not copied:
- quantized values are signed int4 in [-8, 7]; the range always contains 0;
- symmetric: scale = amax / 7.5 (amax / ((q_max - q_min) / 2)), zero point 0, so +amax rounds to
  8 and clamps to 7;
- asymmetric: scale = (max - min) / 15, zero point = round(-8 - min / scale) in [-8, 7];
- q = clamp(round(w / scale) + zero_point, -8, 7), torch.round (ties to even);
  dequantized w = (q - zero_point) * scale;
- packing: each value is stored as the unsigned nibble q + 8; eight consecutive values along the
  packed dim share one int32, value j of the eight in bits 4j..4j+3 (least significant first).
  Weights [N, K] pack along K to [N, K / 8]; asymmetric zero points [N, K / group] pack along N
  to [ceil(N / 8), K / group].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PACK = 8
"""int4 values per int32 word."""
OFFSET = 8
"""Added to signed int4 values before packing (the unsigned nibble is q + 8)."""


@dataclass(frozen=True)
class Int4Weight:
    """A packed INT4 weight of logical shape [N, K] with its group-wise quantization parameters."""

    packed: torch.Tensor
    """int32 [N, K / 8], `weight_packed` in compressed-tensors."""
    scale: torch.Tensor
    """float [N, K / group_size], `weight_scale`."""
    zero_point: torch.Tensor | None
    """int32 [ceil(N / 8), K / group_size] packed along N (`weight_zero_point`), None if symmetric."""
    shape: tuple[int, int]
    """Logical (N, K), `weight_shape`."""
    group_size: int

    @property
    def symmetric(self) -> bool:
        return self.zero_point is None


def int4_qparams(
    w: torch.Tensor, *, group_size: int = 128, symmetric: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-(row, group) scale (float32) and signed zero point (int8) for a [N, K] weight."""
    n, k = _check_weight(w, group_size)
    g = w.detach().float().reshape(n, k // group_size, group_size)
    lo = g.amin(dim=-1).clamp(max=0.0)
    hi = g.amax(dim=-1).clamp(min=0.0)
    if symmetric:
        scale = torch.maximum(-lo, hi) / 7.5
        zero = torch.zeros_like(scale)
    else:
        scale = (hi - lo) / 15.0
        zero = (-8.0 - lo / torch.where(scale == 0, 1.0, scale)).clamp(-8, 7).round()
    scale = torch.where(scale == 0, torch.finfo(torch.float32).eps, scale)
    return scale, zero.to(torch.int8)


def quantize_int4_values(
    w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Signed int4 values (int8 in [-8, 7]) of a [N, K] weight for given qparams."""
    n, k = _check_weight(w, group_size)
    g = w.detach().float().reshape(n, k // group_size, group_size)
    q = torch.round(g / scale.unsqueeze(-1)) + zero.float().unsqueeze(-1)
    return q.clamp(-8, 7).to(torch.int8).reshape(n, k)


def quantize_int4(w: torch.Tensor, *, group_size: int = 128, symmetric: bool = True) -> Int4Weight:
    """Quantize and pack a [N, K] weight (K divisible by group_size, group_size by 8)."""
    scale, zero = int4_qparams(w, group_size=group_size, symmetric=symmetric)
    q = quantize_int4_values(w, scale, zero, group_size)
    return Int4Weight(
        packed=pack_int4(q, dim=1),
        scale=scale,
        zero_point=None if symmetric else pack_int4(zero, dim=0),
        shape=(int(w.shape[0]), int(w.shape[1])),
        group_size=group_size,
    )


def pack_int4(q: torch.Tensor, *, dim: int = 1) -> torch.Tensor:
    """Pack a 2-D int8 tensor of values in [-8, 7] along `dim` into int32 (zero-padded)."""
    if q.dtype != torch.int8 or q.dim() != 2:
        raise ValueError("pack_int4 expects a 2-D int8 tensor")
    if int(q.min()) < -8 or int(q.max()) > 7:
        raise ValueError("int4 values must lie in [-8, 7]")
    u = (q.to(torch.int64) + OFFSET).movedim(dim, 1)
    pad = (-u.shape[1]) % PACK
    u = torch.nn.functional.pad(u, (0, pad))
    words = u.reshape(u.shape[0], -1, PACK) << (4 * torch.arange(PACK, device=q.device))
    packed = words.sum(dim=-1)  # disjoint bit fields, so the sum is a bitwise or
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return packed.movedim(1, dim).contiguous()


def unpack_int4(packed: torch.Tensor, size: int, *, dim: int = 1) -> torch.Tensor:
    """Inverse of `pack_int4`: int8 values in [-8, 7], trimmed to `size` along `dim`."""
    if packed.dtype != torch.int32 or packed.dim() != 2:
        raise ValueError("unpack_int4 expects a 2-D int32 tensor")
    p = packed.movedim(dim, 1)
    shifts = 4 * torch.arange(PACK, device=packed.device, dtype=torch.int32)
    nibbles = (p.unsqueeze(-1) >> shifts) & 0xF  # arithmetic shift is fine after masking
    q = (nibbles.reshape(p.shape[0], -1)[:, :size] - OFFSET).to(torch.int8)
    return q.movedim(1, dim).contiguous()


def dequantize_int4(wq: Int4Weight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Dense [N, K] weight: (q - zero_point) * scale in float32, then cast to `dtype`."""
    n, k = wq.shape
    q = unpack_int4(wq.packed, k, dim=1).float().reshape(n, k // wq.group_size, wq.group_size)
    zero = 0.0 if wq.zero_point is None else unpack_int4(wq.zero_point, n, dim=0).float().unsqueeze(-1)
    return ((q - zero) * wq.scale.float().unsqueeze(-1)).reshape(n, k).to(dtype)


def w4a16_matmul_ref(x: torch.Tensor, wq: Int4Weight) -> torch.Tensor:
    """x[M, K] @ dequant(W)[N, K].T in float32 math; returns x.dtype."""
    if x.dim() != 2 or x.shape[1] != wq.shape[1]:
        raise ValueError(f"x must be [M, {wq.shape[1]}], got {tuple(x.shape)}")
    return (x.float() @ dequantize_int4(wq).to(x.device).T).to(x.dtype)


def _check_weight(w: torch.Tensor, group_size: int) -> tuple[int, int]:
    if w.dim() != 2:
        raise ValueError("weights must be 2-D [N, K]")
    n, k = int(w.shape[0]), int(w.shape[1])
    if group_size <= 0 or group_size % PACK:
        raise ValueError(f"group_size must be a positive multiple of {PACK}, got {group_size}")
    if k % group_size:
        raise ValueError(
            f"K={k} is not divisible by group_size={group_size} (compressed-tensors and vLLM's "
            "int4 kernels need whole groups); pick a group size that divides K, e.g. 64 or 32"
        )
    if not bool(torch.isfinite(w).all()):
        raise ValueError("weights contain NaN or inf; int4 quantization needs finite weights")
    return n, k
