"""SGLang on the CPU (``[sglang] device = "cpu"``): the real ``sglang.launch_server`` from the venv
that ``evalgate setup --sglang-cpu`` makes (``_cpu_install``), serving the default model's
Hugging Face twin (docs/engines.md, "SGLang on the CPU").

Both arms get the same CPU flags and environment (``CPU_ARGS``, ``cpu_env``):

- ``--dtype float32 --kv-cache-dtype auto``: BF16 matmuls are over 10x slower on a CPU without
  AVX512-BF16 or AMX; the weights are the BF16 checkpoint's either way;

- ``SGLANG_USE_CPU_ENGINE=1``: without it ``--device cpu`` is not honoured
  (``sglang/srt/utils/common.py``, ``is_cpu``; ``sglang/srt/platforms/__init__.py``);
- ``--attention-backend torch_native``: SGLang's own PyTorch attention, no kernel package;
- no CUDA graphs (``--disable-decode-cuda-graph --disable-prefill-cuda-graph``, which 0.5.23 has
  in place of the deprecated ``--disable-cuda-graph``);
- ``--sleep-on-idle``: without it the idle scheduler keeps a core busy;
- ``--max-total-tokens 16384`` (``POOL_TOKENS``; ``[sglang] max_total_tokens`` wins): the KV pool,
  which on a CPU is not sized from free GPU memory;
- ``OMP_NUM_THREADS=1`` (``cpu_threads``): with 2 threads on a loaded 2-core machine decoding fell
  to 1 token/s, with 1 thread it ran at 14 (measured by the issue's author, #18).

What a CPU pair can differ in is the weights only. SGLang 0.5.23 refuses an FP8 KV cache on a
CPU without AMX ("CPU FP8 KV cache requires Intel AMX support", ``mem_cache/kv_cache_configurator.py``),
every weight-quantized linear method it has for a CPU needs the AMX kernels of the real
sgl_kernel (``layers/quantization/auto_round.py``: "Generic x86, AMD CPU, and other non-AMX CPU
backends are not supported"), and 0.5.23 no longer has ``--torchao-config``. So the ``int4`` arm
of the default model serves the Q4_0 GGUF's weights dequantized to BF16 (``CPU_WEIGHTS``): the
candidate's weights are the 4-bit ones, computed like the baseline's.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from evalgate.config import SGLangConfig
from evalgate.engines._cpu import CPUEngineDefaults
from evalgate.engines._cpu_setup import CPU_WEIGHTS, checkpoint_dir
from evalgate.engines.gguf import cache_dir
from evalgate.engines.sglang._engine import SGLangEngine
from evalgate.errors import ConfigError
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "CPU_ARGS",
    "CPU_WEIGHTS",
    "SGLangCPUEngine",
    "checkpoint_dir",
    "cpu_env",
    "default_root",
    "venv_python",
]

CPU_ARGS: dict[str, str | None] = {
    # float32 compute: PyTorch's BF16 matmuls on a CPU without AVX512-BF16 or AMX are over 10x
    # slower (measured here: a 998-token prompt took 146 s in bfloat16, a 1,212-token one 11.6 s
    # in float32); the weights stay the BF16 checkpoint's values. The KV cache follows the model
    # ("auto"; SGLang has no float32 choice), and cannot turn FP8: that needs AMX on a CPU
    "--dtype": "float32",
    "--kv-cache-dtype": "auto",
    "--device": "cpu",
    "--attention-backend": "torch_native",
    "--disable-decode-cuda-graph": None,  # 0.5.23 deprecates --disable-cuda-graph (server_args.py)
    "--disable-prefill-cuda-graph": None,
    "--sleep-on-idle": None,
}
POOL_TOKENS = "16384"
"""``--max-total-tokens`` unless ``[sglang] max_total_tokens`` sets it (a pool small enough to fill)."""
SETUP_FIX = "run `evalgate setup --sglang-cpu` (it makes the venv and the checkpoints)"


def default_root() -> Path:
    """Where ``evalgate setup --sglang-cpu`` installs: ``<evalgate cache>/sglang-cpu``."""
    return cache_dir() / "sglang-cpu"


def venv_python(root: Path) -> Path:
    return root / "venv" / "bin" / "python"


def cpu_env(config: SGLangConfig) -> dict[str, str]:
    # PYTHONSAFEPATH: `python -m` puts the working directory first on sys.path, and a folder
    # there named like a package (evalgate's own kernels/, in a checkout) shadows it for SGLang:
    # transformers imports `kernels` to probe for Hugging Face's package of that name
    return {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": str(config.cpu_threads), "PYTHONSAFEPATH": "1"}


class SGLangCPUEngine(CPUEngineDefaults, SGLangEngine):
    """SGLangEngine with the CPU flags and environment on both arms, the setup venv's python
    and the default model's converted checkpoints unless ``[sglang]`` names others."""

    def __init__(self, config: SGLangConfig | None = None) -> None:
        config = config or SGLangConfig(device="cpu")
        self.root = Path(config.cpu_dir).expanduser() if config.cpu_dir else default_root()
        self.own_model = config.model_path is None
        update: dict[str, object] = {}
        if config.python == SGLangConfig.model_fields["python"].default:
            update["python"] = str(venv_python(self.root))
        if self.own_model:
            update["model_path"] = str(checkpoint_dir(self.root, "bf16"))
        super().__init__(config.model_copy(update=update))

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        if variant.kv != "bf16":
            raise ConfigError(
                f"variant {variant.name!r} asks for an FP8 KV cache, which SGLang refuses on a CPU "
                "without AMX ('CPU FP8 KV cache requires Intel AMX support')",
                fix="compare weights on the CPU: --candidate int4 (docs/engines.md, 'SGLang on the CPU')",
            )
        if self.config.python == str(venv_python(self.root)) and not Path(self.config.python).exists():
            raise ConfigError(f"SGLang's CPU venv is missing ({self.config.python})", fix=SETUP_FIX)
        spec = super().launch_spec(variant)
        env = {**cpu_env(self.config), **dict(spec.env)}  # a variant's own env wins (and must match)
        return dataclasses.replace(spec, env=tuple(sorted(env.items())))

    def _settings_args(self, variant: Variant) -> dict[str, str | None]:
        args = {**super()._settings_args(variant), **CPU_ARGS}
        args.setdefault("--max-total-tokens", POOL_TOKENS)
        return args

    def _model(self, variant: Variant) -> str:
        if variant.model or not self.own_model:
            return super()._model(variant)
        if variant.weights not in CPU_WEIGHTS:
            raise ConfigError(
                f"SGLang on the CPU has no {variant.weights} weights for the default model "
                "(its quantized kernels need AMX)",
                fix=f"use one of {', '.join(CPU_WEIGHTS)}, e.g. --candidate int4",
            )
        path = checkpoint_dir(self.root, variant.weights)
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is missing", fix=SETUP_FIX)
        return str(path)

    def _weight_args(self, variant: Variant, model: str) -> dict[str, str | None]:
        # the default model's int4 twin holds dequantized weights: no quantization flag to add
        if self.own_model and not variant.model and variant.weights in CPU_WEIGHTS:
            return {}
        return super()._weight_args(variant, model)

    def diagnose(self, log: str) -> str | None:
        """The stand-in's own error and a module missing from the lean install come first."""
        called = re.search(r"(sgl_kernel[\w.]*) was called, but this sgl_kernel is evalgate's", log)
        if called:
            return (
                f"SGLang called {called.group(1)}, a kernel the CPU stand-in does not have: this model "
                "or setting needs the real sglang-kernel (a GPU, or a CPU with AMX); the default model "
                "with evalgate's CPU flags does not call it"
            )
        missing = re.search(r"No module named '([\w.]+)'", log)
        if missing and "Traceback" in log:
            return (
                f"SGLang's CPU venv lacks the module {missing.group(1)!r}: add its package to "
                "LEAN_PACKAGES in evalgate/engines/sglang/_cpu_install.py, then run "
                "`evalgate setup --sglang-cpu` again"
            )
        return super().diagnose(log)

    def gpus_for(self, arm: str) -> str | None:
        return None  # no CUDA_VISIBLE_DEVICES: the arms run one after the other on the same cores
