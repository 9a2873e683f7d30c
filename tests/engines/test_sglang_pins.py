"""Issue #18 on the launch side, without a GPU: what evalgate pins on both SGLang arms (and vLLM's)
so that SGLang 0.5.23's defaults cannot change one arm, checked unit by unit. Each test names
the point of the issue it holds; each failed on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.config import SGLangConfig, VLLMConfig
from evalgate.engines._kv_scales import kv_scales_used
from evalgate.engines.sglang import SGLangEngine, diagnose, sglang_capacity
from evalgate.engines.sglang._capacity import server_info_capacity
from evalgate.engines.vllm import VLLMEngine
from evalgate.errors import ConfigError
from evalgate.variants import Variant, check_only_quantization, parse_variant
from tests.engines.test_engine_sglang import AWQ4, checkpoint, scale_file

CAPACITY = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"


def sglang(tmp_path: Path, **kw: Any) -> SGLangEngine:
    model = checkpoint(tmp_path, "Llama-BF16")
    config = json.loads((Path(model) / "config.json").read_text())
    (Path(model) / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    return SGLangEngine(SGLangConfig(model_path=model, **kw))


def args(spec: Any) -> dict[str, str | None]:
    return dict(spec.args)


# -- 3: --sampling-defaults openai, and 4: an explicit BF16 KV cache ----------------------------------
def test_both_arms_pin_openai_sampling_defaults_and_an_explicit_kv_dtype(tmp_path: Path) -> None:
    eng = sglang(tmp_path)
    base, cand = eng.launch_spec(parse_variant("bf16")), eng.launch_spec(parse_variant("fp8kv"))
    for spec in (base, cand):
        assert args(spec)["--sampling-defaults"] == "openai"  # 3: not each checkpoint's generation_config
    assert args(base)["--kv-cache-dtype"] == "bfloat16"  # 4: "auto" may be FP8 by the checkpoint's word
    assert args(cand)["--kv-cache-dtype"] == "fp8_e4m3"
    assert check_only_quantization(base, cand) == []


def test_vllm_pins_an_explicit_bfloat16_kv_cache() -> None:
    eng = VLLMEngine(VLLMConfig(model="meta-llama/Llama-3.1-8B-Instruct"))
    assert args(eng.launch_spec(parse_variant("bf16")))["--kv-cache-dtype"] == "bfloat16"
    assert args(eng.launch_spec(parse_variant("fp8kv")))["--kv-cache-dtype"] == "fp8_e4m3"


# -- 5: KV scales validated before launch, the scale used read back -----------------------------------
def test_a_valid_scale_file_is_passed_to_the_fp8_arm_only(tmp_path: Path) -> None:
    eng = sglang(tmp_path, kv_scales_path=scale_file(tmp_path))
    assert args(eng.launch_spec(parse_variant("fp8kv")))["--quantization-param-path"].endswith(
        "kv_scales_tp1.json"
    )
    assert "--quantization-param-path" not in args(eng.launch_spec(parse_variant("bf16")))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: str(d / "missing.json"), "does not exist"),
        (lambda d: scale_file(d, layers=3), "needs layers 0..1"),  # the checkpoint has 2 layers
        (lambda d: scale_file(d, ranks=2), "2 TP rank"),  # tp_size is 1
        (lambda d: scale_file(d, model_type="qwen2"), "model_type 'qwen2'"),
        (lambda d: (d / "bad.json").write_text("{") and str(d / "bad.json"), "not JSON"),
    ],
)
def test_a_scale_file_sglang_would_replace_by_one_is_refused_before_launch(
    tmp_path: Path, make: Any, message: str
) -> None:
    eng = sglang(tmp_path, kv_scales_path=make(tmp_path))
    with pytest.raises(ConfigError) as err:
        eng.launch_spec(parse_variant("fp8kv"))
    assert message in str(err.value) and "kernels.fp8_kv" in err.value.fix
    eng.launch_spec(parse_variant("bf16"))  # only the FP8 arm reads it


def test_the_scale_used_is_read_from_the_log_and_a_fallback_wins_over_loaded() -> None:
    fallback = (CAPACITY / "sglang_0.5.23.log").read_text()
    assert kv_scales_used(fallback, file=None)["scale"] == "1.0"
    # weight_utils.py kv_cache_scales_loader logs the fallback, then load_kv_cache_scales "Loaded" anyway
    bad = (
        "[t TP0] An error occurred while reading '/s.json'.\n[t TP0] Defaulting to KV cache scaling factors = "
        "1.0 for all layers in TP rank 0 as an error occurred during loading.\n"
        "[t TP0] Loaded KV cache scaling factors from /s.json\n"
    )
    used = kv_scales_used(bad, file="/s.json")
    assert used["scale"] == "1.0" and used["file"] == "/s.json" and used["log"].startswith("Defaulting")
    good = "[t TP0] Loaded KV cache scaling factors from /s.json\n"
    assert kv_scales_used(good, file="/s.json")["scale"] == "file"


# -- 8: capacity from 0.5.23's log line and /server_info memory_usage --------------------------------
def test_capacity_from_the_0_5_23_allocation_line() -> None:
    cap = sglang_capacity((CAPACITY / "sglang_0.5.23.log").read_text())
    assert cap is not None and cap["kv_tokens"] == 1049321 and cap["kv_types"] == "float8_e4m3fn"
    assert cap["kv_mib"] == pytest.approx(32.02 * 1024) and cap["max_running_requests"] == 4096
    alone = "[2026-11-02 09:14:05 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 5000, K size: 1.00 GB, V size: 1.00 GB"
    cap = sglang_capacity(alone)  # no scheduler line: the allocation line alone
    assert cap is not None and cap["kv_tokens"] == 5000 and cap["kv_types"] == "bfloat16"


def test_capacity_after_a_post_capture_resize() -> None:
    cap = sglang_capacity((CAPACITY / "sglang_0.5.23_post_capture.log").read_text())
    assert cap is not None and cap["kv_tokens"] == 812345 and cap["kv_mib"] == pytest.approx(54.12 * 1024)


def test_capacity_from_server_info_memory_usage() -> None:
    # managers/scheduler_components/memory_usage.py build_memory_usage; max_total_num_tokens from get_init_info
    info = {
        "kv_cache_dtype": "bfloat16",
        "max_total_num_tokens": 1000,
        "internal_states": [{"memory_usage": {"weight": 15.0, "kvcache": 1.5, "token_capacity": 1000}}],
    }
    cap = server_info_capacity(info)
    assert cap is not None and cap["kv_tokens"] == 1000 and cap["kv_mib"] == 1536.0
    no_top = {"internal_states": [{"memory_usage": {"kvcache": 1.0, "token_capacity": 700}}] * 2}
    cap = server_info_capacity(no_top)
    assert cap is not None and cap["kv_tokens"] == 1400 and cap["kv_mib"] == 2048.0


# -- 9: plain AWQ/GPTQ take fp16 ----------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_forced_non_marlin_awq_arm_runs_float16(tmp_path: Path, engine: str) -> None:
    awq = checkpoint(tmp_path, "Llama-AWQ", AWQ4)
    forced = Variant("int4-awq", weights="int4", model=awq, args=(("--quantization", "awq"),))
    if engine == "sglang":
        eng: Any = sglang(tmp_path)
        kv16 = "auto"  # SGLang has no float16 choice: auto is the model's (an AWQ config holds no KV algo)
    else:
        eng = VLLMEngine(VLLMConfig(model=checkpoint(tmp_path, "Llama-BF16-v")))
        kv16 = "float16"
    spec = eng.launch_spec(forced)
    assert args(spec)["--dtype"] == "float16" and args(spec)["--kv-cache-dtype"] == kv16
    assert check_only_quantization(eng.launch_spec(parse_variant("bf16")), spec) == []  # fp16 is its kernel's
    marlin = eng.launch_spec(Variant("int4", weights="int4", model=awq))
    assert args(marlin)["--dtype"] == "bfloat16"  # the engine picks Marlin itself, which takes bf16


def test_the_fp16_only_load_error_is_diagnosed() -> None:
    from evalgate.engines.vllm import diagnose as vllm_diagnose

    line = "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]"
    for hint in (diagnose(line) or "", vllm_diagnose(line) or ""):
        assert "[torch.float16] activations" in hint and "'--dtype' = 'float16'" in hint


# -- 10: --deterministic on SGLang and vLLM -----------------------------------------------------------
def test_deterministic_maps_to_each_engines_batch_invariant_mode(tmp_path: Path) -> None:
    spec = sglang(tmp_path, deterministic=True).launch_spec(parse_variant("fp8kv"))
    assert "--enable-deterministic-inference" in args(spec)
    vllm = VLLMEngine(VLLMConfig(model="m", deterministic=True)).launch_spec(parse_variant("bf16"))
    assert ("VLLM_BATCH_INVARIANT", "1") in vllm.env
    with pytest.raises(ConfigError, match="no batch-invariant kernels for --attention-backend torch_native"):
        sglang(tmp_path / "x", deterministic=True).launch_spec(
            Variant("cpu", args=(("--attention-backend", "torch_native"),))
        )
    with pytest.raises(ConfigError, match="backend FLASHINFER has no batch-invariant mode"):
        VLLMEngine(VLLMConfig(model="m", deterministic=True)).launch_spec(
            Variant("fi", args=(("--attention-backend", "FLASHINFER"),))
        )
    old = "launch_server.py: error: unrecognized arguments: --enable-deterministic-inference"
    assert "drop --deterministic, or upgrade SGLang" in (diagnose(old) or "")


# -- 2: tool_calls refuses to run without a tool-call parser -----------------------------------------
@pytest.mark.parametrize(
    ("engine", "flags"),
    [("sglang", "--tool-call-parser"), ("vllm", "--enable-auto-tool-choice --tool-call-parser")],
)
def test_tool_calls_needs_the_engines_parser(tmp_path: Path, engine: str, flags: str) -> None:
    eng: Any = sglang(tmp_path) if engine == "sglang" else VLLMEngine(VLLMConfig(model="m"))
    with pytest.raises(ConfigError) as err:
        eng.require_tool_parser("baseline", eng.launch_spec(parse_variant("bf16")))
    assert f"without {flags}" in str(err.value) and f"[{engine}]" in err.value.fix
    ok = (
        sglang(tmp_path / "p", tool_call_parser="llama3")
        if engine == "sglang"
        else VLLMEngine(VLLMConfig(model="m", tool_call_parser="llama3_json"))
    )
    ok.require_tool_parser("baseline", ok.launch_spec(parse_variant("bf16")))
