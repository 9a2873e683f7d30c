"""Every vLLM command evalgate builds, checked against vLLM 0.34.0's (and 0.33.0's) own argument parser
and API models.

With vLLM importable (a CPU-only ``pip install --no-deps`` of it and about thirty light modules plus
torch; see VLLM_PARSER_INSTALL), the commands are parsed by the parser ``vllm serve`` builds, and
the request bodies and the scorer test double's answers are validated with vLLM's pydantic models,
in a subprocess, so vLLM's imports stay out of this process. Without it, the flags and values are
checked against fixtures/vllm_<version>_options.txt, which that parser wrote, for each version in
OPTION_VERSIONS. vLLM checks --kv-cache-dtype and --quantization after parsing, so those are checked
against its own lists too.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from evalgate.config import VLLMConfig
from evalgate.engines.vllm import TESTED_VERSION, VLLMEngine
from evalgate.engines.vllm._scorer import loglikelihood_payload, read_continuation_logprobs
from evalgate.variants import BUILTIN_VARIANTS, Variant, parse_variant
from tests.engines.test_vllm_scorer import encode, fake_completion, fake_detokenize, fake_tokenize
from tests.helpers.child_process import run_json
from tests.helpers.options import check_flags, read_options

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = "meta-llama/Llama-3.1-8B-Instruct"


VLLM_VERSION = TESTED_VERSION
OPTION_VERSIONS = ("0.33.0", VLLM_VERSION)
"""Each has fixtures/vllm_<version>_options.txt; evalgate's commands must parse on all of them."""
VLLM_PARSER_INSTALL = (
    f"pip install --no-deps --target DIR vllm=={VLLM_VERSION} cbor2 psutil pyzmq 'transformers<5.23' "
    "safetensors tokenizers openai-harmony openai sniffio msgspec pillow pybase64 cachetools uvloop "
    "py-cpuinfo fastapi starlette annotated-doc opentelemetry-api opentelemetry-sdk "
    "opentelemetry-semantic-conventions opentelemetry-semantic-conventions-ai prometheus-client "
    "partial-json-parser xgrammar apache-tvm-ffi llguidance"
)


@pytest.fixture
def models(tmp_path: Path) -> dict[str, str]:
    """A 4-bit AWQ and an FP8 checkpoint folder, holding only the config.json the engine reads."""
    out = {}
    for name, quant in {"awq": {"quant_method": "awq", "bits": 4}, "fp8": {"quant_method": "fp8"}}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"quantization_config": quant}))
        out[name] = str(tmp_path / name)
    return out


def commands(models: dict[str, str]) -> list[list[str]]:
    """The argv after ``vllm serve`` for every variant (pre-quantized FP8 too), every setting in use."""
    eng = VLLMEngine(
        VLLMConfig(
            model=BASE,
            launch_command=("vllm", "serve"),
            tensor_parallel_size=2,
            gpu_memory_utilization=0.85,
            max_model_len=8192,
            num_gpu_blocks_override=64,
            tool_call_parser="llama3_json",
            reasoning_parser="deepseek_r1",
            chat_template="/templates/chat.jinja",
        )
    )
    out = []
    for name in (*BUILTIN_VARIANTS, "int4+fp8kv", "fp8+fp8kv"):
        v = parse_variant(name)
        model = models["awq"] if v.weights == "int4" else (models["fp8"] if name == "fp8+fp8kv" else None)
        out.append(
            eng.command(eng.launch_spec(Variant(v.name, v.weights, v.kv, model)), port=8000, api_key="k")[2:]
        )
    return out


def options_file(version: str) -> Path:
    return FIXTURES / f"vllm_{version}_options.txt"


@pytest.mark.parametrize("version", OPTION_VERSIONS)
def test_every_flag_and_value_is_in_vllms_option_list(models: dict[str, str], version: str) -> None:
    assert options_file(version).read_text().startswith(f"# vLLM {version} `vllm serve` options")
    options = read_options(options_file(version))
    for argv in commands(models):  # argv[0] is the model, vLLM's positional model_tag
        check_flags(argv, options, f"vLLM {version}", start=1)


PARSE = r"""
import json, sys
from vllm.config.cache import KV_CACHE_DTYPES
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
from vllm.utils.argparse_utils import FlexibleArgumentParser
job = json.load(sys.stdin)
out = {"parsed": [], "errors": []}
for argv in job["commands"]:
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))  # as `vllm serve` builds it
    try:
        ns = parser.parse_args(argv)
    except SystemExit:
        out["errors"].append(argv)
        continue
    row = {k: getattr(ns, k) for k in job["fields"]}
    row["kv_known"] = ns.kv_cache_dtype in KV_CACHE_DTYPES
    row["quant_known"] = ns.quantization is None or ns.quantization in QUANTIZATION_METHODS
    out["parsed"].append(row)
print(json.dumps(out, default=str))
"""
FIELDS = ["model_tag", "host", "port", "api_key", "dtype", "kv_cache_dtype", "quantization", "seed"]
FIELDS += ["tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "enable_auto_tool_choice"]
FIELDS += ["num_gpu_blocks_override"]
FIELDS += [
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "generation_config",
    "disable_uvicorn_access_log",
]


def vllm_pythonpath() -> str | None:
    """Where vLLM is importable from: EVALGATE_VLLM_PARSER_PATH, or this environment."""
    extra = os.environ.get("EVALGATE_VLLM_PARSER_PATH")
    if extra:
        return extra
    return "" if importlib.util.find_spec("vllm") is not None else None


def run_with_vllm(code: str, job: dict[str, object]) -> dict[str, object]:
    """Run ``code`` in a subprocess that imports vLLM (kept out of this process), job on stdin."""
    path = vllm_pythonpath()
    if path is None:
        pytest.skip(
            f"vLLM is not importable: {VLLM_PARSER_INSTALL}, then EVALGATE_VLLM_PARSER_PATH=DIR (needs torch, "
            "the [kernels] extra); the option-list test checks the flags without it"
        )
    return run_json(
        code, job, pythonpath=path, env={"VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu")}
    )


