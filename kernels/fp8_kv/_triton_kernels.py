"""Triton kernels for the FP8 KV cache: quantize, dequantize and decode attention.

Import through `evalgate.kernels._triton.triton_module("fp8")`, never directly: Triton picks compile
or interpret mode at decoration time. The e4m3 conversions are written out with integer and float32
math instead of `tl.float8e4nv` casts, because the interpreter's fp32 -> fp8 cast rounds wrongly
at binade boundaries (125.4 -> 64, measured). Written out, the same code runs, and is tested
bit-for-bit against torch, on CPU and on a GPU.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from evalgate.kernels._triton import check_device, interpreting


@triton.jit
def _f32_to_e4m3_bits(y):
    """float32 -> e4m3fn bit pattern (int32): RNE to 3 mantissa bits, subnormals, saturation."""
    raw = y.to(tl.int32, bitcast=True)
    sign = (raw >> 31) & 1
    is_nan = y != y
    y = tl.minimum(tl.maximum(y, -448.0), 448.0)  # +-inf and overflow saturate to +-448
    a = y.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    # Normal range (|y| >= 2**-6): round the 23-bit mantissa to 3 bits, ties to even. A carry
    # propagates into the exponent, which is what turns 125.4 into 128.
    lsb = (a >> 20) & 1
    normal = ((a + 0x7FFFF + lsb) >> 20) - (120 << 3)  # rebias exponent 127 -> 7
    # Subnormal range: |y| = m * 2**-9 with m in 0..8 (m == 8 is the smallest normal, 0x08).
    v = a.to(tl.float32, bitcast=True) * 512.0
    t = v.to(tl.int32)
    frac = v - t.to(tl.float32)
    up = (frac > 0.5) | ((frac == 0.5) & ((t & 1) == 1))
    sub = t + up.to(tl.int32)
    mag = tl.where(a < 0x3C800000, sub, normal)  # 0x3C800000 == 2**-6
    mag = tl.where(is_nan, 0x7F, mag)
    return (sign << 7) | mag


@triton.jit
def _e4m3_bits_to_f32(b):
    """e4m3fn bit pattern (any int dtype) -> float32, exactly; 0x7F/0xFF decode to NaN."""
    b = b.to(tl.int32) & 0xFF
    sign = b >> 7
    e = (b >> 3) & 0xF
    m = b & 0x7
    normal = ((sign << 31) | ((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * 0.001953125  # m * 2**-9
    sub = tl.where(sign == 1, -sub, sub)
    val = tl.where(e == 0, sub, normal)
    nan = ((sign << 31) | 0x7FC00000).to(tl.float32, bitcast=True)  # keeps the sign, like torch
    return tl.where((b & 0x7F) == 0x7F, nan, val)


@triton.jit
def _row_tile(s_ptr, R, D, s_stride, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's BLOCK_R x BLOCK_D tile of a [R, D] array: its element offsets and mask, and
    its rows' scales (1.0 past the last row), so the quantize and dequantize kernels differ only
    in what they do to each element."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    rmask = rows < R
    mask = rmask[:, None] & (cols[None, :] < D)
    offs = rows.to(tl.int64)[:, None] * D + cols[None, :]
    s = tl.load(s_ptr + rows * s_stride, mask=rmask, other=1.0)
    return offs, mask, s


@triton.jit
def _quantize_kernel(x_ptr, s_ptr, q_ptr, R, D, s_stride, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    offs, mask, s = _row_tile(s_ptr, R, D, s_stride, BLOCK_R, BLOCK_D)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.math.div_rn(x, s[:, None])  # IEEE division, as torch does
    tl.store(q_ptr + offs, _f32_to_e4m3_bits(y).to(tl.uint8), mask=mask)


@triton.jit
def _dequantize_kernel(q_ptr, s_ptr, o_ptr, R, D, s_stride, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    offs, mask, s = _row_tile(s_ptr, R, D, s_stride, BLOCK_R, BLOCK_D)
    b = tl.load(q_ptr + offs, mask=mask, other=0)
    tl.store(o_ptr + offs, _e4m3_bits_to_f32(b) * s[:, None], mask=mask)


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, bt_ptr, len_ptr, o_ptr,
    sm_scale, page,
    sq_b, sq_h, sc_blk, sc_tok, sc_head, ss_blk, ss_tok, ss_head, sbt_b, so_b, so_h,
    GROUP: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, query head); online softmax over BLOCK_N tokens at a time."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    n_tok = tl.load(len_ptr + b)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    q = tl.load(q_ptr + b * sq_b + h * sq_h + offs_d, mask=dmask, other=0.0).to(tl.float32)
    q = q * sm_scale
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, n_tok, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        tmask = t < n_tok
        blk = tl.load(bt_ptr + b * sbt_b + t // page, mask=tmask, other=0).to(tl.int64)
        off = t % page
        base = blk * sc_blk + off * sc_tok + kvh * sc_head
        mask2 = tmask[:, None] & dmask[None, :]
        sbase = blk * ss_blk + off * ss_tok + kvh * ss_head
        ks = tl.load(ks_ptr + sbase, mask=tmask, other=1.0)
        vs = tl.load(vs_ptr + sbase, mask=tmask, other=1.0)
        k = _e4m3_bits_to_f32(tl.load(k_ptr + base[:, None] + offs_d[None, :], mask=mask2, other=0))
        v = _e4m3_bits_to_f32(tl.load(v_ptr + base[:, None] + offs_d[None, :], mask=mask2, other=0))
        s = tl.sum(q[None, :] * (k * ks[:, None]), axis=1)
        s = tl.where(tmask, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * (v * vs[:, None]), axis=0)
        m_i = m_new
    tl.store(o_ptr + b * so_b + h * so_h + offs_d, acc / l_i, mask=dmask)


def _rows(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Flatten to [rows, dim] with one float32 scale per row (stride 0 for a per-tensor scale)."""
    d = x.shape[-1]
    scale = scale.to(device=x.device, dtype=torch.float32)
    if scale.numel() == 1:
        return x.reshape(-1, d).contiguous(), scale.reshape(1).contiguous(), 0
    if tuple(scale.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"scale shape {tuple(scale.shape)} must be () or {tuple(x.shape[:-1])}")
    return x.reshape(-1, d).contiguous(), scale.reshape(-1).contiguous(), 1


