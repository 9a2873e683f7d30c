"""e4m3 round-to-nearest beside round-toward-zero on the same K/V: a format's cost vs an implementation's.

vLLM's CPU backend writes its FP8 cache by truncation (issue #45), which about doubles the KL of
e4m3 on the default model. The check quantizes the same seeded K/V both ways with the PyTorch
reference, per-tensor scales (vLLM's and SGLang's), and scores against float32 without
quantization: the reconstruction of K and V, and the decode attention output
(`decode_attention_ref` over the quantized cache against the same function over the float32
cache). Two data sets: standard normal K/V, and the decode cases' data with x10-x100 key channels
and a x100 value channel. The rows are information, not gated: round-to-nearest is what the
kernels do and what the gated rows score.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from evalgate.kernels import fp8_kv
from evalgate.kernels._cases import Ctx, decode_inputs
from evalgate.kernels.fp8_kv.e4m3 import ROUNDINGS
from evalgate.kernels.metrics import error_metrics

SHAPE = (2, 256, 8, 2, 128)
"""(batch, seq, q heads, kv heads, head_dim): the CPU shape of the GQA-4 decode case, on any device."""
DATA = {"normal": False, "outliers": True}
"""Data set name -> whether K and V have outlier channels."""


@dataclass(frozen=True)
class RoundingRow:
    """One quantity under each e4m3 rounding of the reference, against float32 (not gated)."""

    name: str
    """fp8_kv.quant (K and V reconstructed) or fp8_kv.decode (the attention output)."""
    data: str
    """normal (standard normal K/V) or outliers (the decode cases' data)."""
    shape: str
    """Human-readable shape and scale granularity."""
    metrics: Mapping[str, Mapping[str, float]]
    """Rounding (nearest, toward_zero) -> max_abs, rel_fro, cosine, sqnr_db against float32."""
    ratio: float
    """rel_fro of toward_zero / rel_fro of nearest: how many times the error truncation makes."""


def rounding_rows(ctx: Ctx) -> tuple[RoundingRow, ...]:
    """Both roundings of K/V and of the decode output, on each data set, with per-tensor scales."""
    bsz, seq, hq, hkv, dim = SHAPE
    shape = f"B{bsz} S{seq} Hq{hq}/Hkv{hkv} D{dim} tensor"
    rows = []
    for data, outliers in DATA.items():
        inputs = decode_inputs(ctx.gen(f"roundings{data}"), *SHAPE, outliers=outliers)
        q, k, v, lens = (t.to(ctx.device) for t in inputs)
        q, k, v = q.float(), k.float(), v.float()  # BF16 values, exact in float32
        ks, vs = fp8_kv.kv_scale(k, granularity="tensor"), fp8_kv.kv_scale(v, granularity="tensor")
        truth = fp8_kv.decode_attention_ref(q, k, v, None, None, lens)
        quant: dict[str, dict[str, float]] = {}
        decode: dict[str, dict[str, float]] = {}
        for rounding in ROUNDINGS:
            kq = fp8_kv.quantize_fp8(k, ks, rounding=rounding)
            vq = fp8_kv.quantize_fp8(v, vs, rounding=rounding)
            kv = torch.cat([fp8_kv.dequantize_fp8(kq, ks).flatten(), fp8_kv.dequantize_fp8(vq, vs).flatten()])
            quant[rounding] = error_metrics(kv, torch.cat([k.flatten(), v.flatten()]))
            decode[rounding] = error_metrics(fp8_kv.decode_attention_ref(q, kq, vq, ks, vs, lens), truth)
        for name, metrics in (("fp8_kv.quant", quant), ("fp8_kv.decode", decode)):
            ratio = metrics["toward_zero"]["rel_fro"] / metrics["nearest"]["rel_fro"]
            rows.append(RoundingRow(name, data, shape, metrics, ratio))
    return tuple(rows)


def format_roundings(rows: tuple[RoundingRow, ...]) -> list[str]:
    """The side-by-side table and a one-line summary (no lines when there are no rows)."""
    if not rows:
        return []
    head = (
        f"{'e4m3 rounding':<20} {'data':<9} {'shape':<34} {'nearest rel_fro':>15} {'SQNR dB':>8} "
        f"{'toward_zero rel_fro':>19} {'SQNR dB':>8} {'ratio':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        n, t = r.metrics["nearest"], r.metrics["toward_zero"]
        lines.append(
            f"{r.name:<20} {r.data:<9} {r.shape:<34} {n['rel_fro']:15.3e} {n['sqnr_db']:8.2f} "
            f"{t['rel_fro']:19.3e} {t['sqnr_db']:8.2f} {'x' + format(r.ratio, '.2f'):>6}"
        )
    by_data = {
        d: ", ".join(f"{r.name.split('.')[1]} x{r.ratio:.1f}" for r in rows if r.data == d) for d in DATA
    }
    lines.append(
        "toward zero, the error of round-to-nearest times: "
        + "; ".join(f"{text} ({d} K/V)" for d, text in by_data.items() if text)
        + ". The reference against float32, not gated; vLLM's CPU backend truncates."
    )
    return lines
