"""FP8-KV and INT4-weight kernels (PyTorch reference plus Triton) and their numerics check.

`kernels_for_variant` and `KERNEL_NAMES` need no torch. Everything else imports torch, lazily, on
first attribute access, so `import evalgate.kernels` stays cheap and safe without the `kernels` extra.
"""

from __future__ import annotations

import importlib
from typing import Any

from evalgate.kernels._names import FAULTS, KERNEL_NAMES, kernels_for_variant

_LAZY = {
    "fp8_kv": "evalgate.kernels.fp8_kv",
    "int4": "evalgate.kernels.int4",
    "check": "evalgate.kernels.check",
    "CheckReport": "evalgate.kernels.check",
    "CheckRow": "evalgate.kernels.check",
    "RoundingRow": "evalgate.kernels.check",
    "TimingRow": "evalgate.kernels.check",
    "run_check": "evalgate.kernels.check",
    "format_table": "evalgate.kernels.check",
}

__all__ = [
    "FAULTS",
    "KERNEL_NAMES",
    "CheckReport",
    "CheckRow",
    "RoundingRow",
    "TimingRow",
    "check",
    "format_table",
    "fp8_kv",
    "int4",
    "kernels_for_variant",
    "run_check",
]


def __getattr__(name: str) -> Any:
    """Resolve torch-dependent names on first use (PEP 562)."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(target)
    return module if name in ("fp8_kv", "int4", "check") else getattr(module, name)
