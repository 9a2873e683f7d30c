"""What a GPU checkpoint folder says about itself: pre-quantized or not, and how.

SGLang and vLLM both read the quantization method from a checkpoint's config.json and refuse a
``--quantization`` that disagrees with it, so evalgate reads the same file to choose flags and to
refuse a variant whose checkpoint is not what its name says, before any GPU time is spent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["INT4_METHODS", "checkpoint_quantization", "is_int4", "weight_bits"]

INT4_METHODS = ("compressed-tensors", "awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round")
"""quant_method values that can hold 4-bit weights (the declared bits decide)."""


def checkpoint_quantization(model: str) -> dict[str, Any] | None:
    """``quantization_config`` of a local checkpoint's config.json; None for none or not local."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {config}: {exc}", fix="check the checkpoint folder") from exc
    quant = data.get("quantization_config")
    return dict(quant) if isinstance(quant, dict) else None


def weight_bits(quant: dict[str, Any]) -> set[int]:
    """Weight bit widths a quantization_config declares (AWQ/GPTQ ``bits``, compressed-tensors groups)."""
    bits = {int(quant[k]) for k in ("bits", "w_bit") if isinstance(quant.get(k), int)}
    for group in (quant.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if isinstance(weights.get("num_bits"), int):
            bits.add(int(weights["num_bits"]))
    return bits


def is_int4(quant: dict[str, Any]) -> bool:
    """An INT4 method whose declared weight bits include 4 (none declared: the method decides)."""
    bits = weight_bits(quant)
    return str(quant.get("quant_method", "")) in INT4_METHODS and (not bits or 4 in bits)
