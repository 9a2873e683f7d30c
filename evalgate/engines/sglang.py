"""SGLang (``python -m sglang.launch_server``): the GPU engine (README.md, "Engines": the variant table).

Variants become flags as the table says: ``bf16`` is ``--dtype bfloat16 --kv-cache-dtype auto``,
``fp8kv`` sets ``--kv-cache-dtype fp8_e4m3`` (plus ``--quantization-param-path`` when KV scales
are given), ``fp8`` adds ``--quantization fp8`` unless the checkpoint is already quantized, and
``int4`` needs an INT4 checkpoint whose method SGLang reads from its config.json. Everything
else comes from ``SGLangSettings`` and is therefore equal on both arms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evalgate.engines._checkpoint import checkpoint_quantization
from evalgate.engines._gpu import GPUEngine, GPUSettings
from evalgate.engines._launch import server_address
from evalgate.engines._sglang_diagnose import diagnose, parse_server_info
from evalgate.engines._sglang_scorer import SGLangScorer
from evalgate.engines.base import ServerHandle, run_process
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


@dataclass(frozen=True)
class SGLangSettings(GPUSettings):
    """Launch settings shared by both arms (anything here differing between arms is refused).

    GPU placement, the start-up timeout, the interpreter and the concurrency are GPUSettings'."""

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
    launch_command: tuple[str, ...] = ()
    """Replaces ``python -m sglang.launch_server`` (e.g. a container wrapper, or a test server)."""


class SGLangEngine(GPUEngine):
    name = "sglang"
    label = "SGLang"
    kv_dtypes = KV_DTYPES
    quant_keys = QUANT_KEYS
    model_setting = "[sglang] model_path in evalgate.toml"
    bf16_fix = "point model_path at the unquantized BF16 checkpoint"
    int4_mismatch = "{model} is quantized with {method!r} at {bits} bits, not INT4"
    settings: SGLangSettings

    def __init__(self, settings: SGLangSettings | None = None) -> None:
        self.settings = settings or SGLangSettings()

    @property
    def default_model(self) -> str | None:
        return self.settings.model_path

    @property
    def tp_size(self) -> int:
        return self.settings.tp_size

    # -- variant -> flags --------------------------------------------------------------------
    def _settings_args(self, variant: Variant) -> dict[str, str | None]:
        s = self.settings
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
        return args

    # -- launching ---------------------------------------------------------------------------
    def command(self, spec: LaunchSpec, *, port: int, api_key: str) -> list[str]:
        """The exact launch command for ``spec``; a fresh list every call."""
        s = self.settings
        cmd = list(s.launch_command or (s.python, "-m", "sglang.launch_server"))
        cmd += ["--model-path", spec.model, "--host", "127.0.0.1", "--port", str(port), "--api-key", api_key]
        for key, value in spec.args:
            cmd += [key] if value is None else [key, value]
        return cmd

    @contextlib.contextmanager
    def launch(
        self, spec: LaunchSpec, *, name: str, log_dir: Path, port: int | None = None
    ) -> Iterator[ServerHandle]:
        port, api_key, base_url = server_address(port, name)
        headers = {"Authorization": f"Bearer {api_key}"}
        env = self.arm_env(spec, name)

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
