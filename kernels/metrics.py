"""Error metrics of a kernel output against a float64 reference.

SQNR (signal to quantization-noise ratio) = 10 log10(sum ref^2 / sum (out - ref)^2) in dB; every
6 dB is about one bit. It equals -20 log10(relative Frobenius error). NaN in the output makes
every metric NaN, which fails any threshold.
"""

from __future__ import annotations

import math

import torch

METRICS = ("max_abs", "rel_fro", "cosine", "sqnr_db")


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """max abs error, relative Frobenius error, cosine similarity and SQNR (dB), in float64."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {tuple(out.shape)} vs {tuple(ref.shape)}")
    o = out.detach().double().cpu().flatten()
    r = ref.detach().double().cpu().flatten()
    if not bool(torch.isfinite(o).all()):
        nan = float("nan")
        return {"max_abs": nan, "rel_fro": nan, "cosine": nan, "sqnr_db": nan}
    err = o - r
    noise = float(err.pow(2).sum())
    signal = float(r.pow(2).sum())
    norm = math.sqrt(signal * float(o.pow(2).sum()))
    return {
        "max_abs": float(err.abs().max()) if err.numel() else 0.0,
        "rel_fro": math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf),
        "cosine": float(o @ r) / norm if norm > 0 else float(noise == 0),
        "sqnr_db": _db(signal, noise),
    }


def sqnr_db(out: torch.Tensor, ref: torch.Tensor) -> float:
    """SQNR of `out` against `ref` in dB (inf when equal)."""
    return error_metrics(out, ref)["sqnr_db"]


def _db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)
