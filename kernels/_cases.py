"""The shapes and seeded data that `evalgate.kernels.check` runs, with its fault injection.

Data are random normal with outlier channels (a few channels scaled by 10-100, as in LLM keys
and activations), generated on CPU from a per-case seed, so a case gets the same data whatever
else runs and on whichever device. CPU shapes keep the Triton interpreter under a minute; GPU
shapes are full size.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evalgate.kernels import fp8_kv, int4
from evalgate.kernels._names import FP8_KV, INT4
from evalgate.kernels.fp8_kv.e4m3 import Granularity

# Minimum SQNR (dB) against float64; kernels/README.md ("Thresholds") has the measurements.
QUANT_MIN_DB = 28.0
"""e4m3 round trip: 3 mantissa bits give ~31.5 dB on normal data (measured 31.6 per tensor)."""
DECODE_MIN_DB: dict[Granularity, float] = {"token_head": 25.0, "tensor": 12.0}
"""Decode attention output; x100 key channels cost per-tensor scales (SGLang's) ~15 dB."""
INT4_MIN_DB = 17.0
"""Round-to-nearest int4, group 128: ~19.1 dB symmetric, ~20.0 asymmetric on normal weights."""


@dataclass(frozen=True)
class Ctx:
    """What every case needs: device, seed, full (GPU) or small (CPU) shapes, and the fault."""

    device: torch.device
    seed: int
    full: bool
    fault: str | None

    def gen(self, name: str) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(name.encode()))

    def fp8_scale(self, x: torch.Tensor, granularity: Granularity) -> torch.Tensor:
        s = fp8_kv.kv_scale(x, granularity=granularity)
        return s / 4 if self.fault == "fp8_scale_div4" else s

    def fp8_deq(self, scale: torch.Tensor) -> torch.Tensor:
        return scale * 4 if self.fault == "fp8_scale_x4" else scale

    def int4_weight(self, wq: int4.Int4Weight) -> int4.Int4Weight:
        return dataclasses.replace(wq, scale=wq.scale * 4) if self.fault == "int4_scale_x4" else wq


@dataclass(frozen=True)
class Result:
    """float64 truth, each implementation's output, and (GPU) kernel and bf16 thunks to time."""

    truth: torch.Tensor
    outputs: dict[str, torch.Tensor]
    bench: tuple[Callable[[], object], Callable[[], object]] | None = None


@dataclass(frozen=True)
class Case:
    kernel: str
    name: str
    shape: str
    min_sqnr_db: float
    run: Callable[[Ctx], Result]


def _randn(shape: tuple[int, ...], g: torch.Generator, outliers: int = 0) -> torch.Tensor:
    """Standard normal data whose last dim has `outliers` random channels scaled by 10 to 100.

    The factors are log-spaced over [10, 100] (one outlier: 100), so every seed is equally hard.
    """
    x = torch.randn(shape, generator=g)
    if outliers:
        idx = torch.randperm(shape[-1], generator=g)[:outliers]
        x[..., idx] *= torch.logspace(2, 1, outliers) if outliers > 1 else torch.tensor([100.0])
    return x


