"""vLLM (``vllm serve``): a GPU engine (docs/engines.md: the variant table).

Variants become flags: ``bf16`` is ``--dtype bfloat16 --kv-cache-dtype bfloat16`` (never ``auto``,
which a ModelOpt checkpoint's ``kv_cache_quant_algo`` turns into FP8), ``fp8kv`` sets
``--kv-cache-dtype fp8_e4m3`` (KV scales from the checkpoint, which ``[vllm] kv_scales_path`` can
make a calibrated copy of the model, else 1.0; the scale used is read back at launch:
``_kv_scales``), ``fp8`` adds ``--quantization fp8`` unless the checkpoint
is already quantized (vLLM refuses a --quantization that disagrees with config.json), and ``int4``
needs an INT4 checkpoint whose method vLLM reads from its config.json. Everything else comes from
the ``[vllm]`` section (``VLLMConfig``) and is therefore equal on both arms; ``--generation-config vllm`` keeps each
checkpoint's generation_config.json (e.g. a repetition penalty) out of the sampling defaults.
``[vllm] deterministic`` (``--deterministic``) sets ``VLLM_BATCH_INVARIANT=1`` on both arms:
batch-invariant kernels, so a prompt's logprobs do not depend on what else is batched with it.

Readiness is ``/health``, then ``/v1/models`` with the key (it names the served model); the
server's ``/version`` and the KV pool from its log ("GPU KV cache size: N tokens", "Maximum
concurrency for L tokens per request: Xx", ``_capacity``) go into the arm's info.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from evalgate.config import VLLMConfig
from evalgate.engines._gpu import GPUEngine, fp16_only_method
from evalgate.engines._launcher import LaunchSlot, ServerHandle, launch_server, server_command
from evalgate.engines._logs import lines_from
from evalgate.engines.pressure import vllm_pressure
from evalgate.engines.vllm import _diagnose
from evalgate.engines.vllm._capacity import vllm_capacity
from evalgate.engines.vllm._kv_scales import kv_scales_used, read_kv_scales, validate_kv_checkpoint
from evalgate.engines.vllm._provenance import vllm_provenance
from evalgate.engines.vllm._scorer import VLLMScorer
from evalgate.errors import ConfigError, ServerStartError
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec, Variant

__all__ = ["KV_DTYPES", "QUANT_KEYS", "VLLMEngine", "wait_for_group_exit"]

# What may differ between the arms: the weights checkpoint, quantization, and the kernels that
# run it. VLLM_ATTENTION_BACKEND is the attention-kernel choice of vLLM before --attention-backend
# (it is gone in 0.33): a kernel setting, like the flag. CUDA_VISIBLE_DEVICES is placement, not
# computation: evalgate sets it at launch ([vllm] gpus), outside the LaunchSpec, and a user
# may set it in a variant's env too. The devices each arm used are recorded in its info.
QUANT_KEYS = frozenset(
    {
        "model",
        "--quantization",
        "-q",
        "--quantization-config",
        "--kv-cache-dtype",
        "--kv-cache-dtype-skip-layers",
        "--calculate-kv-scales",
        "--attention-backend",
        "--moe-backend",
        "--linear-backend",
        "--kernel-config",
        "env:VLLM_ATTENTION_BACKEND",
        "env:CUDA_VISIBLE_DEVICES",
    }
)
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}  # explicit: "auto" may be a checkpoint's FP8
BATCH_INVARIANT_BACKENDS = ("FLASH_ATTN", "FLEX_ATTENTION", "TRITON_ATTN", "FLASH_ATTN_MLA", "TRITON_MLA")
"""The attention backends whose ``supports_batch_invariance()`` is true in vLLM 0.33.0 and 0.34.0
(``vllm/v1/attention/backends/``; 0.34's one more, SHORT_CONV, is a Mamba backend, not one
``--attention-backend`` picks); with another, ``validate_configuration`` refuses the backend
("batch invariance not supported"). On SM80 vLLM swaps in Triton matmuls, on SM90+ it turns off
split-k (``model_executor/determinism/batch_invariant.py``)."""
_SETTINGS = "evalgate.toml [vllm]"


class VLLMEngine(GPUEngine):
    name = "vllm"
    label = "vLLM"
    kv_dtypes = KV_DTYPES
    quant_keys = QUANT_KEYS
    model_setting = f"model in {_SETTINGS}"
    bf16_fix = f"point model in {_SETTINGS} at the unquantized BF16 checkpoint"
    int4_mismatch = "{model} is quantized with {quant_method!r}, not a 4-bit weight method"
    tool_parser_flags = ("--enable-auto-tool-choice", "--tool-call-parser")
    config: VLLMConfig

    def __init__(self, config: VLLMConfig | None = None) -> None:
        super().__init__(config or VLLMConfig())

    @property
    def default_model(self) -> str | None:
        return self.config.model

    @property
    def tp_size(self) -> int:
        return self.config.tensor_parallel_size

    # -- variant -> flags --------------------------------------------------------------------
    def _settings_args(self, variant: Variant) -> dict[str, str | None]:
        s = self.config
        args: dict[str, str | None] = {
            "--dtype": s.dtype,
            "--tensor-parallel-size": str(s.tensor_parallel_size),
            "--seed": str(s.seed),
            "--generation-config": s.generation_config,
            "--disable-uvicorn-access-log": None,  # one line per request would bury the startup log
        }
        if s.enforce_eager:  # the CPU engine turns it on when unset (_cpu.py)
            args["--enforce-eager"] = None
        if KV_DTYPES[variant.kv]:
            args["--kv-cache-dtype"] = KV_DTYPES[variant.kv]
        for flag, value in (
            ("--gpu-memory-utilization", s.gpu_memory_utilization),
            ("--max-model-len", s.max_model_len),
            ("--num-gpu-blocks-override", s.num_gpu_blocks_override),
            ("--reasoning-parser", s.reasoning_parser),
            ("--chat-template", s.chat_template),
        ):
            if value is not None:
                args[flag] = str(value)
        if s.tool_call_parser:
            args["--enable-auto-tool-choice"] = None
            args["--tool-call-parser"] = s.tool_call_parser
        return args

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        """GPUEngine's spec, then fp16 for AWQ/GPTQ kernels that take nothing else, and the
        batch-invariant switch (an environment variable, so it is compared like the flags)."""
        spec = super().launch_spec(variant)
        args, env, keys = dict(spec.args), dict(spec.env), spec.quant_keys
        if fp16_only_method(args.get("--quantization") or args.get("-q")) and "--dtype" not in dict(
            variant.args
        ):
            # vLLM's awq and gptq kernels: get_supported_act_dtypes() == [torch.half]
            args["--dtype"] = "float16"
            if variant.kv == "bf16":
                args["--kv-cache-dtype"] = "float16"
            keys = keys | {"--dtype"}
        if self.config.deterministic:
            env.setdefault("VLLM_BATCH_INVARIANT", "1")
        if env.get("VLLM_BATCH_INVARIANT") == "1":
            backend = args.get("--attention-backend") or env.get("VLLM_ATTENTION_BACKEND")
            if backend and backend.upper() not in BATCH_INVARIANT_BACKENDS:
                raise ConfigError(
                    f"--deterministic: vLLM's attention backend {backend} has no batch-invariant mode, so "
                    "vLLM would refuse to start",
                    fix=f"use one of {', '.join(BATCH_INVARIANT_BACKENDS)} (or leave it unset), or drop --deterministic",
                )
        model = spec.model
        if variant.kv == "fp8" and self.config.kv_scales_path:
            # the same weights plus the calibrated scales: vLLM reads KV scales from the checkpoint only
            validate_kv_checkpoint(self.config.kv_scales_path, model=model)
            model = str(Path(self.config.kv_scales_path).expanduser())
        return LaunchSpec(spec.engine, model, tuple(args.items()), tuple(sorted(env.items())), keys)

    def scales_note(self, spec: LaunchSpec) -> str:
        if not self.config.kv_scales_path:
            return (
                f"KV scales: none given (kv_scales_path in {_SETTINGS}): vLLM runs every layer at 1.0 unless "
                "the checkpoint carries scales (the scale used is read back at launch)"
            )
        found = read_kv_scales(Path(spec.model))
        k, v = found["k"].values(), found["v"].values()
        return (
            f"KV scales: the checkpoint copy {spec.model} ({len(k)} layers; k {min(k):.4g}..{max(k):.4g}, "
            f"v {min(v):.4g}..{max(v):.4g}; checked before launch, read back at launch)"
        )

    # -- launching ---------------------------------------------------------------------------
    def command(self, spec: LaunchSpec, *, port: int, api_key: str) -> list[str]:
        """The exact launch command for ``spec``; a fresh list every call."""
        head = [*(self.config.launch_command or (_vllm_binary(), "serve")), spec.model]
        return server_command(head, spec, port=port, api_key=api_key)

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[ServerHandle]:
        """One vLLM server; as ``slot.worker`` of an arm behind a gateway, under the arm's key, on its
        share of the arm's GPUs, with a log of its own."""
        env = self.arm_env(spec, slot.name, slot.worker)
        gpus = env.get("CUDA_VISIBLE_DEVICES")
        tp = self.config.tensor_parallel_size
        if gpus is not None and len(gpus.split(",")) < tp:
            raise ConfigError(
                f"the {slot.name} arm gets GPUs {gpus!r}, fewer than tensor_parallel_size {tp}",
                fix=f"give each arm as many GPUs as tensor_parallel_size (gpus / arm_gpus in {_SETTINGS})",
            )
        seen: dict[str, Any] = {}
        pgid: int | None = None
        try:
            with launch_server(
                self,
                lambda port, key: self.command(spec, port=port, api_key=key),
                slot,
                ready=lambda base_url, key: _ready(base_url, key, seen),
                env=env,
                timeout_s=self.config.ready_timeout_s,
            ) as handle:
                pgid = handle.process.pid if handle.process else None  # its own group (new session)
                handle.info.update(seen)
                handle.info["vllm_version"] = _server_version(handle.base_url)
                log = handle.own_log()
                handle.info["kv_capacity"] = vllm_capacity(log)
                if (dict(spec.args).get("--kv-cache-dtype") or "").startswith("fp8"):
                    handle.info["kv_scales"] = kv_scales_used(log, model=spec.model)
                handle.info["cuda_visible_devices"] = env.get("CUDA_VISIBLE_DEVICES")
                yield handle
        finally:
            if pgid is not None:  # the next arm needs this one's GPU memory back
                wait_for_group_exit(pgid, timeout_s=60.0)

    def provenance(self, handle: ServerHandle) -> Provenance:
        scales = handle.info.get("kv_scales")
        log = handle.own_log()
        return vllm_provenance(log, kv_scales=scales if isinstance(scales, dict) else None)

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> VLLMScorer:
        return VLLMScorer(handle, concurrency=self.config.concurrency, seed=seed)

    def slot_context(self, spec: LaunchSpec) -> int | None:
        """``--max-model-len`` when set ([vllm] max_model_len); else the model's own length, known only once it runs."""
        value = dict(spec.args).get("--max-model-len")
        return int(value) if value and str(value).isdigit() else None

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        """The pool the log stated at launch (recorded in the arm's info), else the log now."""
        found = handle.info.get("kv_capacity")
        if isinstance(found, dict):
            return dict(found)
        return vllm_capacity(handle.own_log())

    def diagnose(self, log: str) -> str | None:
        return _diagnose.diagnose(log)

    def pressure(self, handle: ServerHandle) -> dict[str, Any] | None:
        return vllm_pressure(lines_from(handle.log_path, handle.log_start)).to_dict()


