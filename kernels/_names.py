"""Kernel names and the variant -> kernels mapping.

Kept free of torch so that evalgate core can ask which numerics checks a candidate variant
needs without installing the `kernels` extra.
"""

from __future__ import annotations

import difflib

FP8_KV = "fp8_kv"
INT4 = "int4"
KERNEL_NAMES: tuple[str, ...] = (FP8_KV, INT4)

FAULTS: dict[str, str] = {
    "fp8_scale_x4": "FP8 dequantization uses 4x the scale the cache was written with (a stale or mis-exported k/v scale)",
    "fp8_scale_div4": "FP8 scale 4x too small, so large values saturate at +-448 (calibration missed the outliers)",
    "int4_scale_x4": "INT4 group scales multiplied by 4 after packing (a mis-converted checkpoint)",
}
"""Known bugs that `run_check(fault=...)` injects to prove the check fails on them."""


def kernels_for_variant(kv_fp8: bool, weight_int4: bool) -> list[str]:
    """Names of the kernel checks that cover a candidate's cheaper numerics.

    An `fp8kv` candidate needs `fp8_kv`, an `int4` candidate needs `int4`, `int4+fp8kv` needs both.
    """
    names: list[str] = []
    if kv_fp8:
        names.append(FP8_KV)
    if weight_int4:
        names.append(INT4)
    return names


def validate_kernel_names(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Return `names` in canonical order, or raise ValueError naming the nearest valid name."""
    out: list[str] = []
    for name in names:
        if name not in KERNEL_NAMES:
            near = difflib.get_close_matches(name, KERNEL_NAMES, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"unknown kernel {name!r}{hint}; choose from {', '.join(KERNEL_NAMES)}")
        if name not in out:
            out.append(name)
    return tuple(n for n in KERNEL_NAMES if n in out)
