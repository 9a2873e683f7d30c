"""Write a copy of a Hugging Face checkpoint that carries calibrated FP8 KV scales as vLLM 0.32 reads them.

vLLM has no scale file (0.32 has neither ``--quantization-param-path`` nor ``--calculate-kv-scales``):
per-layer ``k_scale``/``v_scale`` come from checkpoint tensors, and only when config.json names a
quantization method whose attention method loads them. A checkpoint without one has its scales
reset to 1.0 after loading (vllm/model_executor/layers/attention/attention.py:589-601). So the copy
declares compressed-tensors with a ``kv_cache_scheme`` and no ``config_groups`` (what llm-compressor
writes for KV-only FP8): every linear stays unquantized (compressed_tensors.py:172) and each attention
layer gets CompressedTensorsKVCacheMethod (compressed_tensors.py:214, 1144-1176),
which loads ``model.layers.N.self_attn.k_scale`` (renamed ``...self_attn.attn.k_scale`` by
quantization/base_config.py:246). The scale divides on the way into the cache (stored = x / scale:
v1/attention/ops/triton_reshape_and_cache_flash.py:112; the CPU kernel's C++ is not in the wheel), so
it is the ``amax x margin / 448`` that KVScales computes.

K and V get separate scales (``KVScales.k_scale()``/``v_scale()``): vLLM quantizes K with k_scale and
V with v_scale (v1/attention/backends/cpu_attn.py:484-485), so V, whose amax is usually far below
K's after RoPE, keeps its own resolution; SGLang's file needs the larger of the two.

The unchanged files are symlinked; config.json is rewritten, the scales go into one extra float32
shard, and model.safetensors.index.json lists every tensor (vLLM loads only the shards an index
names: model_loader/weight_utils.py:585-611). ``evalgate-kv-scales.json`` records what was written.
Needs no torch: the shard is written by the safetensors layout (u64 header size, JSON header, data).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

SCALE_SHARD = "kv_scales.safetensors"
INDEX = "model.safetensors.index.json"
RECORD = "evalgate-kv-scales.json"
KV_CACHE_SCHEME = {"type": "float", "num_bits": 8, "strategy": "tensor", "symmetric": True, "dynamic": False}
QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "dense",
    "config_groups": {},
    "ignore": [],
    "kv_cache_scheme": KV_CACHE_SCHEME,
}


class Scales(Protocol):
    """What the writer needs of ``evalgate.kernels.fp8_kv.KVScales``."""

    margin: float

    @property
    def num_layers(self) -> int: ...

    def k_scale(self) -> dict[int, float]: ...

    def v_scale(self) -> dict[int, float]: ...


def scale_names(layer: int) -> tuple[str, str]:
    """The checkpoint names vLLM maps onto layer ``layer``'s attention k_scale and v_scale."""
    return f"model.layers.{layer}.self_attn.k_scale", f"model.layers.{layer}.self_attn.v_scale"


def scale_tensors(scales: Scales) -> dict[str, float]:
    """{tensor name: scale} for every layer, K and V apart."""
    k, v = scales.k_scale(), scales.v_scale()
    out: dict[str, float] = {}
    for layer in range(scales.num_layers):
        k_name, v_name = scale_names(layer)
        out[k_name], out[v_name] = k[layer], v[layer]
    return out


def write_scalar_safetensors(tensors: Mapping[str, float], path: Path) -> Path:
    """One float32 tensor of shape [1] per name (the shape compressed-tensors' k_scale has)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    for i, name in enumerate(tensors):
        header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    data = b"".join(struct.pack("<f", float(v)) for v in tensors.values())
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def safetensors_header(path: Path) -> dict[str, Any]:
    """A safetensors file's header: {name: {dtype, shape, data_offsets}} (and ``__metadata__``)."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


def _weight_map(src: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The source's tensor -> shard map and index metadata, from its index or its one shard."""
    if (src / INDEX).is_file():
        index = json.loads((src / INDEX).read_text())
        return dict(index["weight_map"]), dict(index.get("metadata") or {})
    shards = sorted(p.name for p in src.glob("*.safetensors"))
    if len(shards) != 1:
        raise ValueError(f"{src}: expected one *.safetensors or an {INDEX}, found {shards}")
    header = safetensors_header(src / shards[0])
    names = [n for n in header if n != "__metadata__"]
    size = sum(header[n]["data_offsets"][1] - header[n]["data_offsets"][0] for n in names)
    return {n: shards[0] for n in names}, {"total_size": size}


def preflight(src: Path, out: Path) -> dict[str, Any]:
    """Refuse early what the writer would refuse late; returns the source's config.json."""
    config: dict[str, Any] = json.loads((src / "config.json").read_text())
    if config.get("quantization_config"):
        raise ValueError(f"{src} already has a quantization_config: add KV scales to a plain checkpoint")
    if taken := [name for name in (SCALE_SHARD, RECORD) if (src / name).exists()]:
        raise ValueError(f"{src} already has {taken[0]}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty folder")
    return config


def write_vllm_checkpoint(src: Path, out: Path, scales: Scales) -> dict[str, float]:
    """Write ``out``: ``src`` plus the scales as vLLM 0.32 loads them; returns {tensor name: scale}."""
    config = preflight(src, out)
    if int(config["num_hidden_layers"]) != scales.num_layers:
        raise ValueError(f"{scales.num_layers} layers of scales for {config['num_hidden_layers']} layers")
    weight_map, metadata = _weight_map(src)
    tensors = scale_tensors(scales)
    if clash := sorted(set(tensors) & set(weight_map)):
        raise ValueError(f"{src} already holds {clash[0]}")
    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(src.iterdir()):
        if item.name not in ("config.json", INDEX):
            os.symlink(item.resolve(), out / item.name)
    config["quantization_config"] = QUANTIZATION_CONFIG
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_scalar_safetensors(tensors, out / SCALE_SHARD)
    weight_map.update(dict.fromkeys(tensors, SCALE_SHARD))
    metadata["total_size"] = int(metadata.get("total_size", 0)) + 4 * len(tensors)
    (out / INDEX).write_text(json.dumps({"metadata": metadata, "weight_map": weight_map}, indent=2) + "\n")
    record = {"source": str(src.resolve()), "margin": scales.margin, "convention": "stored = x / scale",
              "k_scale": scales.k_scale(), "v_scale": scales.v_scale()}  # fmt: skip
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return tensors
