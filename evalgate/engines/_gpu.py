"""What the two GPU engines, SGLang and vLLM, share: the same variant rules over a Hugging Face
checkpoint, the same way of asking another interpreter for the engine's version, the same GPU
placement per arm, and the same default concurrency for an attached server. Only the flags and
the readiness checks differ, and those stay in each engine's package.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from evalgate.arms import original
from evalgate.config import GPUConfig
from evalgate.engines._checkpoint import INT4_METHODS, checkpoint_quantization, is_int4, weight_bits
from evalgate.engines._launcher import WorkerSlot
from evalgate.engines.api import Engine
from evalgate.errors import ConfigError
from evalgate.redact import MASK, is_secret_key
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "FP16_ONLY_METHODS",
    "GPUEngine",
    "attached_concurrency",
    "fp16_only_method",
    "package_version",
    "visible_gpus",
]

FP16_ONLY_METHODS = ("awq", "gptq")
"""Weight methods whose (non-Marlin) kernels take float16 activations only, in SGLang 0.5.23
(``get_supported_act_dtypes`` in ``sglang/srt/layers/quantization/awq/awq.py``, ``gptq/gptq.py``)
and vLLM 0.33 alike. Both engines pick the Marlin kernel (bf16 too) by themselves on a GPU that has
it; a variant that forces ``--quantization awq`` or ``gptq`` gets ``--dtype float16``."""


def fp16_only_method(quantization: str | None) -> str | None:
    """``quantization`` if it names a kernel that takes float16 activations only, else None."""
    return quantization if quantization in FP16_ONLY_METHODS else None


def attached_concurrency(fp: Mapping[str, Any]) -> int:
    """Requests in flight per attached GPU server: its own limit if it reports one, else 32 (at most 256)."""
    limit = (fp.get("server_args") or {}).get("max_running_requests")
    return min(int(limit or 32), 256)


def package_version(python: str, package: str) -> str:
    """``package``'s installed version as ``python`` sees it, or "not installed".

    The engine may live in another environment than evalgate (its own CUDA and torch pins), so
    the interpreter that will launch it is asked, not this one."""
    code = f"from importlib.metadata import version; print(version({package!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "not installed"


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []


class GPUEngine(Engine):
    """Variant rules, model choice, weight checks and GPU placement for an engine serving HF
    checkpoints, so that both GPU engines refuse and place alike.

    A subclass gives its flags from its config section (``_settings_args``), its KV types and the
    keys that may differ between arms, and gives its configured checkpoint as ``default_model``. Its messages
    name it (``label``), say where its model is set (``model_setting``, ``bf16_fix``) and how a
    non-INT4 checkpoint is reported (``int4_mismatch``, formatted with model, quant_method as
    config.json has it, method as text, and bits)."""

    name: ClassVar[str]
    label: ClassVar[str]
    kv_dtypes: ClassVar[Mapping[str, str | None]]
    quant_keys: ClassVar[frozenset[str]]
    model_setting: ClassVar[str]
    bf16_fix: ClassVar[str]
    int4_mismatch: ClassVar[str]
    config: GPUConfig

    def __init__(self, config: GPUConfig) -> None:
        self.config = config
        self._layout: dict[str, str] | None = None

    @property
    def default_model(self) -> str | None:
        raise NotImplementedError

    def _settings_args(self, variant: Variant) -> dict[str, str | None]:
        """The engine's flags from its config (equal on both arms) and the variant's KV type."""
        raise NotImplementedError

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        """Settings flags, then the weights' flags, then the variant's own args (the last wins)."""
        if variant.kv not in self.kv_dtypes:
            raise ConfigError(
                f"{self.label} has no KV type for {variant.kv!r}", fix="use kv = 'bf16' or 'fp8'"
            )
        model = self._model(variant)
        args = self._settings_args(variant)
        args.update(self._weight_args(variant, model))
        for key, value in variant.args:
            args[key] = value
        return LaunchSpec(self.name, model, tuple(args.items()), tuple(sorted(variant.env)), self.quant_keys)

    def command(self, spec: LaunchSpec, *, port: int, api_key: str) -> list[str]:
        raise NotImplementedError

    def launch_command(self, spec: LaunchSpec, *, name: str, port: int, api_key: str) -> list[str]:
        """The exact command, with every variable the arm's server gets in front (the spec's own and
        CUDA_VISIBLE_DEVICES), a secret-named one masked: a failed start quotes it to rerun."""
        env = {k: MASK if is_secret_key(k) else v for k, v in self.arm_env(spec, name).items()}
        return [
            *(f"{k}={v}" for k, v in sorted(env.items())),
            *self.command(spec, port=port, api_key=api_key),
        ]

    def describe(self, spec: LaunchSpec) -> str | None:
        """The weights' quantization method and the KV cache dtype the server is told to use
        (what it actually ran is read back from its log: the manifest's ``server`` facts)."""
        args = dict(spec.args)
        method = args.get("--quantization")
        weights = f"{method} weights" if method else "the checkpoint's own weights (no --quantization)"
        kv = args.get("--kv-cache-dtype") or "the engine's default"
        kv_name = {
            "auto": "KV auto (the model's dtype, or FP8 where the checkpoint's quant config says so)",
            "fp8_e4m3": "FP8 e4m3 KV",
            "fp8_e5m2": "FP8 e5m2 KV",
            "bfloat16": "BF16 KV",
            "bf16": "BF16 KV",
        }.get(kv, f"{kv} KV")
        return f"{weights}, {kv_name}"

    def plan_notes(self, spec: LaunchSpec) -> list[str]:
        """The KV cache dtype and where an FP8 cache's scales come from."""
        args = dict(spec.args)
        kv = args.get("--kv-cache-dtype")
        why = (
            "explicit: 'auto' would follow a checkpoint's FP8 KV quant config"
            if kv in ("bfloat16", "bf16")
            else "the model dtype"
            if kv == "auto"
            else "a quantized KV cache: its scales below"
        )
        notes = [f"KV cache: --kv-cache-dtype {kv or '(engine default)'} ({why})"]
        if kv and kv.startswith("fp8"):
            notes.append(self.scales_note(spec))
        if "--dtype" in spec.quant_keys and args.get("--dtype") == "float16":
            notes.append(
                f"--dtype float16: {args.get('--quantization')} kernels take float16 activations only"
            )
        return notes

    def scales_note(self, spec: LaunchSpec) -> str:
        """Where an FP8 KV cache's scales come from, for --dry-run."""
        return "KV scales: from the checkpoint, else 1.0 (the scale used is read back from the log at launch)"

    tool_parser_flags: ClassVar[tuple[str, ...]] = ("--tool-call-parser",)
    """The launch flags a server needs before it fills ``tool_calls``."""

    def require_tool_parser(self, arm: str, spec: LaunchSpec) -> None:
        """The tool_calls suite needs the engine's tool-call parser on every arm (see the suite)."""
        missing = [f for f in self.tool_parser_flags if f not in dict(spec.args)]
        if missing:
            raise ConfigError(
                f"the tool_calls suite on {self.label} needs a tool-call parser, and the {arm} would launch "
                f"without {' '.join(missing)}: {self.label} would return no tool_calls on either arm, and "
                "the pair would pass whatever the candidate does",
                fix=f"set tool_call_parser in evalgate.toml [{self.name}] to this model's parser (e.g. "
                "'llama3', 'qwen25', 'mistral', 'hermes'); evalgate passes it to both arms as "
                f"{' '.join(self.tool_parser_flags)}",
            )

    def version(self) -> str:
        """The installed engine's version (its package is named as the engine), asked of ``python``."""
        return package_version(self.config.python, self.name)

    @property
    def tp_size(self) -> int:
        """GPUs one arm's server spans (tensor parallelism)."""
        raise NotImplementedError

    def gpus_for(self, arm: str) -> str | None:
        """The arm's CUDA_VISIBLE_DEVICES: as configured, else the automatic layout, else unset."""
        if self.config.gpus is not None or self.config.arm_gpus:  # a repeat arm (--aa): its original's
            return self.config.arm_gpus.get(arm, self.config.arm_gpus.get(original(arm), self.config.gpus))
        return self._auto_layout().get(original(arm))

    def _auto_layout(self) -> dict[str, str]:
        """With enough GPUs for both arms, baseline and candidate each get their own ``tp_size``
        of them (and then run at the same time); otherwise both use the same GPUs in turn."""
        if self._layout is None:
            tp, gpus = self.tp_size, visible_gpus()
            self._layout = {}
            if len(gpus) >= 2 * tp:
                base, cand = ",".join(gpus[:tp]), ",".join(gpus[tp : 2 * tp])
                self._layout = {"baseline": base, "candidate": cand}
        return self._layout

    @property
    def concurrent_arms(self) -> bool:
        """Baseline and candidate on disjoint GPU sets can run at the same time (the runner asks)."""
        base, cand = self.gpus_for("baseline"), self.gpus_for("candidate")
        if not base or not cand:
            return False
        return not set(base.split(",")) & set(cand.split(","))

    def arm_env(self, spec: LaunchSpec, arm: str, worker: WorkerSlot | None = None) -> dict[str, str]:
        """The spec's env plus CUDA_VISIBLE_DEVICES for ``arm``: placement, set outside the spec.
        Worker ``i`` of ``n`` behind a gateway gets the ``i``-th ``n``-th of the arm's GPUs."""
        env = dict(spec.env)
        gpus = self.gpus_for(arm)
        if gpus is not None and worker is not None and worker.count > 1:
            gpus = worker_gpus(gpus, worker, per_worker=self.tp_size, arm=arm)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        return env

    def _model(self, variant: Variant) -> str:
        if variant.weights == "int4" and not variant.model:
            raise ConfigError(
                f"variant {variant.name!r} needs an INT4 checkpoint: {self.label} does not quantize to INT4 itself",
                fix=f"set the path in evalgate.toml: [variants.{variant.name}] model = '/path/to/Model-W4A16' "
                "(a compressed-tensors, AWQ or GPTQ 4-bit checkpoint, group size 128)",
            )
        model = variant.model or self.default_model
        if not model:
            raise ConfigError(
                f"{self.label} needs a model checkpoint",
                fix=f"set {self.model_setting} to a Hugging Face checkpoint (a folder or Hub id)",
            )
        return model

    def _weight_args(self, variant: Variant, model: str) -> dict[str, str | None]:
        """Flags for the variant's weights; refuses a checkpoint that is not what the variant says."""
        quant = checkpoint_quantization(model)
        if variant.weights == "bf16":
            if quant is not None:
                raise ConfigError(
                    f"the bf16 variant {variant.name!r} points at a quantized checkpoint ({model}: "
                    f"quant_method {quant.get('quant_method')!r})",
                    fix=self.bf16_fix,
                )
            return {}
        if variant.weights == "fp8":
            # A checkpoint that says how it is quantized is loaded as it says: both engines refuse a
            # --quantization that disagrees with config.json. A Hub id given for this variant only
            # (not the baseline's model) is taken to be such a checkpoint too: its config.json is
            # not here to read.
            prequantized = quant is not None or (
                variant.model is not None and not Path(model).exists() and model != self.default_model
            )
            return {} if prequantized else {"--quantization": "fp8"}
        if variant.weights == "int4":
            if quant is None and Path(model).exists():
                raise ConfigError(
                    f"{model} has no quantization_config in its config.json, so it is not an INT4 checkpoint",
                    fix="point the int4 variant at a 4-bit compressed-tensors, AWQ or GPTQ checkpoint",
                )
            if quant is not None and not is_int4(quant):
                raise ConfigError(
                    self.int4_mismatch.format(
                        model=model,
                        quant_method=quant.get("quant_method"),
                        method=str(quant.get("quant_method", "")),
                        bits=sorted(weight_bits(quant)),
                    ),
                    fix=f"point the int4 variant at a 4-bit checkpoint ({', '.join(INT4_METHODS)})",
                )
            # a Hub id, or a 4-bit checkpoint: the engine reads the method from config.json and
            # picks the kernel itself (e.g. awq -> awq_marlin)
            return {}
        raise ConfigError(
            f"{self.label} has no weights type {variant.weights!r}", fix="use bf16, fp8 or int4"
        )


def worker_gpus(gpus: str, worker: WorkerSlot, *, per_worker: int, arm: str) -> str:
    """The slice of an arm's GPU list that worker ``worker.index`` of ``worker.count`` runs on."""
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if len(ids) < worker.count * per_worker:
        raise ConfigError(
            f"the {arm} arm runs {worker.count} workers of {per_worker} GPU(s) each, but gets GPUs {gpus!r}",
            fix="list workers x tensor-parallel GPUs per arm (gpus / arm_gpus), or lower workers",
        )
    return ",".join(ids[worker.index * per_worker : (worker.index + 1) * per_worker])
