"""SGLang (``python -m sglang.launch_server``): the GPU engine (DESIGN.md, variant table).

Variants become flags as the table says: ``bf16`` is ``--dtype bfloat16 --kv-cache-dtype auto``,
``fp8kv`` sets ``--kv-cache-dtype fp8_e4m3`` (plus ``--quantization-param-path`` when KV scales
are given), ``fp8`` adds ``--quantization fp8`` unless the checkpoint is already quantized, and
``int4`` needs an INT4 checkpoint whose method SGLang reads from its config.json. Everything
else comes from ``SGLangSettings`` and is therefore equal on both arms.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evalgate.engines._checkpoint import checkpoint_quantization
from evalgate.engines._sglang_diagnose import diagnose, parse_server_info
from evalgate.engines._sglang_scorer import SGLangScorer
from evalgate.engines.base import ServerHandle, free_port, new_api_key, port_in_use, run_process
from evalgate.errors import ConfigError, ServerStartError
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "QUANT_KEYS",
    "SGLangEngine",
    "SGLangScorer",
    "SGLangSettings",
    "checkpoint_quantization",
    "diagnose",
]

# What may differ between the arms: the weights checkpoint, quantization and its scales, and
# the kernels that run it. CUDA_VISIBLE_DEVICES is placement, not a setting of the computation:
# evalgate assigns GPUs at launch (SGLangSettings.gpus), outside the LaunchSpec, and a user who
# sets it in a variant's env is allowed to. The devices each arm used are recorded in its info.
QUANT_KEYS = frozenset(
    {
        "model",
        "--quantization",
        "--kv-cache-dtype",
        "--quantization-param-path",
        "--attention-backend",
        "--fp8-gemm-backend",
        "--moe-runner-backend",
        "env:CUDA_VISIBLE_DEVICES",
    }
)
KV_DTYPES = {"bf16": "auto", "fp8": "fp8_e4m3"}
INT4_METHODS = ("compressed-tensors", "awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round")


@dataclass(frozen=True)
class SGLangSettings:
    """Launch settings shared by both arms (anything here differing between arms is refused)."""

    model_path: str | None = None
    """The BF16 checkpoint (a local folder or a Hub id); variants with their own model override it."""
    tp_size: int = 1
    mem_fraction_static: float | None = None
    """Fraction of GPU memory for weights plus KV cache; None keeps SGLang's own per-GPU default."""
    dtype: str = "bfloat16"
    random_seed: int = 1234
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    context_length: int | None = None
    chat_template: str | None = None
    kv_scales_path: str | None = None
    """FP8 KV scales JSON (kernels/fp8_kv/sglang_json.py) passed to fp8kv arms only."""
    gpus: str | None = None
    """CUDA_VISIBLE_DEVICES for every arm (arms run one after another), e.g. "0" or "0,1"."""
    arm_gpus: tuple[tuple[str, str], ...] = ()
    """Per-arm override of ``gpus``: (arm name, devices) pairs, e.g. (("candidate", "1"),)."""
    ready_timeout_s: float = 900.0
    python: str = "python"
    """Interpreter that has SGLang installed; it may be another environment than evalgate's."""
    launch_command: tuple[str, ...] = ()
    """Replaces ``python -m sglang.launch_server`` (e.g. a container wrapper, or a test server)."""
    concurrency: int = 16
    """Requests in flight per arm; SGLang batches them on the GPU."""