def decode_inputs(
    g: torch.Generator, bsz: int, seq: int, hq: int, hkv: int, dim: int, *, outliers: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """BF16 q [bsz, hq, dim], k and v [bsz, seq, hkv, dim] (with `outliers`: four x10-x100 key
    channels and one x100 value channel) and int32 lengths (seq down to about seq / 2), on CPU."""
    q = _randn((bsz, hq, dim), g)
    k = _randn((bsz, seq, hkv, dim), g, outliers=4 if outliers else 0)
    v = _randn((bsz, seq, hkv, dim), g, outliers=1 if outliers else 0).bfloat16()
    # Unit-variance queries against x100 key channels give logits with std ~10 (one-hot
    # attention); scale q so the logits have unit standard deviation instead.
    logits = torch.einsum("bkgd,bskd->bkgs", q.reshape(bsz, hkv, hq // hkv, dim), k)
    q, k = (q * (math.sqrt(dim) / logits.std())).bfloat16(), k.bfloat16()
    lens = torch.tensor([seq - (b * seq) // (2 * bsz) for b in range(bsz)], dtype=torch.int32)
    return q, k, v, lens


def _attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Exact (float64) decode attention on the unquantized BF16 cache; q head h reads kv head h // group."""
    bsz, hq, dim = q.shape
    hkv = k.shape[2]
    out = torch.empty((bsz, hkv, hq // hkv, dim), dtype=torch.float64)
    for b in range(bsz):
        n = int(lens[b])
        qb = q[b].double().reshape(hkv, hq // hkv, dim)
        s = torch.einsum("kgd,nkd->kgn", qb, k[b, :n].double()) / math.sqrt(dim)
        out[b] = torch.einsum("kgn,nkd->kgd", torch.softmax(s, dim=-1), v[b, :n].double())
    return out.reshape(bsz, hq, dim)


def _fp8_quant(tokens: int, heads: int, dim: int, gran: Granularity) -> Callable[[Ctx], Result]:
    def run(ctx: Ctx) -> Result:
        x = _randn((tokens, heads, dim), ctx.gen(f"quant{dim}{gran}"), outliers=2).bfloat16().to(ctx.device)
        scale = ctx.fp8_scale(x, gran)
        ref = fp8_kv.dequantize_fp8(fp8_kv.quantize_fp8(x, scale), ctx.fp8_deq(scale))
        tri = fp8_kv.dequantize_fp8_triton(fp8_kv.quantize_fp8_triton(x, scale), ctx.fp8_deq(scale))
        return Result(x.double().cpu(), {"reference": ref, "triton": tri})

    return run


def _fp8_decode(
    bsz: int, seq: int, hq: int, hkv: int, dim: int, gran: Granularity, page: int
) -> Callable[[Ctx], Result]:
    """Decode attention; page > 0 runs the paged kernel on a shuffled block table."""

    def run(ctx: Ctx) -> Result:
        g = ctx.gen(f"decode{hq}{hkv}{dim}{gran}{page}")
        q, k, v, lens = decode_inputs(g, bsz, seq, hq, hkv, dim)
        truth = _attention_f64(q, k, v, lens)
        q, k, v, lens = (t.to(ctx.device) for t in (q, k, v, lens))
        args: tuple[torch.Tensor, ...]
        if page:
            n_pages = seq // page
            perm = torch.randperm(bsz * n_pages, generator=g).to(ctx.device)
            table = perm.reshape(bsz, n_pages).to(torch.int32)
            kc = torch.empty((bsz * n_pages, page, hkv, dim), dtype=k.dtype, device=ctx.device)
            vc = torch.empty_like(kc)
            kc[perm] = k.reshape(bsz * n_pages, page, hkv, dim)
            vc[perm] = v.reshape(bsz * n_pages, page, hkv, dim)
            k, v, args = kc, vc, (table, lens)
            ref_fn, tri_fn = fp8_kv.paged_decode_attention_ref, fp8_kv.paged_decode_attention_triton
        else:
            args = (lens,)
            ref_fn, tri_fn = fp8_kv.decode_attention_ref, fp8_kv.decode_attention_triton
        ks, vs = ctx.fp8_scale(k, gran), ctx.fp8_scale(v, gran)
        kq, vq = fp8_kv.quantize_fp8_triton(k, ks), fp8_kv.quantize_fp8_triton(v, vs)
        dk, dv = ctx.fp8_deq(ks), ctx.fp8_deq(vs)
        outputs = {
            "reference": ref_fn(q, fp8_kv.quantize_fp8(k, ks), fp8_kv.quantize_fp8(v, vs), dk, dv, *args),
            "triton": tri_fn(q, kq, vq, dk, dv, *args),
        }
        bench = None
        if ctx.full and not page:
            bench = (lambda: tri_fn(q, kq, vq, dk, dv, *args), _sdpa_bf16(q, k, v, lens))
        return Result(truth, outputs, bench)

    return run


def _sdpa_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> Callable[[], object]:
    """The BF16 counterpart: torch SDPA over the unquantized cache with a length mask."""
    qh, kh, vh = q.unsqueeze(2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, S, D]
    mask = (torch.arange(k.shape[1], device=k.device)[None, :] < lens[:, None])[:, None, None, :]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        sdpa(qh, kh, vh, attn_mask=mask, enable_gqa=True)
    except TypeError:  # torch < 2.5 has no enable_gqa: repeat KV heads (reads more memory)
        group = q.shape[1] // k.shape[2]
        kh, vh = kh.repeat_interleave(group, dim=1), vh.repeat_interleave(group, dim=1)
        return lambda: sdpa(qh, kh, vh, attn_mask=mask)
    return lambda: sdpa(qh, kh, vh, attn_mask=mask, enable_gqa=True)


def _int4_roundtrip(n: int, k: int, group: int, symmetric: bool) -> Callable[[Ctx], Result]:
    def run(ctx: Ctx) -> Result:
        w = (_randn((n, k), ctx.gen(f"w{n}{k}{group}{symmetric}")) / 50).bfloat16().to(ctx.device)
        wq = ctx.int4_weight(int4.quantize_int4(w, group_size=group, symmetric=symmetric))
        return Result(w.double().cpu(), {"reference": int4.dequantize_int4(wq)})

    return run


def _int4_matmul(m: int, n: int, k: int, group: int, symmetric: bool) -> Callable[[Ctx], Result]:
    def run(ctx: Ctx) -> Result:
        g = ctx.gen(f"mm{m}{n}{k}{group}{symmetric}")
        x = _randn((m, k), g, outliers=4).bfloat16()
        w = (_randn((n, k), g) / 50).bfloat16()
        truth = x.double() @ w.double().T
        x, w = x.to(ctx.device), w.to(ctx.device)
        wq = ctx.int4_weight(int4.quantize_int4(w, group_size=group, symmetric=symmetric))
        outputs = {"reference": int4.w4a16_matmul_ref(x, wq), "triton": int4.w4a16_matmul_triton(x, wq)}
        bench = (lambda: int4.w4a16_matmul_triton(x, wq), lambda: x @ w.T) if ctx.full else None
        return Result(truth, outputs, bench)

    return run


def cases(kernel: str, *, full: bool) -> list[Case]:
    """The check's cases for one kernel family; `full` selects GPU-sized shapes."""
    if kernel == FP8_KV:
        tokens, bsz, seq, heads = (4096, 8, 4096, 1) if full else (256, 2, 256, 4)
        out = [
            Case(
                FP8_KV, "fp8_kv.quant", f"T{tokens} H8 D{d} {gr}", QUANT_MIN_DB, _fp8_quant(tokens, 8, d, gr)
            )
            for d, gr in ((64, "token_head"), (128, "token_head"), (128, "tensor"))
        ]
        # (q heads, kv heads, head_dim) at full size: GQA 1 (multi-head, dim 64), 4 (Llama-3-8B),
        # 8 (Llama-3-70B); CPU runs a quarter of the heads.
        for hq, hkv, d in (
            (32 // heads, 32 // heads, 64),
            (32 // heads, 8 // heads, 128),
            (64 // heads, 8 // heads, 128),
        ):
            for gran, page in (("tensor", 0), ("token_head", 16)):
                if page and hq // hkv != 4:
                    continue
                kind = "fp8_kv.paged_decode" if page else "fp8_kv.decode"
                shape = f"B{bsz} S{seq} Hq{hq}/Hkv{hkv} D{d} {gran}" + (f" page{page}" if page else "")
                out.append(
                    Case(
                        FP8_KV,
                        kind,
                        shape,
                        DECODE_MIN_DB[gran],
                        _fp8_decode(bsz, seq, hq, hkv, d, gran, page),
                    )
                )
        return out
    if kernel == INT4:
        m = 16 if full else 4
        out = [
            Case(
                INT4,
                "int4.quant",
                f"N1024 K4096 g128 {'sym' if s else 'asym'}",
                INT4_MIN_DB,
                _int4_roundtrip(1024, 4096, 128, s),
            )
            for s in (True, False)
        ]
        # K: SmolLM2-135M (576, group 64 because 576 % 128 != 0), Qwen2.5-1.5B, Llama-3-8B, Llama-3-70B.
        for k, group, sym in (
            (576, 64, True),
            (1536, 128, True),
            (4096, 128, True),
            (4096, 128, False),
            (8192, 128, True),
        ):
            n = k if full else 256
            shape = f"M{m} N{n} K{k} g{group} {'sym' if sym else 'asym'}"
            out.append(Case(INT4, "int4.w4a16", shape, INT4_MIN_DB, _int4_matmul(m, n, k, group, sym)))
        return out
    raise ValueError(f"unknown kernel {kernel!r}")
