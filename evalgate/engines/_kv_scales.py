"""FP8 KV scales on the GPU engines: the scale file checked before launch, and the scale the
server really used read back from its log afterwards.

Why both: SGLang 0.5.23 never refuses a bad scale file. ``kv_cache_scales_loader``
(``sglang/srt/model_loader/weight_utils.py``) logs an error and "Defaulting to KV cache scaling
factors = 1.0" for a missing, malformed or mismatched file, and then ``load_kv_cache_scales``
(``model_executor/model_runner_components/load_model_utils.py``) still logs "Loaded KV cache
scaling factors from <path>". Without a file it warns "Using FP8 KV cache but no scaling factors
provided. Defaulting to scaling factors of 1.0." So the file is validated here with SGLang's own
schema rules (one scale per layer and TP rank, dtype float8_e4m3fn, the checkpoint's model_type),
and the log is read for the fallback, which wins over the "Loaded" line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.kernels.fp8_kv.sglang_json import load_sglang_kv_scales

__all__ = ["kv_scales_used", "validate_kv_scales"]

_FIX = (
    "write the file with evalgate.kernels.fp8_kv (KVScaleCalibrator + export_sglang_kv_scales) for this "
    "checkpoint and tp size, or drop kv_scales_path to run FP8 KV at scale 1.0 (recorded as such)"
)


def validate_kv_scales(path: str, *, model: str, tp_size: int) -> dict[str, Any]:
    """Refuse (exit 2) a scale file SGLang would quietly replace by 1.0; returns what is recorded.

    The layer count and model_type come from the checkpoint's config.json when it is a local
    folder (a Hub id is checked for shape only)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"the KV scales file {path} does not exist", fix=_FIX)
    config = Path(model) / "config.json"
    layers: int | None = None
    model_type: str | None = None
    if config.is_file():
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {config}: {exc}", fix="check the checkpoint folder") from exc
        text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
        layers = text.get("num_hidden_layers") if isinstance(text.get("num_hidden_layers"), int) else None
        model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    try:
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from exc
        ranks = (raw.get("kv_cache") or {}).get("scaling_factor") if isinstance(raw, dict) else None
        if isinstance(ranks, dict) and len(ranks) != tp_size:
            raise ValueError(f"{path}: scales for {len(ranks)} TP rank(s), but tp_size is {tp_size}")
        per_rank = [
            load_sglang_kv_scales(file, tp_rank=r, num_layers=layers, model_type=model_type)
            for r in range(tp_size)
        ]
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"SGLang would ignore the KV scales file and use scale 1.0 on every layer: {exc}", fix=_FIX
        ) from exc
    values = [v for scales in per_rank for v in scales.values()]
    return {
        "file": str(file.resolve()),
        "layers": len(per_rank[0]),
        "min": min(values),
        "max": max(values),
    }


_FALLBACK = re.compile(
    r"Defaulting to KV cache scaling factors = 1\.0|no scaling factors provided\. Defaulting to scaling "
    r"factors of 1\.0|Using KV cache scaling factor 1\.0"
)
_LOADED = re.compile(r"Loaded KV cache scaling factors from (\S+)")


def kv_scales_used(log: str, *, file: str | None) -> dict[str, Any]:
    """What the server's log says it used for an FP8 KV cache: ``{"scale": "file" | "1.0" |
    "unknown", "file", "log"}`` (the line it said it in). Any fallback line means 1.0 on at least
    one layer or rank, whatever else the log says."""
    fallback = _FALLBACK.search(log)
    loaded = _LOADED.search(log)
    if fallback:
        scale, line = "1.0", fallback.group(0)
    elif loaded:
        scale, line = "file", loaded.group(0)
    else:
        scale, line = "unknown", ""
    return {"scale": scale, "file": file, "log": line}
