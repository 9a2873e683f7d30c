"""Triton W4A16 matmul: x[M, K] @ dequant(W[N, K]).T with the int4 unpacking done in the kernel.

Import through `evalgate.kernels._triton.triton_module("int4")`. Each K tile lies inside one
quantization group (group_size % BLOCK_K == 0), so a tile needs one scale (and zero point) per
output row.
Under the interpreter the dot runs in float32 (`input_precision="ieee"`): the interpreter's bf16
`tl.dot` and float32 -> bf16 casts are wrong (measured: errors of 1e10 and 505/1024 mismatched
roundings). On a GPU, fp16/bf16 activations use the tensor-core dot with dequantized weights cast
to the activation dtype and a float32 accumulator.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evalgate.kernels._triton import check_device, interpreting
from evalgate.kernels.int4.quant import Int4Weight


@triton.jit
def _w4a16_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, o_ptr,
    M, N, K,
    sx_m, sw_n, ss_n, sz_r, so_m,
    GROUP: tl.constexpr, HAS_ZP: tl.constexpr, DOT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mmask = offs_m < M
    nmask = offs_n < N
    shifts = (offs_k % 8) * 4  # value j of a word sits in bits 4j..4j+3
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * sx_m + kk[None, :], mask=mmask[:, None], other=0.0)
        words = tl.load(
            w_ptr + offs_n[:, None].to(tl.int64) * sw_n + (kk // 8)[None, :], mask=nmask[:, None], other=0
        )
        nib = (words >> shifts[None, :]) & 0xF
        g = k0 // GROUP
        s = tl.load(s_ptr + offs_n.to(tl.int64) * ss_n + g, mask=nmask, other=0.0).to(tl.float32)
        if HAS_ZP:
            zw = tl.load(z_ptr + (offs_n // 8).to(tl.int64) * sz_r + g, mask=nmask, other=0)
            zero = (zw >> ((offs_n % 8) * 4)) & 0xF
        else:
            zero = tl.full((BLOCK_N,), 8, tl.int32)
        w = (nib - zero[:, None]).to(tl.float32) * s[:, None]  # [BLOCK_N, BLOCK_K]
        if DOT_F32:
            acc = tl.dot(x.to(tl.float32), tl.trans(w), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    optr = o_ptr + offs_m[:, None].to(tl.int64) * so_m + offs_n[None, :]
    tl.store(optr, acc, mask=mmask[:, None] & nmask[None, :])


def w4a16_matmul_triton(
    x: torch.Tensor,
    wq: Int4Weight,
    *,
    block_m: int = 16,
    block_n: int = 64,
    block_k: int | None = None,
) -> torch.Tensor:
    """Triton twin of `w4a16_matmul_ref`; float32 accumulation, returns x.dtype."""
    n, k = wq.shape
    if x.dim() != 2 or x.shape[1] != k:
        raise ValueError(f"x must be [M, {k}], got {tuple(x.shape)}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x must be fp16, bf16 or fp32, got {x.dtype}")
    bk = block_k or min(wq.group_size, 128)
    if wq.group_size % bk or bk % 8:
        raise ValueError(f"block_k={bk} must be a multiple of 8 that divides group_size={wq.group_size}")
    check_device(x, wq.packed, wq.scale)
    x = x.contiguous()
    packed, scale = wq.packed.contiguous(), wq.scale.contiguous()
    zp = wq.zero_point.contiguous() if wq.zero_point is not None else packed  # dummy pointer
    m = x.shape[0]
    out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _w4a16_kernel[grid](
        x, packed, scale, zp, out,
        m, n, k,
        x.stride(0), packed.stride(0), scale.stride(0), zp.stride(0), out.stride(0),
        GROUP=wq.group_size, HAS_ZP=wq.zero_point is not None,
        DOT_F32=interpreting() or x.dtype == torch.float32,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=bk,
    )  # fmt: skip
    return out.to(x.dtype)
