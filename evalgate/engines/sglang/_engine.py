"""SGLang (``python -m sglang.launch_server``): the GPU engine (docs/engines.md: the variant table).

Variants become flags as the table says: ``bf16`` is ``--dtype bfloat16 --kv-cache-dtype bfloat16``,
``fp8kv`` sets ``--kv-cache-dtype fp8_e4m3`` (plus ``--quantization-param-path`` when KV scales
are given, checked before launch), ``fp8`` adds ``--quantization fp8`` unless the checkpoint is
already quantized, and ``int4`` needs an INT4 checkpoint whose method SGLang reads from its
config.json. Everything else comes from the ``[sglang]`` section (``SGLangConfig``) and is
therefore equal on both arms.

Pinned on both arms, because SGLang 0.5.23's defaults would let one checkpoint change its arm:

- ``--kv-cache-dtype bfloat16``, never ``auto``: with ``auto`` a checkpoint whose quant config
  carries ``kv_cache_quant_algo: FP8`` (ModelOpt, or a compressed-tensors ``kv_cache_scheme``)
  gets an FP8 cache while ``/server_info`` still says ``auto``
  (``sglang/srt/mem_cache/kv_cache_dtype.py``, ``configure_kv_cache_dtype``).
- ``--sampling-defaults openai``: the default, ``model``, fills temperature, top_p, top_k, min_p
  and repetition_penalty a chat request leaves out from each checkpoint's generation_config.json
  (``configs/model_config.py``, ``get_default_sampling_params``), so an INT4 repo with another
  file would sample differently on one arm only.
- ``--enable-deterministic-inference`` with ``[sglang] deterministic`` (``--deterministic``):
  batch-invariant kernels, on the attention backends SGLang supports for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx

from evalgate.config import SGLangConfig
from evalgate.engines._gpu import GPUEngine, fp16_only_method
from evalgate.engines._kv_scales import kv_scales_used, validate_kv_scales
from evalgate.engines._launcher import LaunchSlot, ServerHandle, launch_server, server_command
from evalgate.engines._logs import lines_from
from evalgate.engines.pressure import sglang_pressure
from evalgate.engines.sglang import _diagnose
from evalgate.engines.sglang._capacity import sglang_capacity
from evalgate.engines.sglang._provenance import sglang_provenance
from evalgate.engines.sglang._scorer import SGLangScorer
from evalgate.engines.sglang._server_info import fetch_server_info, get_server_info
from evalgate.errors import ConfigError
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec, Variant

__all__ = ["DETERMINISTIC_BACKENDS", "KV_DTYPES", "QUANT_KEYS", "SGLangEngine"]

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
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}
DETERMINISTIC_BACKENDS = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")
"""Attention backends SGLang 0.5.23 runs batch-invariant (``DETERMINISTIC_ATTENTION_BACKEND_CHOICES``,
``sglang/srt/arg_groups/choices.py``); unset lets SGLang pick one of them."""


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
            "--sampling-defaults": "openai",
        }
        if s.mem_fraction_static is not None:
            args["--mem-fraction-static"] = str(s.mem_fraction_static)
        for flag, value in (
            ("--context-length", s.context_length),
            ("--max-total-tokens", s.max_total_tokens),
            ("--schedule-conservativeness", s.schedule_conservativeness),
            ("--tool-call-parser", s.tool_call_parser),
            ("--reasoning-parser", s.reasoning_parser),
            ("--chat-template", s.chat_template),
        ):
            if value is not None:
                args[flag] = str(value)
        if s.deterministic:
            args["--enable-deterministic-inference"] = None
        if variant.kv == "fp8" and s.kv_scales_path:
            args["--quantization-param-path"] = s.kv_scales_path
        return args

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        """GPUEngine's spec, then what depends on the whole spec: fp16 for AWQ/GPTQ kernels that
        take nothing else, the scale file checked, the deterministic backend checked."""
        spec = super().launch_spec(variant)
        args = dict(spec.args)
        keys = spec.quant_keys
        method = fp16_only_method(args.get("--quantization"))
        if method and "--dtype" not in dict(variant.args):
            # awq / gptq without Marlin accept float16 activations only (get_supported_act_dtypes in
            # sglang/srt/layers/quantization/awq/awq.py and gptq/gptq.py); "auto" KV is then fp16
            args["--dtype"] = "float16"
            if variant.kv == "bf16":
                args["--kv-cache-dtype"] = "auto"  # SGLang has no float16 choice; auto is the model's
            keys = keys | {"--dtype"}
        scales = args.get("--quantization-param-path")
        if scales and args.get("--kv-cache-dtype") == "fp8_e4m3":
            validate_kv_scales(scales, model=spec.model, tp_size=int(args.get("--tp-size") or 1))
        backend = args.get("--attention-backend")
        if "--enable-deterministic-inference" in args and backend and backend not in DETERMINISTIC_BACKENDS:
            raise ConfigError(
                f"--deterministic: SGLang has no batch-invariant kernels for --attention-backend {backend}",
                fix=f"use one of {', '.join(DETERMINISTIC_BACKENDS)} (or leave it unset), or drop --deterministic",
            )
        return LaunchSpec(spec.engine, spec.model, tuple(args.items()), spec.env, keys)

    def slot_context(self, spec: LaunchSpec) -> int | None:
        """``--context-length`` when set ([sglang] context_length); else the model's own length, known only once it runs."""
        value = dict(spec.args).get("--context-length")
        return int(value) if value and str(value).isdigit() else None

    def plan_notes(self, spec: LaunchSpec) -> list[str]:
        args = dict(spec.args)
        notes = super().plan_notes(spec)
        notes.append(
            f"--sampling-defaults {args.get('--sampling-defaults')}: no checkpoint's generation_config.json "
            "sets a chat's temperature, top_p, top_k, min_p or repetition_penalty"
        )
        if "--enable-deterministic-inference" in args:
            notes.append("--enable-deterministic-inference: batch-invariant kernels (--deterministic)")
        return notes

    def scales_note(self, spec: LaunchSpec) -> str:
        args = dict(spec.args)
        path = args.get("--quantization-param-path")
        if not path:
            return (
                "KV scales: none given ([sglang] kv_scales_path): SGLang uses 1.0 on every layer; the scale "
                "used is read back from the log at launch and recorded"
            )
        found = validate_kv_scales(path, model=spec.model, tp_size=int(args.get("--tp-size") or 1))
        return (
            f"KV scales: --quantization-param-path {path} (checked: {found['layers']} layers, "
            f"{found['min']:.4g}..{found['max']:.4g}); the scale used is read back from the log at launch"
        )

    # -- launching ---------------------------------------------------------------------------
    def command(self, spec: LaunchSpec, *, port: int, api_key: str) -> list[str]:
        """The exact launch command for ``spec``; a fresh list every call."""
        c = self.config
        head = [*(c.launch_command or (c.python, "-m", "sglang.launch_server")), "--model-path", spec.model]
        return server_command(head, spec, port=port, api_key=api_key)

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[ServerHandle]:
        """One SGLang server; as ``slot.worker`` of an arm behind a gateway, under the arm's key, on its
        share of the arm's GPUs, with a log of its own."""
        env = self.arm_env(spec, slot.name, slot.worker)
        with launch_server(
            self,
            lambda port, key: self.command(spec, port=port, api_key=key),
            slot,
            ready=_generates,
            env=env,
            timeout_s=self.config.ready_timeout_s,
        ) as handle:
            handle.info.update(fetch_server_info(handle.base_url, handle.api_key))
            handle.info["cuda_visible_devices"] = env.get("CUDA_VISIBLE_DEVICES")
            log = handle.own_log()
            args = dict(spec.args)
            if args.get("--kv-cache-dtype") == "fp8_e4m3":
                handle.info["kv_scales"] = kv_scales_used(log, file=args.get("--quantization-param-path"))
            found = sglang_capacity(log)
            if found and found.get("kv_types") and isinstance(handle.info.get("capacity"), dict):
                handle.info["capacity"]["kv_types"] = found["kv_types"]  # the dtype the pool really has
            yield handle

    def provenance(self, handle: ServerHandle) -> Provenance:
        raw, _ = get_server_info(handle.base_url, handle.api_key)
        scales = handle.info.get("kv_scales")
        return sglang_provenance(
            raw or {}, handle.own_log(), kv_scales=scales if isinstance(scales, dict) else None
        )

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> SGLangScorer:
        return SGLangScorer(handle, concurrency=self.config.concurrency, seed=seed)

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        """The pool ``/server_info`` reported at launch, else the scheduler's log lines."""
        found = handle.info.get("capacity")
        return dict(found) if isinstance(found, dict) else sglang_capacity(handle.own_log())

    def diagnose(self, log: str) -> str | None:
        return _diagnose.diagnose(log)

    def pressure(self, handle: ServerHandle) -> dict[str, Any] | None:
        return sglang_pressure(lines_from(handle.log_path, handle.log_start)).to_dict()


def _generates(base_url: str, api_key: str) -> bool:
    """/health_generate runs a one-token generation: ready means the scheduler answers."""
    try:
        headers = {"Authorization": f"Bearer {api_key}"}
        return httpx.get(f"{base_url}/health_generate", headers=headers, timeout=30.0).status_code == 200
    except httpx.HTTPError:
        return False
