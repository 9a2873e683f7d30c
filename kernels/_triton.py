"""Load the Triton kernel modules in the right mode (compiled on a GPU, interpreted on CPU).

Triton decides between compiling and interpreting when `import triton` runs and when a kernel is
decorated. So the kernel modules are imported lazily, after `TRITON_INTERPRET=1` is set for
processes without a CUDA device. A user's explicit `TRITON_INTERPRET` always wins.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import torch

_MODULES = {
    "fp8": "evalgate.kernels.fp8_kv._triton_kernels",
    "int4": "evalgate.kernels.int4._triton_kernels",
}


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def use_interpreter_if_no_gpu(*, force: bool = False) -> None:
    """Set TRITON_INTERPRET=1 when there is no CUDA device (or `force`), unless the user chose.

    Triton reads the variable when `import triton` runs (its own `tl` helpers are decorated then),
    so setting it after triton was imported in compiled mode cannot work: that raises instead.
    """
    if "TRITON_INTERPRET" in os.environ or not (force or not torch.cuda.is_available()):
        return
    if "triton" in sys.modules:
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set, so its kernels cannot run on CPU "
            "in this process; set TRITON_INTERPRET=1 in the environment (or before importing triton)"
        )
    os.environ["TRITON_INTERPRET"] = "1"


def triton_module(name: str) -> ModuleType:
    """Import one of our Triton kernel modules, choosing the interpreter when there is no GPU."""
    use_interpreter_if_no_gpu()
    return importlib.import_module(_MODULES[name])


def check_device(*tensors: torch.Tensor) -> None:
    """Refuse CPU tensors for compiled kernels with a message that names the fix."""
    if interpreting():
        return
    for t in tensors:
        if t.device.type != "cuda":
            raise RuntimeError(
                "Triton kernels were compiled for a GPU but got a CPU tensor; move the tensors to "
                "cuda, or set TRITON_INTERPRET=1 before the first kernel call to run on CPU"
            )
