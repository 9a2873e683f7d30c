"""Decode attention over an FP8 KV cache: the PyTorch reference (float32 math).

One query token per sequence. GQA: query head h reads KV head h // group, as in Hugging Face's
`repeat_kv`. Layouts:
- contiguous cache: [batch, seq, kv_heads, head_dim], scales () or [batch, seq, kv_heads];
- paged cache: [num_blocks, block_size, kv_heads, head_dim], scales () or
  [num_blocks, block_size, kv_heads], and block_table [batch, max_blocks] (int) mapping the
  sequence's i-th page to a cache block.
Caches may be float8_e4m3fn (or its uint8 bit pattern) with scales, or any float dtype with
scale None (the BF16 baseline).
"""

from __future__ import annotations

import math

import torch

from evalgate.kernels.fp8_kv.e4m3 import dequantize_fp8


def _dequant(cache: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    if cache.dtype in (torch.float8_e4m3fn, torch.uint8):
        if scale is None:
            raise ValueError("an FP8 cache needs its scale")
        return dequantize_fp8(cache, scale)
    return cache.float() if scale is None else cache.float() * scale.float().unsqueeze(-1)


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    if q.dim() != 3 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError("q must be [batch, q_heads, dim] and k/v caches [*, *, kv_heads, dim]")
    hq, hkv, d = q.shape[1], k.shape[2], k.shape[3]
    if q.shape[2] != d or hq % hkv:
        raise ValueError(f"q heads ({hq}) must be a multiple of kv heads ({hkv}) and dims must match")
    return hq // hkv


def decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v per sequence over its first seq_lens[b] tokens; returns q.dtype."""
    group = _check_shapes(q, k_cache, v_cache)
    if int(seq_lens.min()) < 1 or int(seq_lens.max()) > k_cache.shape[1]:
        raise ValueError("seq_lens must lie in [1, cache seq len]")
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    k = _dequant(k_cache, k_scale)
    v = _dequant(v_cache, v_scale)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        kb = k[b, :n].repeat_interleave(group, dim=1)  # [n, hq, d]
        vb = v[b, :n].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[b].float(), kb) * sm
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), vb)
    return out.to(q.dtype)


def gather_pages(
    cache: torch.Tensor, scale: torch.Tensor | None, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Contiguous [1, max_len, kv_heads, dim] view of one paged sequence (and its scales)."""
    page = cache.shape[1]
    pages = block_table[: math.ceil(seq_len / page)].long()
    flat = cache[pages].flatten(0, 1)[None]
    if scale is None or scale.numel() == 1:
        return flat, scale
    return flat, scale[pages].flatten(0, 1)[None]


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Paged variant: gathers each sequence's pages, then runs the contiguous reference."""
    _check_shapes(q, k_cache, v_cache)
    outs = []
    for b in range(q.shape[0]):
        n = int(seq_lens[b])
        kb, ks = gather_pages(k_cache, k_scale, block_table[b], n)
        vb, vs = gather_pages(v_cache, v_scale, block_table[b], n)
        lens = torch.tensor([n], device=q.device)
        outs.append(decode_attention_ref(q[b : b + 1], kb, vb, ks, vs, lens, sm_scale=sm_scale))
    return torch.cat(outs)
