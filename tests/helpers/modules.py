"""Loading a script or benchmark file (not a package module) as a module, for the tests that call
its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_file"]


def load_file(name: str, path: Path, *, register: bool = False) -> ModuleType:
    """``path`` executed as module ``name``; ``register`` puts it in ``sys.modules`` first, where
    its dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
