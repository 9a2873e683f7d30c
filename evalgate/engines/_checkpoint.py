"""What a GPU checkpoint folder says about itself: pre-quantized or not, and how."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError

__all__ = ["checkpoint_quantization"]


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
