"""``evalgate.toml``: engine settings shared by both arms, user-defined variants, and each
suite's own options.

Example::

    [llamacpp]
    ctx_per_slot = 4096   # tokens of context per parallel slot
    parallel = 4          # -np: parallel slots, also the client concurrency

    [variants.bf16-long]  # a variant of your own; `base` is what it starts from
    base = "bf16"
    args = { "-c" = "32768" }

    [suites.tool_calls]   # a suite's own options (`evalgate suites list` shows them)
    prefill = false

The flags of ``evalgate compare`` are fields of ``evalgate.request.CompareRequest``, not of this
file. A suite option given with ``--suite-opt SUITE.KEY=VALUE`` wins over its table here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalgate.errors import ConfigError
from evalgate.variants import Variant, parse_variant, variant_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["EvalgateConfig", "load_config"]


class LlamaCppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ctx_per_slot: int = Field(4096, ge=256, description="Context tokens per parallel slot.")
    parallel: int = Field(4, ge=1, le=256, description="Parallel slots (-np) and client concurrency.")
    threads: int = Field(2, ge=1, description="CPU threads (-t).")
    threads_batch: int | None = Field(None, ge=1, description="Prompt-processing threads (-tb).")
    poll: int = Field(50, ge=0, le=100, description="--poll: worker spin before sleeping (0 = none).")
    repack: bool = Field(True, description="False adds --no-repack on both arms.")
    ready_timeout_s: float = Field(120.0, gt=0, description="Seconds to wait for /health.")
    deterministic: bool = Field(
        False,
        description="One slot, one request at a time, no prompt cache: logprobs are bit-identical "
        "across runs, restarts and resumes (on 2 CPU cores as fast as the default).",
    )


class _GPUConfig(BaseModel):
    """Fields both GPU engines' sections have (``evalgate.engines._gpu.GPUSettings`` and the rest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: str = "bfloat16"
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    chat_template: str | None = None
    gpus: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for every arm.")
    arm_gpus: dict[str, str] = Field(
        default_factory=dict, description="Per-arm devices, e.g. {candidate = '1'}."
    )
    ready_timeout_s: float = Field(900.0, gt=0)
    python: str = "python"
    launch_command: list[str] = Field(default_factory=list)
    concurrency: int = Field(16, ge=1)

    def settings(self) -> dict[str, Any]:
        """Keyword arguments for the engine's frozen settings dataclass (tuples, not lists)."""
        out = self.model_dump()
        out["arm_gpus"] = tuple(sorted(self.arm_gpus.items()))
        out["launch_command"] = tuple(self.launch_command)
        return out


class SGLangConfig(_GPUConfig):
    """``[sglang]``: see ``evalgate.engines.sglang.SGLangSettings`` for what each field does."""

    model_path: str | None = Field(None, description="BF16 checkpoint folder or Hub id.")
    tp_size: int = Field(1, ge=1)
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    random_seed: int = 1234
    context_length: int | None = Field(None, ge=1)
    kv_scales_path: str | None = None


class VLLMConfig(_GPUConfig):
    """``[vllm]``: see ``evalgate.engines.vllm.VLLMSettings`` for what each field does."""

    model: str | None = Field(None, description="BF16 checkpoint folder or Hub id.")
    tensor_parallel_size: int = Field(1, ge=1)
    seed: int = 1234
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    generation_config: str = "vllm"


class VariantConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base: str = Field("bf16", description="Built-in variant this one starts from.")
    model: str | None = Field(None, description="Weights checkpoint path, overriding the engine default.")
    weights: str | None = Field(None, description="Weights precision label: bf16, fp8 or int4.")
    kv: str | None = Field(None, description="KV cache precision label: bf16 or fp8.")
    args: dict[str, str | bool] = Field(default_factory=dict, description="Extra engine flags.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")


class EvalgateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str | None = Field(None, description="Engine: llamacpp (default on CPU), sglang or vllm.")
    llamacpp: LlamaCppConfig = Field(default_factory=LlamaCppConfig)
    sglang: SGLangConfig = Field(default_factory=SGLangConfig)
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    variants: dict[str, VariantConfig] = Field(default_factory=dict)
    suites: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per suite, its own options (checked by the suite)."
    )

    def custom_variants(self) -> dict[str, Variant]:
        out: dict[str, Variant] = {}
        for name, vc in self.variants.items():
            table: dict[str, Any] = {k: v for k, v in vc.model_dump().items() if v is not None}
            out[name] = variant_from_config(name, table, {})
        return out

    def variant(self, name: str) -> Variant:
        return parse_variant(name, self.custom_variants())


def load_config(path: Path | None) -> EvalgateConfig:
    """Load ``path``, or ``./evalgate.toml`` when it exists, or the defaults."""
    if path is None:
        default = Path("evalgate.toml")
        if not default.exists():
            return EvalgateConfig()
        path = default
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist", fix="check the --config path")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", fix="fix the line it names") from exc
    try:
        return EvalgateConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{path}: {where}: {first['msg']}",
            fix="see the example at the top of evalgate/config.py or the README's configuration section",
        ) from exc
