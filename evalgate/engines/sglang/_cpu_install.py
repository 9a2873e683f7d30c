"""``evalgate setup --sglang-cpu``: real SGLang on a CPU, in its own venv (docs/engines.md, "SGLang on the CPU").

Five steps, each skipped when its result is already there, each printing one line:

1. a venv (``<root>/venv``, root ``~/.cache/evalgate/sglang-cpu`` unless given);
2. a lean install: torch and torchvision (``TORCH``) and SGLang's own requirements minus the
   GPU-only ones (``LEAN_PACKAGES``), then ``sglang==TESTED_VERSION`` with ``--no-deps`` (its
   metadata also pins a dozen CUDA kernel packages that a CPU never runs);
3. the ``sgl_kernel`` stand-in (``_standin``): PyPI has no CPU build of sgl_kernel, and SGLang
   imports a few of its names at startup even on the CPU path; the stand-in gives exactly those
   names, and each raises if it is ever called;
4. an import check of SGLang's server in the venv;
5. the Hugging Face twins of the default model's GGUFs (``scripts/gguf_to_hf.py``): F16 for the
   bf16 arm, and Q4_0 dequantized to BF16 for the int4 arm (``_cpu.CPU_WEIGHTS``).

Step 4 and the conversions run at the same time (each a child process); their lines still come
in order.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

from evalgate.engines._cpu_setup import (
    Step,
    convert_once,
    llama_quantize,
    run_step,
    run_steps,
    venv_import_check,
)
from evalgate.engines.gguf import derived_gguf
from evalgate.engines.sglang._cpu import CPU_WEIGHTS, checkpoint_dir, default_root, venv_python
from evalgate.engines.sglang._diagnose import TESTED_VERSION
from evalgate.engines.sglang._standin import standin_files
from evalgate.errors import InfraError

__all__ = ["LEAN_PACKAGES", "TORCH", "convert_once", "install_sglang_cpu", "run_step"]

TORCH = ("torch==2.14.1", "torchvision==0.29.1")
"""SGLang 0.5.23's own torch pin, and the torchvision built with it: SGLang imports torchvision at
startup (``srt/configs`` -> ``multimodal/internvl_utils.py``), and PyPI's torchvision fails to
import beside the CPU build of torch ("operator torchvision::nms does not exist": its extension
links the CUDA build's libraries). So this is PyPI's CUDA build, which runs on a CPU too."""

# SGLang 0.5.23's Requires-Dist with its own pins, less what only a GPU (or audio, video,
# Ray, gRPC, benchmarks) uses: cuda-python, flash-attn-4, flashinfer_python,
# humming-kernels, nvidia-cutlass-dsl, nvidia-mathdx, nvshmem4py, quack-kernels, sgl-deep-ep,
# sgl-deep-gemm, sgl-flash-mla, sglang-kernel, tilelang, torch_memory_saver, torchaudio,
# torchcodec, timm, av, decord2, datasets, modelscope, numba, kernels,
# smg-grpc-servicer, outlines, llguidance, mistral_common, anthropic, py-spy, build, ninja.
# accelerate is for scripts/gguf_to_hf.py.
LEAN_PACKAGES = (
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "sentencepiece==0.2.1",
    "compressed-tensors==0.18.0",
    "xgrammar==0.2.7",
    "openai==2.8.0",
    "openai-harmony==0.0.4",
    "triton",
    "einops",
    "gguf",
    "accelerate",
    "fastapi",
    "uvicorn>=0.51",
    "uvloop",
    "orjson",
    "pybase64",
    "psutil",
    "pyzmq>=25.1.2",
    "msgspec",
    "pydantic",
    "aiohttp",
    "requests",
    "numpy",
    "scipy",
    "packaging",
    "pillow",
    "prometheus-client>=0.20.0",
    "python-multipart",
    "setproctitle",
    "partial_json_parser",
    "interegular",
    "watchfiles",
    "zstandard",
    "xxhash",
    "tqdm",
    "regex",
    "python-dateutil<3",
    "IPython",
    "tiktoken",
    "distro",
    "nvidia-ml-py",
    "soundfile==0.13.1",
    "apache-tvm-ffi==0.1.11",  # xgrammar's, at SGLang's pin
    # imported at startup but not in SGLang's metadata (a GPU install gets them through datasets)
    "dill",
    "jsonschema",
)
SGLANG = f"sglang=={TESTED_VERSION}"
IMPORT_CHECK = (
    "import sglang.launch_server, sglang.srt.entrypoints.http_server, sgl_kernel; print(sglang.__version__)"
)

IMPORT_FIX = (
    "a requirement is missing from evalgate/engines/sglang/_cpu_install.py LEAN_PACKAGES, or the "
    "stand-in lacks a name SGLang imports (_standin.py); the last line below names it"
)

Say = Callable[[str], None]


def install_sglang_cpu(root: Path | None = None, *, say: Say = print) -> Path:
    """Make ``root`` (default ``default_root()``) hold a venv with SGLang and the converted
    checkpoints; idempotent. Returns the venv's python."""
    root = (root or default_root()).resolve()
    python = venv_python(root)
    in_order: list[Step] = [
        ("packages", lambda: _packages(root, python)),
        ("sgl_kernel stand-in", lambda: _standin(python)),
    ]
    # Each of these is a child of the venv's python that computes on one thread for the most part
    # (torch's import, a 135M model): side by side they take about as long as the longest alone,
    # not the sum (2 cores: ~100 s of ~215 s).
    side_by_side: list[Step] = [
        ("import check", lambda: _import_check(python)),
        *((f"checkpoint {w}", lambda w=w: _checkpoint(root, python, w)) for w in CPU_WEIGHTS),
    ]
    run_steps("sglang-cpu", root, python, in_order, side_by_side, say=say)
    return python


def _packages(root: Path, python: Path) -> str:
    wanted = "\n".join((*TORCH, *LEAN_PACKAGES, SGLANG)) + "\n"
    stamp = root / "venv" / "evalgate-packages.txt"
    if stamp.exists() and stamp.read_text() == wanted:
        return f"{SGLANG}, {TORCH[0]} (kept)"
    fix = "check the network and the package index (PyPI), then run `evalgate setup --sglang-cpu` again"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run_step([*pip, "--only-binary=:all:", *TORCH, *LEAN_PACKAGES], "installing SGLang's requirements", fix)
    run_step([*pip, "--no-deps", SGLANG], f"installing {SGLANG}", fix)
    stamp.write_text(wanted)
    return f"{SGLANG} --no-deps, {' '.join(TORCH)}, {len(LEAN_PACKAGES)} requirements"


def _standin(python: Path) -> str:
    out = run_step(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        "finding the venv's site-packages",
        "delete the venv folder and run `evalgate setup --sglang-cpu` again",
    )
    site = Path(out.strip().splitlines()[-1])
    files = standin_files()
    target = site / "sgl_kernel"
    if target.is_dir() and {str(p.relative_to(site)): p.read_text() for p in target.rglob("*.py")} == files:
        return f"{target} (kept)"
    shutil.rmtree(target, ignore_errors=True)
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return f"{target} ({len(files)} modules)"


def _import_check(python: Path) -> str:
    return venv_import_check(python, IMPORT_CHECK, package="sglang", server="SGLang's server", fix=IMPORT_FIX)


def gguf_to_hf_script() -> Path:
    """``scripts/gguf_to_hf.py`` of this source checkout (evalgate is installed editable in CI)."""
    return Path(__file__).resolve().parents[3] / "scripts" / "gguf_to_hf.py"


def _checkpoint(root: Path, python: Path, weights: str) -> str:
    gguf = derived_gguf(weights, llama_quantize())
    out = checkpoint_dir(root, weights)

    def command(tmp: Path) -> list[str]:
        script = gguf_to_hf_script()
        if not script.is_file():
            raise InfraError(
                f"{script} is missing, so the GGUF cannot be converted for SGLang",
                fix="run `evalgate setup --sglang-cpu` from a source checkout (pip install -e .)",
            )
        return [str(python), str(script), str(gguf), str(tmp), "--dtype", "bfloat16"]

    converted = convert_once(
        gguf,
        out,
        command,
        what=f"converting {gguf.name} to a Hugging Face checkpoint",
        fix="see the script's message above; `python scripts/gguf_to_hf.py --help`",
    )
    if not converted:
        return f"{out} (kept)"
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()[:16]
    return f"{out} from {gguf.name} (model.safetensors sha256 {digest})"
