"""FP8 KV scales on vLLM: the calibrated checkpoint copy an ``fp8kv`` arm serves, and what the
server says it used.

vLLM takes no scale file (0.32 to 0.34 have neither ``--quantization-param-path`` nor
``--calculate-kv-scales``). Per-layer ``k_scale``/``v_scale`` are checkpoint tensors, loaded only
when config.json names a quantization method whose attention method reads them: for a BF16
checkpoint, compressed-tensors with a ``kv_cache_scheme`` and no ``config_groups``
(``model_executor/layers/quantization/compressed_tensors/compressed_tensors.py``). A checkpoint
without a method runs every layer at 1.0 and logs nothing about it: attention resets its scales
(``model_executor/layers/attention/attention.py``, ``process_weights_after_loading``), and the
"Using KV cache scaling factor 1.0" warning belongs to a quantized checkpoint's method only
(``quantization/kv_cache.py``). So ``[vllm] kv_scales_path`` names a copy of the model written by
``scripts/kv_scales.py --vllm-checkpoint`` (the same weights, symlinked, plus the scales), and the
scale used is read back from what the server states, the ``quantization=`` of its engine-config
line, together with the scale tensors in the folder it loaded.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

from evalgate.engines import _kv_scales
from evalgate.errors import ConfigError

__all__ = ["RECORD", "kv_scales_used", "read_kv_scales", "validate_kv_checkpoint"]

RECORD = "evalgate-kv-scales.json"
"""What ``scripts/kv_scales.py --vllm-checkpoint`` records beside the scales: the source checkpoint."""
WRITE_FIX = "write the copy with `python scripts/kv_scales.py MODEL --vllm-checkpoint DIR` (docs/engines.md)"

_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: .*?\bquantization=([\w.-]+),")
_NAME = re.compile(r"layers\.(\d+)\.self_attn\.(?:([kv])_scale|([kv])_proj\.output_scale)$")
_FORMATS = {"F32": "<f", "F16": "<e", "F64": "<d"}


def read_kv_scales(model: Path) -> dict[str, dict[int, float]]:
    """``{"k": {layer: scale}, "v": {...}}`` from a local checkpoint's safetensors (compressed-tensors'
    ``self_attn.k_scale`` or ModelOpt/FP8's ``k_proj.output_scale``); empty dicts when it has none."""
    found: dict[str, dict[int, float]] = {"k": {}, "v": {}}
    for shard in sorted(model.glob("*.safetensors")):
        with shard.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header: dict[str, Any] = json.loads(f.read(size))
            for name, meta in header.items():
                m = _NAME.search(name) if name != "__metadata__" else None
                if not m:
                    continue
                start, end = meta["data_offsets"]
                f.seek(8 + size + start)
                found[m.group(2) or m.group(3)][int(m.group(1))] = _scalar(f.read(end - start), meta["dtype"])
    return found


def _scalar(raw: bytes, dtype: str) -> float:
    """The first element of a little-endian safetensors tensor."""
    if dtype == "BF16":  # the top half of a float32
        return float(struct.unpack("<f", b"\x00\x00" + raw[:2])[0])
    if dtype not in _FORMATS:
        raise ConfigError(f"a KV scale stored as {dtype}", fix=WRITE_FIX)
    fmt = _FORMATS[dtype]
    return float(struct.unpack(fmt, raw[: struct.calcsize(fmt)])[0])


def _range(values: dict[int, float]) -> list[float]:
    return [min(values.values()), max(values.values())] if values else []


def validate_kv_checkpoint(path: str, *, model: str) -> dict[str, Any]:
    """Check ``path`` before launch: a compressed-tensors ``kv_cache_scheme``, a K and a V scale on
    every layer, and weights that are ``model``'s (the copy's record names its source); returns
    what the dry run and the manifest show."""
    folder = Path(path).expanduser()
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"[vllm] kv_scales_path {path}: no config.json there", fix=WRITE_FIX)
    config = json.loads(config_file.read_text())
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") != "compressed-tensors" or not isinstance(
        quant.get("kv_cache_scheme"), dict
    ):
        raise ConfigError(
            f"[vllm] kv_scales_path {path}: config.json declares no compressed-tensors kv_cache_scheme, so "
            "vLLM would not load its scales and would run every layer at 1.0",
            fix=WRITE_FIX,
        )
    if quant.get("config_groups"):
        raise ConfigError(
            f"[vllm] kv_scales_path {path} also quantizes weights (config_groups): the fp8kv arm must serve "
            "the baseline's weights",
            fix=WRITE_FIX,
        )
    layers = int(config.get("num_hidden_layers") or 0)
    scales = read_kv_scales(folder)
    missing = [f"{kv}_scale of layer {i}" for kv in "kv" for i in range(layers) if i not in scales[kv]]
    if missing or not layers:
        raise ConfigError(
            f"[vllm] kv_scales_path {path}: {len(missing)} scale(s) missing, first {missing[:1]}",
            fix=WRITE_FIX,
        )
    record_file = folder / RECORD
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    source = record.get("source")
    local = Path(model).expanduser()
    if not source or (local.exists() and Path(source).resolve() != local.resolve()):
        raise ConfigError(
            f"[vllm] kv_scales_path {path} was calibrated on {source or 'an unknown checkpoint'}, and this "
            f"arm serves {model}: its weights would not be the baseline's",
            fix=f"calibrate {model}: `python scripts/kv_scales.py {model} --vllm-checkpoint DIR`",
        )
    return {
        "path": str(folder),
        "source": source,
        "layers": layers,
        "k_scale": _range(scales["k"]),
        "v_scale": _range(scales["v"]),
        "margin": record.get("margin"),
    }


def kv_scales_used(log: str, *, model: str) -> dict[str, Any]:
    """What an FP8 KV arm used, from its log and the folder it loaded: ``{"scale": "checkpoint" |
    "1.0" | "unknown", "quantization", "k_scale", "v_scale", "file", "log"}``.

    ``quantization=None`` on the engine's config line means no method, so 1.0 on every layer. A
    method with no scale tensors in the folder also means 1.0 (compressed-tensors' scales start at
    1.0; an FP8 method says so in the fallback warning). "unknown" is a Hub id or a log without
    the config line."""
    engine = _ENGINE.search(log)
    quantization = engine.group(1) if engine else None
    folder = Path(model).expanduser()
    scales = read_kv_scales(folder) if folder.is_dir() else {"k": {}, "v": {}}
    out: dict[str, Any] = {
        "quantization": quantization,
        "k_scale": _range(scales["k"]),
        "v_scale": _range(scales["v"]),
        "file": str(folder / RECORD) if (folder / RECORD).is_file() else None,
    }
    said = _kv_scales.kv_scales_used(
        log, file=None
    )  # the engines' fallback lines, 0.33's and 0.34's among them
    if said["scale"] == "1.0":
        return {**out, "scale": "1.0", "log": said["log"]}
    if quantization is None:
        return {**out, "scale": "unknown", "log": ""}
    line = f"quantization={quantization}"
    if quantization == "None":
        return {**out, "scale": "1.0", "log": line}
    if not folder.is_dir():
        return {**out, "scale": "unknown", "log": line}
    return {**out, "scale": "checkpoint" if scales["k"] and scales["v"] else "1.0", "log": line}
