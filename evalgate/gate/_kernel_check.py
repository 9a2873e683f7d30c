"""Run the numerics check of the kernels a candidate relies on, before any server starts.

A kernel check costs seconds where an eval costs GPU hours, so a broken FP8 scale or INT4
packing blocks the rollout first. Without the ``[kernels]`` extra the check is skipped, and
the manifest and report say so. This module picks the kernels and reads the result; the check
itself is ``evalgate.kernels.check``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from evalgate.kernels import kernels_for_variant
from evalgate.variants import Variant

__all__ = ["KERNELS_EXTRA", "installed", "kernel_check_for", "kernel_failures"]

KERNELS_EXTRA = (
    "the [kernels] extra brings torch and triton: pip install 'evalgate[kernels]' "
    "(in a checkout: pip install -e '.[kernels]')"
)
"""How to get what the check needs, as a skipped check's note says it."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (triton must not be
    imported before the check chooses its interpreter mode)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def kernel_check_for(candidate: Variant, *, skip: bool = False) -> dict[str, Any] | None:
    """The check's report for the candidate's kernels (``None`` when it uses none)."""
    names = kernels_for_variant(kv_fp8=candidate.kv == "fp8", weight_int4=candidate.weights == "int4")
    if not names:
        return None
    if skip:
        return {"kernels": names, "skipped": "--skip-kernel-check"}
    missing = [m for m in ("torch", "triton", "numpy") if not installed(m)]
    if missing:
        return {
            "kernels": names,
            "skipped": f"{', '.join(missing)} not installed; {KERNELS_EXTRA}",
        }
    from evalgate.kernels.check import run_check

    return dict(run_check(kernels=names).to_dict())


def kernel_failures(check: dict[str, Any] | None) -> list[str]:
    """Names of the rows that missed their threshold (empty when passed or skipped)."""
    if not isinstance(check, dict) or check.get("skipped") or check.get("passed", True):
        return []
    return [f"{r['name']} ({r['impl']})" for r in check.get("rows", []) if not r.get("passed", True)]
