"""evalgate: prove that a quantized inference server answers like its baseline, or block the rollout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalgate.report.frames import RunFrames

__all__ = ["__version__", "load_run"]
__version__ = "0.1.0"


def load_run(path: Any) -> RunFrames:
    """A run folder as pandas DataFrames: ``.items()``, ``.pairs()``, ``.verdict()`` (evalgate.report.frames)."""
    from evalgate.report.frames import load_run as _load  # lazy: ``import evalgate`` stays light

    return _load(path)