def _grid_rows(r: int, d: int) -> tuple[int, int, int]:
    """Tile of rows x dim; the interpreter's cost is per operation, so it gets larger tiles."""
    block_d = triton.next_power_of_2(d)
    block_r = max(1, min(512 if interpreting() else 64, 8192 // block_d * (8 if interpreting() else 1)))
    return block_r, block_d, triton.cdiv(r, block_r)


def _run_rows(
    kernel: triton.JITFunction, x: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """Launch a `_row_tile` kernel over x as [rows, dim]; returns its output, [rows, dim] too."""
    check_device(x)
    flat, s, s_stride = _rows(x, scale)
    out = torch.empty(flat.shape, dtype=out_dtype, device=x.device)
    if flat.numel():
        block_r, block_d, grid = _grid_rows(flat.shape[0], flat.shape[1])
        kernel[(grid,)](flat, s, out, flat.shape[0], flat.shape[1], s_stride, block_r, block_d)
    return out


def quantize_fp8_triton(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Triton twin of `quantize_fp8`; returns the uint8 bit pattern viewed as float8_e4m3fn."""
    return _run_rows(_quantize_kernel, x, scale, torch.uint8).view(torch.float8_e4m3fn).reshape(x.shape)


def dequantize_fp8_triton(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Triton twin of `dequantize_fp8` (explicit e4m3 decode, then float32 * scale)."""
    return _run_rows(_dequantize_kernel, q.view(torch.uint8), scale, torch.float32).reshape(q.shape).to(dtype)


def _scale_arg(scale: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    scale = scale.to(device=cache.device, dtype=torch.float32)
    if scale.numel() == 1:
        return scale.reshape(1), (0, 0, 0)
    if tuple(scale.shape) != tuple(cache.shape[:3]):
        raise ValueError(f"scale shape {tuple(scale.shape)} must be () or {tuple(cache.shape[:3])}")
    return scale, (scale.stride(0), scale.stride(1), scale.stride(2))


def paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Triton twin of `paged_decode_attention_ref` (cache [num_blocks, block_size, kv_heads, dim]);
    validates, then runs the kernel, which the contiguous variant shares."""
    block_table = block_table.to(device=q.device, dtype=torch.int32)
    if block_table.dim() != 2 or block_table.stride(1) != 1:
        block_table = block_table.reshape(q.shape[0], -1).contiguous()
    if block_n is None:  # interpreter cost is per operation: fewer, larger token blocks
        block_n = 128 if interpreting() else 64
    for c in (k_cache, v_cache):
        if c.dtype not in (torch.float8_e4m3fn, torch.uint8) or c.stride(3) != 1:
            raise ValueError("caches must be float8_e4m3fn (or uint8 bits) with a contiguous last dim")
    if k_cache.stride() != v_cache.stride():
        raise ValueError("k and v caches must share a layout")
    bsz, hq, d = q.shape
    hkv = k_cache.shape[2]
    if hq % hkv or q.shape[2] != k_cache.shape[3]:
        raise ValueError(f"q heads ({hq}) must be a multiple of kv heads ({hkv}) and dims must match")
    lens = seq_lens.to(device=q.device, dtype=torch.int32).contiguous()
    if lens.numel() != bsz or int(lens.min()) < 1:
        raise ValueError("seq_lens needs one length >= 1 per sequence")
    if int(lens.max()) > block_table.shape[1] * k_cache.shape[1]:
        raise ValueError("a sequence is longer than its cache (block_table width x block size)")
    check_device(q, k_cache, v_cache, block_table)
    q = q.contiguous()
    ks, ks_strides = _scale_arg(k_scale, k_cache)
    vs, vs_strides = _scale_arg(v_scale, v_cache)
    if ks_strides != vs_strides:
        raise ValueError("k_scale and v_scale must have the same granularity")
    out = torch.empty((bsz, hq, d), dtype=torch.float32, device=q.device)
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    kc, vc = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    _decode_kernel[(bsz, hq)](
        q, kc, vc, ks, vs, block_table, lens, out,
        sm, k_cache.shape[1],
        q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2), *ks_strides,
        block_table.stride(0), out.stride(0), out.stride(1),
        GROUP=hq // hkv, D=d, BLOCK_D=triton.next_power_of_2(d), BLOCK_N=block_n,
    )  # fmt: skip
    return out.to(q.dtype)


def decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Triton twin of `decode_attention_ref` for an FP8 contiguous cache [batch, seq, kv_heads, dim].

    A contiguous cache is a paged one with one page per sequence, so both share one kernel.
    """
    bsz = q.shape[0]
    if k_cache.shape[0] != bsz:
        raise ValueError("contiguous cache batch must equal q batch")
    table = torch.arange(bsz, dtype=torch.int32, device=q.device).reshape(bsz, 1)
    return paged_decode_attention_triton(
        q, k_cache, v_cache, k_scale, v_scale, table, seq_lens, sm_scale=sm_scale, block_n=block_n
    )
