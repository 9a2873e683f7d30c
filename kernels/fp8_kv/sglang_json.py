"""The KV-cache scale file that SGLang and vLLM read via `--quantization-param-path`.

Shape (verified against SGLang's `QuantParamSchema`/`KVCacheQuantSchema` and
`kv_cache_scales_loader` in python/sglang/srt/model_loader/weight_utils.py, adapted there from
vLLM's vllm/model_executor/layers/quantization/schema.py):

    {"model_type": "llama",
     "kv_cache": {"dtype": "float8_e4m3fn",
                  "scaling_factor": {"0": {"0": 0.0123, "1": 0.0171, ...}}}}   # tp rank -> layer -> scale

One float per layer and TP rank, used for both K and V: SGLang's `load_kv_cache_scales`
(python/sglang/srt/models/llama.py) sets `attn.k_scale = attn.v_scale = scaling_factor`, and the
cache holds fp8(x / scale). The schema requires every rank 0..tp_size-1 and every layer
0..num_hidden_layers-1. SGLang's loader logs and silently falls back to scale 1.0 when the file does
not validate, so `load_sglang_kv_scales` is strict and raises instead. No torch needed here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FP8_DTYPE = "float8_e4m3fn"


def sglang_kv_scales_dict(
    rank_scales: Mapping[int, Mapping[int, float]], *, model_type: str | None
) -> dict[str, Any]:
    """Build the JSON object from {tp_rank: {layer: scale}} (keys become strings, as JSON needs)."""
    _validate_scales({str(r): {str(k): v for k, v in m.items()} for r, m in rank_scales.items()})
    return {
        "model_type": model_type,
        "kv_cache": {
            "dtype": FP8_DTYPE,
            "scaling_factor": {
                str(rank): {str(layer): float(s) for layer, s in sorted(layers.items())}
                for rank, layers in sorted(rank_scales.items())
            },
        },
    }


def write_sglang_kv_scales_json(obj: Mapping[str, Any], path: str | Path) -> Path:
    """Write the object built by `sglang_kv_scales_dict` to `path` (parents created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    return out


def load_sglang_kv_scales(
    path: str | Path,
    *,
    tp_rank: int = 0,
    num_layers: int | None = None,
    model_type: str | None = None,
) -> dict[int, float]:
    """Parse and validate a scale file like SGLang's loader does; return {layer: scale} of `tp_rank`.

    Raises ValueError naming the problem where SGLang would quietly use 1.0.
    """
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(obj, dict) or "kv_cache" not in obj or "model_type" not in obj:
        raise ValueError(f"{path}: expected keys 'model_type' and 'kv_cache'")
    if model_type is not None and obj["model_type"] != model_type:
        raise ValueError(f"{path}: scales are for model_type {obj['model_type']!r}, not {model_type!r}")
    kv = obj["kv_cache"]
    if not isinstance(kv, dict) or kv.get("dtype") != FP8_DTYPE:
        raise ValueError(f"{path}: kv_cache.dtype must be {FP8_DTYPE!r}")
    ranks = _validate_scales(kv.get("scaling_factor"), num_layers=num_layers, where=str(path))
    if tp_rank not in ranks:
        raise ValueError(f"{path}: no scales for tp rank {tp_rank}")
    return ranks[tp_rank]


def _validate_scales(
    raw: Any, *, num_layers: int | None = None, where: str = "scaling_factor"
) -> dict[int, dict[int, float]]:
    """Check the tp rank -> layer -> positive finite float mapping; return it with int keys."""
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{where}: scaling_factor must be a non-empty object")
    ranks: dict[int, dict[int, float]] = {}
    for rank_key, layers in raw.items():
        rank = _int_key(rank_key, where, "tp rank")
        if not isinstance(layers, dict):
            raise ValueError(f"{where}: tp rank {rank} must map layers to scales")
        parsed: dict[int, float] = {}
        for layer_key, value in layers.items():
            layer = _int_key(layer_key, where, "layer")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}: scale of layer {layer} is not a number")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{where}: scale of layer {layer} must be positive and finite, got {value}")
            parsed[layer] = float(value)
        expected = set(range(num_layers if num_layers is not None else len(parsed)))
        if set(parsed) != expected:
            raise ValueError(
                f"{where}: tp rank {rank} needs layers 0..{len(expected) - 1}, got {sorted(parsed)}"
            )
        ranks[rank] = parsed
    if set(ranks) != set(range(len(ranks))):
        raise ValueError(f"{where}: tp ranks must be 0..{len(ranks) - 1}, got {sorted(ranks)}")
    return ranks


def _int_key(key: Any, where: str, what: str) -> int:
    try:
        value = int(key)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {what} key {key!r} is not an integer") from None
    if value < 0 or str(value) != str(key).strip():
        raise ValueError(f"{where}: {what} key {key!r} is not a non-negative integer")
    return value