def _weight_bits(quant: dict[str, Any]) -> set[int]:
    """Weight bit widths a quantization_config declares (AWQ/GPTQ ``bits``, compressed-tensors groups)."""
    bits = {int(quant[k]) for k in ("bits", "w_bit") if isinstance(quant.get(k), int)}
    for group in (quant.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if isinstance(weights.get("num_bits"), int):
            bits.add(int(weights["num_bits"]))
    return bits


class SGLangEngine:
    name = "sglang"

    def __init__(self, settings: SGLangSettings | None = None) -> None:
        self.settings = settings or SGLangSettings()

    def version(self) -> str:
        """The installed SGLang's version, asked of the interpreter that will launch it."""
        code = "from importlib.metadata import version; print(version('sglang'))"
        try:
            proc = subprocess.run(
                [self.settings.python, "-c", code], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return "not installed"
        return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "not installed"

    # -- variant -> flags --------------------------------------------------------------------
    def launch_spec(self, variant: Variant) -> LaunchSpec:
        s = self.settings
        if variant.kv not in KV_DTYPES:
            raise ConfigError(f"SGLang has no KV type for {variant.kv!r}", fix="use kv = 'bf16' or 'fp8'")
        model = self._model(variant)
        args: dict[str, str | None] = {
            "--dtype": s.dtype,
            "--kv-cache-dtype": KV_DTYPES[variant.kv],
            "--tp-size": str(s.tp_size),
            "--random-seed": str(s.random_seed),
        }
        if s.mem_fraction_static is not None:
            args["--mem-fraction-static"] = str(s.mem_fraction_static)
        for flag, value in (
            ("--context-length", s.context_length),
            ("--tool-call-parser", s.tool_call_parser),
            ("--reasoning-parser", s.reasoning_parser),
            ("--chat-template", s.chat_template),
        ):
            if value is not None:
                args[flag] = str(value)
        if variant.kv == "fp8" and s.kv_scales_path:
            args["--quantization-param-path"] = s.kv_scales_path
        args.update(self._weight_args(variant, model))
        for key, value in variant.args:
            args[key] = value
        return LaunchSpec(self.name, model, tuple(args.items()), tuple(sorted(variant.env)), QUANT_KEYS)

    def _model(self, variant: Variant) -> str:
        if variant.weights == "int4" and not variant.model:
            raise ConfigError(
                f"variant {variant.name!r} needs an INT4 checkpoint: SGLang does not quantize to INT4 itself",
                fix=f"set the path in evalgate.toml: [variants.{variant.name}] model = '/path/to/Model-W4A16' "
                "(a compressed-tensors, AWQ or GPTQ 4-bit checkpoint, group size 128)",
            )
        model = variant.model or self.settings.model_path
        if not model:
            raise ConfigError(
                "SGLang needs a model checkpoint",
                fix="set [sglang] model_path in evalgate.toml to a Hugging Face checkpoint (a folder or Hub id)",
            )
        return model

    def _weight_args(self, variant: Variant, model: str) -> dict[str, str | None]:
        quant = checkpoint_quantization(model)
        if variant.weights == "bf16":
            if quant is not None:
                raise ConfigError(
                    f"the bf16 variant {variant.name!r} points at a quantized checkpoint ({model}: "
                    f"quant_method {quant.get('quant_method')!r})",
                    fix="point model_path at the unquantized BF16 checkpoint",
                )
            return {}
        if variant.weights == "fp8":
            # A checkpoint that says how it is quantized is loaded as it says; SGLang refuses a
            # --quantization that disagrees with config.json. A Hub id given for this variant only
            # (not the baseline's model_path) is taken to be such a checkpoint too.
            prequantized = quant is not None or (
                variant.model is not None and not Path(model).exists() and model != self.settings.model_path
            )
            return {} if prequantized else {"--quantization": "fp8"}
        if variant.weights == "int4":
            if quant is None:
                if Path(model).exists():
                    raise ConfigError(
                        f"{model} has no quantization_config in its config.json, so it is not an INT4 checkpoint",
                        fix="point the int4 variant at a 4-bit compressed-tensors, AWQ or GPTQ checkpoint",
                    )
                return {}  # a Hub id: SGLang reads the method from its config.json
            method = str(quant.get("quant_method", ""))
            if method not in INT4_METHODS or (_weight_bits(quant) and 4 not in _weight_bits(quant)):
                raise ConfigError(
                    f"{model} is quantized with {method!r} at {sorted(_weight_bits(quant))} bits, not INT4",
                    fix=f"point the int4 variant at a 4-bit checkpoint ({', '.join(INT4_METHODS)})",
                )
            return {}  # SGLang picks the kernel (e.g. awq -> awq_marlin) from config.json
        raise ConfigError(f"SGLang has no weights type {variant.weights!r}", fix="use bf16, fp8 or int4")

    # -- launching ---------------------------------------------------------------------------
    def command(self, spec: LaunchSpec, *, port: int, api_key: str) -> list[str]:
        """The exact launch command for ``spec``; a fresh list every call."""
        s = self.settings
        cmd = list(s.launch_command or (s.python, "-m", "sglang.launch_server"))
        cmd += ["--model-path", spec.model, "--host", "127.0.0.1", "--port", str(port), "--api-key", api_key]
        for key, value in spec.args:
            cmd += [key] if value is None else [key, value]
        return cmd

    def gpus_for(self, arm: str) -> str | None:
        return dict(self.settings.arm_gpus).get(arm, self.settings.gpus)

    @contextlib.contextmanager
    def launch(
        self, spec: LaunchSpec, *, name: str, log_dir: Path, port: int | None = None
    ) -> Iterator[ServerHandle]:
        if port is not None and port_in_use(port):
            raise ServerStartError(
                f"port {port} on 127.0.0.1 is already in use, so the {name} server cannot listen there",
                fix="omit --port to let evalgate pick a free port, or stop whatever holds it",
            )
        port = port or free_port()
        api_key = new_api_key()
        base_url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {api_key}"}
        env = dict(spec.env)
        gpus = self.gpus_for(name)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus

        def ready() -> bool:
            # /health_generate runs a one-token generation: ready means the scheduler answers
            try:
                return (
                    httpx.get(f"{base_url}/health_generate", headers=headers, timeout=30.0).status_code == 200
                )
            except httpx.HTTPError:
                return False

        with run_process(
            self.command(spec, port=port, api_key=api_key),
            name=name,
            base_url=base_url,
            api_key=api_key,
            log_path=log_dir / f"{name}.log",
            ready=ready,
            env=env,
            timeout_s=self.settings.ready_timeout_s,
            diagnose=diagnose,
        ) as handle:
            handle.info.update(fetch_server_info(base_url, api_key))
            handle.info["cuda_visible_devices"] = env.get("CUDA_VISIBLE_DEVICES")
            yield handle

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> SGLangScorer:
        return SGLangScorer(handle, concurrency=self.settings.concurrency, seed=seed)


def fetch_server_info(base_url: str, api_key: str) -> dict[str, Any]:
    """``/server_info`` (``/get_server_info`` on older SGLang) as recorded in the manifest."""
    headers = {"Authorization": f"Bearer {api_key}"}
    for path in ("/server_info", "/get_server_info"):
        try:
            resp = httpx.get(base_url + path, headers=headers, timeout=30.0)
        except httpx.HTTPError as exc:
            return {"server_info_error": f"{path}: {type(exc).__name__}"}
        if resp.status_code == 200:
            return parse_server_info(resp.json(), [api_key])
    return {"server_info_error": f"/server_info and /get_server_info answered HTTP {resp.status_code}"}
