"""Calibrate per-layer FP8 KV scales from sample activations and export them for SGLang/vLLM.

The calibrator keeps a running amax per layer and KV head for K and V. The exported scale of a
layer is amax / 448 (times a safety margin), the largest of K and V because SGLang applies one
scale to both, and it is taken over the KV heads a tensor-parallel rank owns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from evalgate.kernels.fp8_kv.e4m3 import E4M3_MAX
from evalgate.kernels.fp8_kv.sglang_json import sglang_kv_scales_dict, write_sglang_kv_scales_json


@dataclass(frozen=True)
class KVScales:
    """Calibrated amax per layer and KV head; scales are derived, never stored twice."""

    k_amax: tuple[tuple[float, ...], ...]
    """[layer][kv_head] largest finite |K| seen."""
    v_amax: tuple[tuple[float, ...], ...]
    """[layer][kv_head] largest finite |V| seen."""
    margin: float = 1.0
    """Multiplier on amax; > 1 leaves headroom for values larger than any calibration sample."""

    @property
    def num_layers(self) -> int:
        return len(self.k_amax)

    def k_scale(self) -> dict[int, float]:
        """Per-layer per-tensor K scale: amax * margin / 448."""
        return {i: _scale(max(h), self.margin) for i, h in enumerate(self.k_amax)}

    def v_scale(self) -> dict[int, float]:
        """Per-layer per-tensor V scale: amax * margin / 448."""
        return {i: _scale(max(h), self.margin) for i, h in enumerate(self.v_amax)}

    def rank_scales(self, tp_size: int = 1) -> dict[int, dict[int, float]]:
        """{tp_rank: {layer: scale}} with one scale for K and V over the rank's KV heads."""
        heads = len(self.k_amax[0])
        out: dict[int, dict[int, float]] = {}
        for rank in range(tp_size):
            owned = _heads_of_rank(rank, tp_size, heads)
            out[rank] = {
                layer: _scale(
                    max(max(self.k_amax[layer][h], self.v_amax[layer][h]) for h in owned), self.margin
                )
                for layer in range(self.num_layers)
            }
        return out


def _scale(amax: float, margin: float) -> float:
    return max(amax * margin / E4M3_MAX, 2.0**-126)


def _heads_of_rank(rank: int, tp_size: int, heads: int) -> range:
    """KV heads held by a TP rank: a contiguous slice, or one replicated head when tp > heads."""
    if tp_size <= heads:
        if heads % tp_size:
            raise ValueError(f"{heads} KV heads do not split over tp_size {tp_size}")
        per = heads // tp_size
        return range(rank * per, (rank + 1) * per)
    if tp_size % heads:
        raise ValueError(f"tp_size {tp_size} is not a multiple of {heads} KV heads")
    head = rank // (tp_size // heads)
    return range(head, head + 1)


class KVScaleCalibrator:
    """Running amax of K and V per layer and KV head over calibration batches."""

    def __init__(self, num_layers: int, num_kv_heads: int) -> None:
        self._k = torch.zeros(num_layers, num_kv_heads, dtype=torch.float64)
        self._v = torch.zeros(num_layers, num_kv_heads, dtype=torch.float64)
        self._seen = [False] * num_layers

    def observe(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Fold in one batch of K and V, shaped [..., kv_heads, head_dim]; inf and NaN are ignored."""
        for store, x in ((self._k, k), (self._v, v)):
            if x.dim() < 2 or x.shape[-2] != store.shape[1]:
                raise ValueError(f"expected [..., {store.shape[1]}, head_dim], got {tuple(x.shape)}")
            a = x.detach().double().abs()
            a = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype, device=a.device))
            amax = a.transpose(-2, 0).reshape(store.shape[1], -1).amax(dim=1).cpu()
            store[layer] = torch.maximum(store[layer], amax)
        self._seen[layer] = True

    def scales(self, *, margin: float = 1.0) -> KVScales:
        """Freeze the calibration; every layer must have been observed (SGLang needs all layers)."""
        missing = [i for i, seen in enumerate(self._seen) if not seen]
        if missing:
            raise ValueError(f"no calibration samples for layers {missing}")
        if margin < 1.0:
            raise ValueError("margin below 1 would saturate calibration values")
        return KVScales(
            k_amax=tuple(tuple(r) for r in self._k.tolist()),
            v_amax=tuple(tuple(r) for r in self._v.tolist()),
            margin=margin,
        )


def export_sglang_kv_scales(
    scales: KVScales, path: str | Path, *, model_type: str | None, tp_size: int = 1
) -> Path:
    """Write `scales` as the JSON that `--quantization-param-path` expects; returns the path."""
    obj = sglang_kv_scales_dict(scales.rank_scales(tp_size), model_type=model_type)
    return write_sglang_kv_scales_json(obj, path)
