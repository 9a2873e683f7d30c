"""Every SGLang command evalgate builds, checked against SGLang's own argument parser.

With SGLang importable (a CPU-only ``pip install --no-deps`` of it and a few light modules is
enough; see SGLANG_PARSER_INSTALL), the commands are parsed by the parser
``prepare_server_args`` builds, and the ``/generate`` request and response shapes are checked
with SGLang's generated API contract. In a subprocess, so SGLang's imports stay out of this
process. Without it, the flags and choice values are checked against
fixtures/sglang_0.5.23_options.txt, which that parser wrote.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from evalgate.config import SGLangConfig
from evalgate.engines.sglang import PARSER_PACKAGES as SGLANG_PARSER_PACKAGES
from evalgate.engines.sglang import TESTED_VERSION as SGLANG_VERSION
from evalgate.engines.sglang import SGLangEngine, parser_dir
from evalgate.engines.sglang._scorer import loglikelihood_payload
from evalgate.variants import BUILTIN_VARIANTS, Variant, parse_variant
from tests.helpers.child_process import run_json
from tests.helpers.options import check_flags, read_options

SGLANG_PARSER_INSTALL = (
    "evalgate setup --parsers (or pip install --no-deps --target DIR "
    + " ".join(SGLANG_PARSER_PACKAGES)
    + ")"
)
OPTIONS = Path(__file__).resolve().parents[1] / "fixtures" / f"sglang_{SGLANG_VERSION}_options.txt"

PARSE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.api.v1.api_types import GenerateRequest, GenerateResponse, DetokenizeRequest
job = json.load(sys.stdin)
out = {"parsed": [], "errors": []}
for argv in job["commands"]:
    parser = argparse.ArgumentParser(prog="sglang serve")  # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    try:
        ns = parser.parse_args(argv)
    except SystemExit:
        out["errors"].append(argv)
        continue
    out["parsed"].append({k: getattr(ns, k) for k in job["fields"]})
for body in job["generate"]:
    GenerateRequest.from_json_value(body)
for body in job["responses"]:
    GenerateResponse.from_json_value(body)
DetokenizeRequest.from_json_value({"tokens": [1, 2], "skip_special_tokens": False})
print(json.dumps(out))
"""
FIELDS = [
    "model_path",
    "host",
    "port",
    "api_key",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "quantization_param_path",
    "tp_size",
    "mem_fraction_static",
    "random_seed",
    "tool_call_parser",
    "reasoning_parser",
    "context_length",
    "max_total_tokens",
    "schedule_conservativeness",
    "sampling_defaults",
    "enable_deterministic_inference",
]


def variants(tmp_path: Path) -> list[Variant]:
    """Every built-in variant and the composition, the int4 ones on a 4-bit AWQ checkpoint."""
    int4 = tmp_path / "Llama-AWQ"
    int4.mkdir()
    (int4 / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    out = []
    for name in (*BUILTIN_VARIANTS, "int4+fp8kv"):
        v = parse_variant(name)
        out.append(Variant(v.name, v.weights, v.kv, str(int4) if v.weights == "int4" else None))
    return out


def commands(tmp_path: Path) -> list[list[str]]:
    """The argv after ``python -m sglang.launch_server``, with every optional setting in use."""
    from evalgate.kernels.fp8_kv.sglang_json import sglang_kv_scales_dict

    scales = tmp_path / "kv.json"
    scales.write_text(json.dumps(sglang_kv_scales_dict({0: {0: 0.1}, 1: {0: 0.1}}, model_type="llama")))
    settings = SGLangConfig(
        model_path="meta-llama/Llama-3.1-8B-Instruct",
        tp_size=2,
        mem_fraction_static=0.85,
        tool_call_parser="llama3",
        reasoning_parser="qwen3",
        context_length=8192,
        max_total_tokens=4096,
        schedule_conservativeness=0.3,
        chat_template="/templates/chat.jinja",
        kv_scales_path=str(scales),
        deterministic=True,
    )
    eng = SGLangEngine(settings)
    return [eng.command(eng.launch_spec(v), port=30000, api_key="eg-k")[3:] for v in variants(tmp_path)]


def sglang_pythonpath() -> str | None:
    """Where SGLang is importable from: EVALGATE_SGLANG_PARSER_PATH, or this environment."""
    extra = os.environ.get("EVALGATE_SGLANG_PARSER_PATH")
    if extra:
        return extra
    if (parser_dir() / "sglang").is_dir():  # evalgate setup --parsers
        return str(parser_dir())
    return "" if importlib.util.find_spec("sglang") is not None else None


def test_commands_parse_with_sglangs_own_parser(tmp_path: Path) -> None:
    path = sglang_pythonpath()
    if path is None:
        pytest.skip(
            f"SGLang is not importable: {SGLANG_PARSER_INSTALL}, then EVALGATE_SGLANG_PARSER_PATH=DIR "
            "(the option-list test below still checks the flags)"
        )
    cmds = commands(tmp_path)
    ids = [[5, 6, 7, 8], [5, 6, 7, 9]]
    response = {"text": "", "meta_info": {"input_token_logprobs": [[None, 7, None], [-0.5, 8, None]]}}
    job: dict[str, Any] = {
        "commands": cmds,
        "fields": FIELDS,
        "generate": [loglikelihood_payload([(i[:3], i[3:]) for i in ids])],
        "responses": [response],
    }
    result = run_json(PARSE, job, pythonpath=path)
    assert result["errors"] == []
    parsed = {
        p["kv_cache_dtype"] + "/" + str(p["quantization"]) + "/" + p["model_path"] for p in result["parsed"]
    }
    int4 = str(tmp_path / "Llama-AWQ")
    base = "meta-llama/Llama-3.1-8B-Instruct"
    assert parsed == {
        f"bfloat16/None/{base}",
        f"fp8_e4m3/None/{base}",
        f"bfloat16/fp8/{base}",
        f"bfloat16/None/{int4}",
        f"fp8_e4m3/None/{int4}",
    }
    for p in result["parsed"]:
        assert p["host"] == "127.0.0.1" and p["port"] == 30000 and p["api_key"] == "eg-k"
        assert p["dtype"] == "bfloat16" and p["tp_size"] == 2 and p["mem_fraction_static"] == 0.85
        assert p["random_seed"] == 1234 and p["context_length"] == 8192 and p["max_total_tokens"] == 4096
        assert p["schedule_conservativeness"] == 0.3
        assert p["tool_call_parser"] == "llama3" and p["reasoning_parser"] == "qwen3"
        assert (p["quantization_param_path"] == str(tmp_path / "kv.json")) == (
            p["kv_cache_dtype"] == "fp8_e4m3"
        )
        assert p["sampling_defaults"] == "openai" and p["enable_deterministic_inference"] is True


def test_every_flag_and_value_is_in_sglangs_option_list(tmp_path: Path) -> None:
    options = read_options(OPTIONS)
    assert OPTIONS.read_text().startswith(f"# SGLang {SGLANG_VERSION} launch_server options")
    for argv in commands(tmp_path):
        check_flags(argv, options, f"SGLang {SGLANG_VERSION}")
