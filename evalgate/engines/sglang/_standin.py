"""The ``sgl_kernel`` stand-in that ``evalgate setup --sglang-cpu`` writes into SGLang's CPU venv.

It is exactly this: a package named ``sgl_kernel`` that defines the names SGLang 0.5.23 imports
from it at startup on the CPU path (``SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend
torch_native``), each a placeholder that raises ``NotImplementedError`` naming itself if it is
ever called. It is not sglang-kernel and computes nothing. PyPI has no CPU build of the real
package; on this path SGLang runs the model on its own PyTorch code and calls none of these
(tests/e2e/test_e2e_sglang_cpu.py serves real requests with it). It registers no
``torch.ops.sgl_kernel`` operator, so SGLang's AMX probe (``hasattr(torch.ops.sgl_kernel,
"convert_weight_packed")``, ``sglang/srt/utils/common.py``) finds none and takes no AMX path.
It has no dist-info either: ``pip list`` shows no sglang-kernel.

``NAMES`` lists, per module, the names SGLang imports there: found by starting the server with
an empty stand-in and adding each name an ImportError named, until it served. All eight are
imported at module level under ``if _is_cpu`` and called only by speculative decoding and its KV
moves, which evalgate never enables.
"""

from __future__ import annotations

from evalgate.engines.sglang._diagnose import TESTED_VERSION

__all__ = ["NAMES", "standin_files"]

NAMES: dict[str, tuple[str, ...]] = {
    "sgl_kernel": (
        "assign_req_to_token_pool_cpu",  # srt/mem_cache/allocation.py: speculative decoding only
        "copy_all_layer_kv_cache_cpu",  # kernels/ops/kvcache/cache_move.py: move_kv_cache (speculative)
        # kernels/ops/speculative/ (spec_tree.py, cache_locs.py, eagle.py): speculative decoding
        "build_tree_kernel_efficient_cpu",
        "verify_tree_greedy_cpu",
        "assign_draft_cache_locs_contiguous_cpu",
        "assign_extend_cache_locs_cpu",
        "fill_accept_out_cache_loc_cpu",
        "fill_bonus_tokens_cpu",
    ),
}

_DOC = '''"""A stand-in for sgl_kernel, written by `evalgate setup --sglang-cpu` for SGLang {version} on
the CPU (evalgate/engines/sglang/_standin.py). NOT sglang-kernel: every name below is a placeholder
that raises NotImplementedError if called. SGLang imports these names at startup on the CPU path
and calls none of them there."""
'''

_BASE = '''

class KernelUnavailable(NotImplementedError):
    """A kernel of the real sgl_kernel was called; this stand-in has none."""


def _placeholder(qualname: str):
    def kernel(*args, **kwargs):
        raise KernelUnavailable(
            f"{qualname} was called, but this sgl_kernel is evalgate's import-only stand-in "
            "(no kernels): SGLang took a path that needs the real sglang-kernel package"
        )

    kernel.__name__ = kernel.__qualname__ = qualname.rsplit(".", 1)[-1]
    return kernel
'''


def standin_files() -> dict[str, str]:
    """Relative path under site-packages -> file text, for every module of the stand-in."""
    doc = _DOC.format(version=TESTED_VERSION)
    files: dict[str, str] = {}
    for module, names in sorted(NAMES.items()):
        path = module.replace(".", "/")
        is_package = module == "sgl_kernel" or any(m.startswith(module + ".") for m in NAMES)
        rel = f"{path}/__init__.py" if is_package else f"{path}.py"
        if module == "sgl_kernel":
            body = doc + _BASE + '\n__version__ = "0.0.0+evalgate.standin"\n'
        else:
            body = doc + "\nfrom sgl_kernel import _placeholder\n"
        body += "".join(f'{name} = _placeholder("{module}.{name}")\n' for name in names)
        files[rel] = body
    return files
