"""What tests/helpers/sglang_shim.py takes from SGLang 0.5.23 itself, so it cannot drift from it.

Requests are validated with SGLang's own models (imported from the no-deps install that
``evalgate setup --parsers`` makes, ``parser_dir()``): ``ChatCompletionRequest``,
``CompletionRequest``, ``TokenizeRequest`` and ``DetokenizeRequest`` from
``sglang/srt/entrypoints/openai/protocol.py`` and ``/generate``'s contract check
``generate_contract_error`` (``sglang/srt/entrypoints/api_contract.py``, the one
``http_server.generate_request`` runs). The rest are SGLang's behaviours, each next to the source
line it copies: the error shapes, the sampling defaults, the trailing assistant message, the auth
rule, and the startup log lines evalgate reads.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SGLang",
    "error_body",
    "handle_last_assistant_message",
    "kv_scales_log",
    "load_sglang",
    "sampling_params",
    "sglang_settings",
    "startup",
    "startup_log",
]


@dataclass(frozen=True)
class SGLang:
    """SGLang's request models and /generate contract check."""

    chat: Any
    completion: Any
    tokenize: Any
    detokenize: Any
    generate_contract_error: Any
    validation_error: type[Exception]


def sglang_path() -> str | None:
    """Where SGLang imports from: EVALGATE_SGLANG_PARSER_PATH, else evalgate's parser install."""
    if os.environ.get("EVALGATE_SGLANG_PARSER_PATH"):
        return os.environ["EVALGATE_SGLANG_PARSER_PATH"]
    from evalgate.engines.sglang import parser_dir

    return str(parser_dir()) if (parser_dir() / "sglang").is_dir() else None


def load_sglang(path: str | None) -> SGLang:
    """Import SGLang's request models from ``path`` (ImportError when they do not import)."""
    if path:
        sys.path.insert(0, path)
    from pydantic import ValidationError
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.entrypoints.openai.protocol import (
        ChatCompletionRequest,
        CompletionRequest,
        DetokenizeRequest,
        TokenizeRequest,
    )

    return SGLang(
        ChatCompletionRequest,
        CompletionRequest,
        TokenizeRequest,
        DetokenizeRequest,
        generate_contract_error,
        ValidationError,
    )


def error_body(message: str, *, status: int = 400, type_: str = "Bad Request") -> dict[str, Any]:
    """SGLang's ``ErrorResponse`` (http_server.py ``validation_exception_handler``: a request that
    fails its model is 400, never FastAPI's 422; serving_base.py ``create_error_response``)."""
    return {"object": "error", "message": message, "type": type_, "param": None, "code": status}


def validation_message(exc: Any) -> str:
    """http_server.py: ``message = f"{exc_str} {errors_str}"`` when they differ."""
    exc_str, errors_str = str(exc), str(exc.errors())
    return f"{exc_str} {errors_str}" if errors_str and errors_str != exc_str else exc_str


# protocol.py ChatCompletionRequest._DEFAULT_SAMPLING_PARAMS
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


def generation_config(model_path: str | None, sampling_defaults: str) -> dict[str, Any]:
    """configs/model_config.py ``get_default_sampling_params``: {} unless sampling_defaults is
    "model" (SGLang's default), else those five keys of the checkpoint's generation_config.json."""
    if sampling_defaults != "model" or not model_path:
        return {}
    path = Path(model_path) / "generation_config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {p: config[p] for p in OPENAI_DEFAULTS if config.get(p) is not None}


def sampling_params(request: Any, model_config: dict[str, Any]) -> dict[str, Any]:
    """protocol.py ``to_sampling_params``: "Priority: user value > model generation_config >
    OpenAI defaults", for the five parameters it names."""
    out = {}
    for name, default in OPENAI_DEFAULTS.items():
        value = getattr(request, name)
        out[name] = model_config.get(name, default) if value is None else value
    return out


