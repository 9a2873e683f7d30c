"""Reading SGLang's own words: a failure log into one line that names the cause and the fix.

The log patterns are SGLang's real messages (see tests/fixtures/sglang_logs for where each was
seen). Specific causes are tried before the generic "scheduler died", because a scheduler that
died of an out-of-memory error logs both.
"""

from __future__ import annotations

import re

from evalgate.engines._logs import Rule, diagnose_log

__all__ = ["RULES", "TESTED_VERSION", "diagnose"]

_SETTINGS = "evalgate.toml [sglang]"
TESTED_VERSION = "0.5.23"
"""The SGLang whose parser and API contract tests/engines/test_sglang_parser.py checks against."""


def _last_exception(log: str) -> str:
    """The last ``SomeError: message`` line of a traceback, shortened; '' when there is none."""
    found = re.findall(r"^(?:\S+\.)?(\w*(?:Error|Exception)): (.+)$", log, re.MULTILINE)
    if not found:
        return ""
    name, message = found[-1]
    return f" ({name}: {message.strip()[:160]})"


RULES: tuple[Rule, ...] = (
    Rule(
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        lambda m, log: (
            "the weights left no GPU memory for SGLang's KV cache: raise mem_fraction_static "
            f"(e.g. 0.9) in {_SETTINGS}, lower context_length, or spread the model over more GPUs (tp_size)"
        ),
    ),
    Rule(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory",
        lambda m, log: (
            "the GPU ran out of memory: lower mem_fraction_static (e.g. 0.8) in "
            f"{_SETTINGS} so activations and CUDA graphs fit beside the KV cache, or lower context_length "
            "(or add --cuda-graph-max-bs 16 to the variant args)"
        ),
    ),
    Rule(
        r"The quantization method (\S+) is not supported for the current GPU\. "
        r"Minimum capability: (\d+)\. Current capability: (\d+)",
        lambda m, log: (
            f"this GPU (compute capability {int(m[3]) / 10:.1f}) cannot run {m[1]} "
            f"(needs {int(m[2]) / 10:.1f}): run this variant on a newer GPU, or compare a variant it supports"
        ),
    ),
    Rule(
        r"fp8e4nv not supported in this architecture|fp8e4nv data type is not supported on CUDA arch",
        lambda m, log: (
            "this GPU has no FP8 (e4m3) support, which needs compute capability 8.9 or "
            "newer (Ada, Hopper, Blackwell): run fp8/fp8kv variants there, or compare bf16 against int4"
        ),
    ),
    Rule(
        r"error: argument (--[\w-]+): invalid choice: '([^']*)'",
        lambda m, log: (
            f"this SGLang does not accept {m[1]} {m[2]}: use one of the values the log lists "
            "after 'choose from' (they change between SGLang versions), or install SGLang "
            f"{TESTED_VERSION}, the version evalgate's flags are checked against"
        ),
    ),
    Rule(
        # sglang/srt/model_loader/loader.py: the activation dtype a quant method's kernels accept
        r"(torch\.\w+) is not supported for quantization method (\w+)\. Supported dtypes: (\[[^\]]*\])",
        lambda m, log: (
            f"SGLang's {m[2]} kernels take {m[3]} activations, not {m[1]} (plain AWQ/GPTQ run in float16; "
            f"their Marlin kernels also take bfloat16): give that variant args = {{'--dtype' = 'float16'}} in "
            f"evalgate.toml, or let SGLang pick the Marlin kernel (drop a forced --quantization {m[2]})"
        ),
    ),
    Rule(
        r"error: unrecognized arguments: .*(--enable-deterministic-inference|--sampling-defaults)",
        lambda m, log: (
            f"this SGLang predates {m[1]}, which evalgate passes on both arms "
            + (
                "for --deterministic: drop --deterministic, or upgrade SGLang"
                if "determin" in m[1]
                else "so no checkpoint's generation_config.json sets one arm's sampling: upgrade SGLang"
            )
            + f" ({TESTED_VERSION} has it)"
        ),
    ),
    Rule(
        # sglang/srt/arg_groups/overrides.py, _deterministic_attention_backend (also the MLA check)
        r"Currently only (\[[^\]]*\]) attention backends are supported for deterministic inference",
        lambda m, log: (
            f"SGLang runs --deterministic only on the attention backends {m[1]}: pass one of them as "
            "--attention-backend on both arms (variant args), or drop --deterministic"
        ),
    ),
    Rule(
        r"error: unrecognized arguments: (.+)",
        lambda m, log: (
            f"this SGLang does not know {m[1].strip()}: remove or rename it in the variant args "
            "(flags use dashes, e.g. --reasoning-parser), or check `python -m sglang.launch_server --help`"
        ),
    ),
    Rule(
        r"[Aa]ddress already in use|at \d+ is not available in \d+ seconds|is used by a process already",
        lambda m, log: (
            "a port SGLang needs is in use (it also opens internal ports near --port): omit "
            "--port so evalgate picks a free one, or stop the other server"
        ),
    ),
    Rule(
        r"scheduler died during initialization \(exit code: -9\)|scheduler is dead[^\n]*\n[^\n]*Exit code: -9",
        lambda m, log: (
            "an SGLang scheduler was killed (exit code -9), usually by the operating system's "
            "out-of-memory killer: check `dmesg -T | grep -i oom`, and give the host more RAM"
        ),
    ),
    Rule(
        r"Scheduler hit an exception|Received sigquit from a child proces|scheduler (?:died|is dead)",
        lambda m, log: (
            f"an SGLang scheduler process died{_last_exception(log)}: read its traceback "
            "in the log; the command is quoted so you can rerun it by hand"
        ),
    ),
)


def diagnose(log: str) -> str | None:
    """One-line cause and fix for an SGLang failure seen in its log, or None."""
    return diagnose_log(RULES, log)