def wait_for_group_exit(pgid: int, *, timeout_s: float, poll_s: float = 0.2) -> bool:
    """Wait until no live process is left in group ``pgid``; False on timeout.

    The launcher kills the group, but vLLM's engine-core and worker processes hold GPU memory until
    the driver has torn their contexts down, which can take seconds after the kill. The next arm,
    on the same GPU, would otherwise start beside them and fail with "Free memory on device ..." (0.33),
    or, with 0.34's extensible KV cache, start with a pool shrunk by what they still hold.
    Zombies are skipped: they hold no memory, and a container's PID 1 may never reap them."""
    deadline = time.monotonic() + timeout_s
    while _group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``, from /proc (Linux)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out


def _vllm_binary() -> str:
    """``vllm`` on PATH, else beside this interpreter (a venv that is not activated)."""
    beside = Path(sys.executable).with_name("vllm")
    found = shutil.which("vllm") or (str(beside) if beside.is_file() else None)
    if found is None:
        raise ConfigError(
            "the vllm command is not installed",
            fix="pip install 'evalgate[vllm]' on a CUDA machine, or set launch_command in " + _SETTINGS,
        )
    return found


def _ready(base_url: str, api_key: str, seen: dict[str, Any]) -> bool:
    """``/health`` answers once the engine is up; ``/v1/models`` then proves the key and names the model."""
    try:
        if httpx.get(f"{base_url}/health", timeout=5.0).status_code != 200:
            return False
        resp = httpx.get(
            f"{base_url}/v1/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=10.0
        )
    except httpx.HTTPError:
        return False
    if resp.status_code == 401:
        raise ServerStartError(
            "the server on evalgate's port rejected evalgate's API key",
            fix="another server may hold the port; omit --port so evalgate picks a free one",
        )
    if resp.status_code != 200:
        return False
    try:
        data = (resp.json().get("data") or [{}])[0]
    except (ValueError, AttributeError):
        return False
    seen.update({"served_model": data.get("id"), "max_model_len": data.get("max_model_len")})
    return True


def _server_version(base_url: str) -> str | None:
    try:
        return str(httpx.get(f"{base_url}/version", timeout=10.0).json().get("version"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