def handle_last_assistant_message(
    messages: list[dict[str, Any]], continue_final_message: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """serving_chat.py ``_handle_last_assistant_message``: a trailing assistant message (string
    content) becomes the prefix to continue with ``continue_final_message``, else a *user* message."""
    if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
        if continue_final_message:
            return messages[:-1], str(messages[-1]["content"])
        return [*messages[:-1], {"role": "user", "content": messages[-1]["content"]}], None
    return messages, None


# -- the startup log lines evalgate reads ---------------------------------------------------------
def _stamp() -> str:
    # sglang/srt/utils/common.py configure_logger: "[%(asctime)s{prefix}] %(message)s", prefix " TP0"
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] "


def kv_torch_dtype(settings: dict[str, Any], checkpoint: dict[str, Any]) -> str:
    """mem_cache/kv_cache_dtype.py ``configure_kv_cache_dtype``: "auto" is FP8 when the checkpoint's
    quant config says ``kv_cache_quant_algo: FP8``, else the model dtype."""
    kv = str(settings.get("kv_cache_dtype") or "auto")
    if kv == "auto":
        algo = (checkpoint.get("quantization_config") or {}).get("kv_cache_quant_algo")
        if isinstance(algo, str) and algo.upper() == "FP8":
            return "torch.float8_e4m3fn"
        dtype = str(settings.get("dtype") or "auto")
        return {"float16": "torch.float16", "half": "torch.float16", "float32": "torch.float32"}.get(
            dtype, "torch.bfloat16"
        )
    return {"fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}.get(kv, "torch.bfloat16")


def kv_scales_log(settings: dict[str, Any], checkpoint: dict[str, Any], dtype: str) -> list[str]:
    """load_model_utils.py ``load_kv_cache_scales`` and weight_utils.py ``kv_cache_scales_loader``,
    for an FP8 E4M3 cache. A file that fails SGLang's schema is logged and replaced by 1.0, and the
    "Loaded" line follows anyway, exactly as SGLang does."""
    if dtype != "torch.float8_e4m3fn":
        return []
    path = settings.get("quantization_param_path")
    if not path:
        # logger.warning("Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0.")
        return [
            _stamp()
            + "Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0."
        ]
    lines = []
    problem = _scales_problem(str(path), checkpoint, int(settings.get("tp_size") or 1))
    if problem:
        # logger.error("An error occurred while reading '%s'.", filename)  (or not found / not JSON)
        lines.append(_stamp() + problem)
        # logger.warning("Defaulting to KV cache scaling factors = 1.0 for all layers in TP rank %d as an error occurred during loading.", tp_rank)
        lines.append(
            _stamp() + "Defaulting to KV cache scaling factors = 1.0 for all layers in TP rank 0 as an "
            "error occurred during loading."
        )
    # logger.info("Loaded KV cache scaling factors from %s", get_model().quantization_param_path)
    lines.append(_stamp() + f"Loaded KV cache scaling factors from {path}")
    return lines


def _scales_problem(path: str, checkpoint: dict[str, Any], tp_size: int) -> str | None:
    """weight_utils.py QuantParamSchema/KVCacheQuantSchema checks: dtype float8_e4m3fn, one map per
    TP rank, every layer, the checkpoint's model_type; the log line SGLang writes when one fails."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return f"File or directory '{path}' not found."
    except ValueError:
        return f"Error decoding JSON in file '{path}'."
    try:
        kv = raw["kv_cache"]
        ranks = {int(r): {int(k): float(v) for k, v in m.items()} for r, m in kv["scaling_factor"].items()}
        layers = int(checkpoint.get("num_hidden_layers") or len(ranks[0]))
        assert kv["dtype"] == "float8_e4m3fn"
        assert raw.get("model_type") == checkpoint.get("model_type", raw.get("model_type"))
        assert sorted(ranks) == list(range(tp_size))
        assert all(sorted(m) == list(range(layers)) for m in ranks.values())
        assert all(math.isfinite(v) for m in ranks.values() for v in m.values())
    except (AssertionError, KeyError, TypeError, ValueError, AttributeError):
        return f"An error occurred while reading '{path}'."
    return None


def startup_log(
    settings: dict[str, Any], checkpoint: dict[str, Any], *, tokens: int, context: int
) -> list[str]:
    """The lines SGLang 0.5.23 logs while it starts that evalgate reads, from their format strings."""
    dtype = kv_torch_dtype(settings, checkpoint)
    layers = int(checkpoint.get("num_hidden_layers") or 0)
    heads = int(checkpoint.get("num_key_value_heads") or checkpoint.get("num_attention_heads") or 0)
    head_dim = int(checkpoint.get("head_dim") or 0) or (
        int(checkpoint.get("hidden_size") or 0) // max(1, int(checkpoint.get("num_attention_heads") or 1))
    )
    width = 1 if "float8" in dtype else (4 if "float32" in dtype else 2)
    size_gb = tokens * layers * heads * head_dim * width / (1 << 30)
    lines = kv_scales_log(settings, checkpoint, dtype)
    # mem_cache/memory_pool.py _finalize_allocation_log:
    # f"{cache_name} {'VA upper bound' if self.post_capture_active else 'is allocated'}. dtype: {self.dtype}, "
    # f"#tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, " f"V size: {v_size_GB:.2f} GB"
    lines.append(
        _stamp() + f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {size_gb:.2f} GB, "
        f"V size: {size_gb:.2f} GB"
    )
    # managers/scheduler.py: f"max_total_num_tokens={self.max_total_num_tokens}, "
    # f"chunked_prefill_size=..., max_prefill_tokens=..., max_running_requests=..., context_len=..., available_gpu_mem=... GB"
    lines.append(
        _stamp() + f"max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={max(1, tokens // max(1, context))}, context_len={context}, available_gpu_mem=0.00 GB"
    )
    return lines


def memory_usage(settings: dict[str, Any], checkpoint: dict[str, Any], *, tokens: int) -> dict[str, Any]:
    """managers/scheduler_components/memory_usage.py ``build_memory_usage``'s keys."""
    line = next(x for x in startup_log(settings, checkpoint, tokens=tokens, context=1) if "K size" in x)
    k_gb = float(line.split("K size: ")[1].split(" GB")[0])
    return {
        "weight": 0.0,
        "kvcache": round(2 * k_gb, 3),
        "startup_available": 0.0,
        "token_capacity": tokens,
        "token_capacity_swa": None,
        "graph": {},
    }


def sglang_settings(extra: list[str], model_path: str | None) -> dict[str, Any]:
    """SGLang-style flags as /server_info names them (``--kv-cache-dtype X`` -> kv_cache_dtype)."""
    out: dict[str, Any] = {"model_path": model_path}
    i = 0
    while i < len(extra):
        if extra[i].startswith("--"):
            key = extra[i][2:].replace("-", "_")
            if i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                out[key] = extra[i + 1]
                i += 2
                continue
            out[key] = True
        i += 1
    return out


def startup(upstream: str, key: str | None, settings: dict[str, Any]) -> dict[str, Any]:
    """What SGLang would have measured by the time it serves: the pool (llama-server's slots) and
    the checkpoint's config; its startup log lines go to stdout, which is the server's log."""
    import httpx

    t0 = time.monotonic()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    props = httpx.get(upstream.rstrip("/") + "/props", headers=headers, timeout=30).json()
    context = int((props.get("default_generation_settings") or {}).get("n_ctx", 0))
    tokens = context * int(props.get("total_slots", 1))
    try:
        checkpoint = json.loads((Path(settings.get("model_path") or "") / "config.json").read_text())
    except (OSError, ValueError):
        checkpoint = {}
    for line in startup_log(settings, checkpoint, tokens=tokens, context=context):
        print(line, flush=True)
    return {
        "tokens": tokens,
        "context": context,
        "checkpoint": checkpoint,
        "build": str(props.get("build_info", "?")),
        "startup_s": round(time.monotonic() - t0, 3),
    }