def test_commands_parse_with_vllms_own_parser(models: dict[str, str]) -> None:
    result = run_with_vllm(PARSE, {"commands": commands(models), "fields": FIELDS})
    assert result["errors"] == []
    parsed = result["parsed"]
    assert isinstance(parsed, list)
    seen = {(p["kv_cache_dtype"], p["quantization"], p["model_tag"]) for p in parsed}
    assert seen == {
        ("bfloat16", None, BASE),
        ("fp8_e4m3", None, BASE),
        ("bfloat16", "fp8", BASE),
        ("bfloat16", None, models["awq"]),
        ("fp8_e4m3", None, models["awq"]),
        ("fp8_e4m3", None, models["fp8"]),
    }
    for p in parsed:
        assert p["kv_known"] and p["quant_known"]
        assert (
            p["host"] == "127.0.0.1" and p["port"] == 8000 and p["api_key"] in (["k"], "k")
        )  # a list in 0.33 and 0.34
        assert p["dtype"] == "bfloat16" and p["tensor_parallel_size"] == 2 and p["seed"] == 1234
        assert p["gpu_memory_utilization"] == 0.85 and p["max_model_len"] == 8192
        assert p["num_gpu_blocks_override"] == 64
        assert p["enable_auto_tool_choice"] is True and p["tool_call_parser"] == "llama3_json"
        assert p["reasoning_parser"] == "deepseek_r1" and p["generation_config"] == "vllm"
        assert p["chat_template"] == "/templates/chat.jinja" and p["disable_uvicorn_access_log"] is True


API = r"""
import json, sys
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest, CompletionResponse
from vllm.entrypoints.serve.tokenize.protocol import (
    DetokenizeRequest, DetokenizeResponse, TokenizeChatRequest, TokenizeCompletionRequest, TokenizeResponse,
)
job = json.load(sys.stdin)
for body in job["completions"]:
    req = CompletionRequest.model_validate(body)
TokenizeCompletionRequest.model_validate(job["tokenize"])
TokenizeChatRequest.model_validate(job["tokenize_chat"])
DetokenizeRequest.model_validate(job["detokenize"])
ChatCompletionRequest.model_validate(job["chat"])
ChatCompletionRequest.model_validate(job["prefill"])  # what VLLMScorer sends for a prefilled turn
try:  # continue_final_message with add_generation_prompt true is refused (check_generation_prompt)
    ChatCompletionRequest.model_validate(job["prefill_both"])
    prefill_both_refused = False
except Exception as exc:  # VLLMValidationError (0.33, 0.34) is no ValueError, so pydantic lets it through
    prefill_both_refused = "Cannot set both" in str(exc)
TokenizeResponse.model_validate(job["tokenize_response"])
DetokenizeResponse.model_validate(job["detokenize_response"])
# the double's answer through vLLM's model and back out the way its API router sends it
response = CompletionResponse.model_validate(job["completion_response"])
sent = json.loads(json.dumps(response.model_dump()))
print(json.dumps({"echo_without_generation": req.echo and req.max_tokens == 0, "response": sent,
                  "prefill_both_refused": prefill_both_refused}))
"""


def test_requests_and_the_doubles_answers_fit_vllms_api_models() -> None:
    ctx, cont = encode("The capital of France is"), encode(" Paris")
    scoring = loglikelihood_payload([(ctx, cont), (ctx, encode(" potato"))], "served-model")
    generate = {"model": "m", "prompt": "Q:", "max_tokens": 8, "stop": ["\n"], "temperature": 0.0, "seed": 1}
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "max_tokens": 8,
    }
    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<tool_call>\n"}]
    prefill = {"model": "m", "messages": turn, "max_tokens": 8}
    tokenize_chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": True,
    }
    job: dict[str, Any] = {
        "completions": [generate, scoring],
        "tokenize": {"model": "m", "prompt": "hi", "add_special_tokens": False},
        "tokenize_chat": tokenize_chat,
        "detokenize": {"model": "m", "tokens": [5, 6]},
        "chat": chat,
        "prefill": {**prefill, "continue_final_message": True, "add_generation_prompt": False},
        "prefill_both": {**prefill, "continue_final_message": True, "add_generation_prompt": True},
        "tokenize_response": fake_tokenize({"prompt": "hi"}),
        "detokenize_response": fake_detokenize({"tokens": [104, 105]}),
        "completion_response": fake_completion(scoring),
    }
    result = run_with_vllm(API, job)
    assert result["echo_without_generation"] is True
    assert result["prefill_both_refused"] is True  # so VLLMScorer sends add_generation_prompt false with it
    choice = result["response"]["choices"][0]  # type: ignore[index]
    assert read_continuation_logprobs(choice, ctx, cont) == read_continuation_logprobs(
        fake_completion(scoring)["choices"][0], ctx, cont
    )
