"""SGLang (``python -m sglang.launch_server``): the GPU engine (README.md, "Engines": the variant table).

Variants become flags as the table says: ``bf16`` is ``--dtype bfloat16 --kv-cache-dtype auto``,
``fp8kv`` sets ``--kv-cache-dtype fp8_e4m3`` (plus ``--quantization-param-path`` when KV scales
are given), ``fp8`` adds ``--quantization fp8`` unless the checkpoint is already quantized, and
``int4`` needs an INT4 checkpoint whose method SGLang reads from its config.json. Everything
else comes from the ``[sglang]`` section (``SGLangConfig``) and is therefore equal on both arms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from evalgate.config import SGLangConfig
from evalgate.engines._gpu import GPUEngine
from evalgate.engines._launcher import ServerHandle, launch_server, server_command
from evalgate.engines.sglang import _diagnose
from evalgate.engines.sglang._capacity import sglang_capacity
from evalgate.engines.sglang._scorer import SGLangScorer
from evalgate.engines.sglang._server_info import fetch_server_info
from evalgate.variants import LaunchSpec, Variant

__all__ = ["KV_DTYPES", "QUANT_KEYS", "SGLangEngine"]

# What may differ between the arms: the weights checkpoint, quantization and its scales, and
# the kernels that run it. CUDA_VISIBLE_DEVICES is placement, not a setting of the computation:
# evalgate assigns GPUs at launch ([sglang] gpus), outside the LaunchSpec, and a user who
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


class SGLangEngine(GPUEngine):
    name = "sglang"
    label = "SGLang"
    kv_dtypes = KV_DTYPES
    quant_keys = QUANT_KEYS
    model_setting = "[sglang] model_path in evalgate.toml"
    bf16_fix = "point model_path at the unquantized BF16 checkpoint"
    int4_mismatch = "{model} is quantized with {method!r} at {bits} bits, not INT4"
    config: SGLangConfig

    def __init__(self, config: SGLangConfig | None = None) -> None:
        super().__init__(config or SGLangConfig())

    @property
    def default_model(self) -> str | None:
        return self.config.model_path

    @property
    def tp_size(self) -> int:
        return self.config.tp_size

    # -- variant -> flags --------------------------------------------------------------------
    def _settings_args(self, variant: Variant) -> dict[str, str | None]:
        s = self.config
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
        c = self.config
        head = [*(c.launch_command or (c.python, "-m", "sglang.launch_server")), "--model-path", spec.model]
        return server_command(head, spec, port=port, api_key=api_key)

    @contextlib.contextmanager
    def launch(
        self, spec: LaunchSpec, *, name: str, log_dir: Path, port: int | None = None
    ) -> Iterator[ServerHandle]:
        env = self.arm_env(spec, name)
        with launch_server(
            self,
            lambda port, key: self.command(spec, port=port, api_key=key),
            name=name,
            log_dir=log_dir,
            port=port,
            ready=_generates,
            env=env,
            timeout_s=self.config.ready_timeout_s,
        ) as handle:
            handle.info.update(fetch_server_info(handle.base_url, handle.api_key))
            handle.info["cuda_visible_devices"] = env.get("CUDA_VISIBLE_DEVICES")
            yield handle

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> SGLangScorer:
        return SGLangScorer(handle, concurrency=self.config.concurrency, seed=seed)

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        """The pool ``/server_info`` reported at launch, else the scheduler's log lines."""
        found = handle.info.get("capacity")
        return dict(found) if isinstance(found, dict) else sglang_capacity(_read(handle.log_path))

    def diagnose(self, log: str) -> str | None:
        return _diagnose.diagnose(log)


def _generates(base_url: str, api_key: str) -> bool:
    """/health_generate runs a one-token generation: ready means the scheduler answers."""
    try:
        headers = {"Authorization": f"Bearer {api_key}"}
        return httpx.get(f"{base_url}/health_generate", headers=headers, timeout=30.0).status_code == 200
    except httpx.HTTPError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
