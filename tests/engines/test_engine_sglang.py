"""The SGLang engine without a GPU: variant flags, the fairness check, the launch command, log
diagnosis from real SGLang logs, and what is recorded from /server_info."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from evalgate.config import SGLangConfig
from evalgate.engines.api import LaunchSlot
from evalgate.engines.sglang import SGLangEngine, diagnose, parse_server_info
from evalgate.errors import ConfigError, ServerStartError
from evalgate.variants import Variant, check_only_quantization, parse_variant

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "sglang_logs"


def checkpoint(root: Path, name: str, quant: dict[str, Any] | None = None) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    config: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    if quant is not None:
        config["quantization_config"] = quant
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


AWQ4 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
CT_W4A16 = {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128, "type": "int"}}},
}
FP8_CKPT = {"quant_method": "fp8", "activation_scheme": "dynamic"}


@pytest.fixture
def models(tmp_path: Path) -> dict[str, str]:
    return {
        "bf16": checkpoint(tmp_path, "Llama-BF16"),
        "awq": checkpoint(tmp_path, "Llama-AWQ", AWQ4),
        "ct": checkpoint(tmp_path, "Llama-W4A16", CT_W4A16),
        "fp8": checkpoint(tmp_path, "Llama-FP8", FP8_CKPT),
        "gptq8": checkpoint(tmp_path, "Llama-GPTQ8", {"quant_method": "gptq", "bits": 8}),
    }


def engine(models: dict[str, str], **kw: Any) -> SGLangEngine:
    return SGLangEngine(SGLangConfig(model_path=models["bf16"], **kw))


def args_of(spec: Any) -> dict[str, str | None]:
    return dict(spec.args)


def scale_file(folder: Path, *, ranks: int = 1, layers: int = 2, model_type: str = "llama") -> str:
    """A KV scale file as kernels/fp8_kv writes it (SGLang's QuantParamSchema)."""
    from evalgate.kernels.fp8_kv.sglang_json import sglang_kv_scales_dict

    path = folder / f"kv_scales_tp{ranks}.json"
    scales = {r: {layer: 0.01 * (layer + 1) for layer in range(layers)} for r in range(ranks)}
    path.write_text(json.dumps(sglang_kv_scales_dict(scales, model_type=model_type)))
    return str(path)


def with_model(name: str, model: str, **kw: Any) -> Variant:
    v = parse_variant(name)
    return Variant(name=v.name, weights=v.weights, kv=v.kv, model=model, **kw)


# -- variant -> flags ----------------------------------------------------------------------------
def test_bf16_is_bfloat16_with_an_explicit_bfloat16_kv_cache(models: dict[str, str]) -> None:
    spec = engine(models).launch_spec(parse_variant("bf16"))
    a = args_of(spec)
    assert spec.engine == "sglang" and spec.model == models["bf16"]
    assert a["--dtype"] == "bfloat16" and a["--kv-cache-dtype"] == "bfloat16"  # never auto (#18.4)
    assert "--quantization" not in a and "--quantization-param-path" not in a
    assert a["--tp-size"] == "1" and a["--random-seed"] == "1234"
    assert "--mem-fraction-static" not in a  # None keeps SGLang's own per-GPU default


def test_fp8kv_sets_e4m3_cache_and_scales_only_on_that_arm(models: dict[str, str], tmp_path: Path) -> None:
    scales = scale_file(tmp_path)
    eng = engine(models, kv_scales_path=scales)
    fp8kv, bf16 = (
        args_of(eng.launch_spec(parse_variant("fp8kv"))),
        args_of(eng.launch_spec(parse_variant("bf16"))),
    )
    assert fp8kv["--kv-cache-dtype"] == "fp8_e4m3" and fp8kv["--quantization-param-path"] == scales
    assert fp8kv["--dtype"] == "bfloat16" and "--quantization" not in fp8kv
    assert "--quantization-param-path" not in bf16
    assert "--quantization-param-path" not in args_of(engine(models).launch_spec(parse_variant("fp8kv")))


def test_fp8_quantizes_online_unless_the_checkpoint_is_quantized(models: dict[str, str]) -> None:
    eng = engine(models)
    online = eng.launch_spec(parse_variant("fp8"))
    assert online.model == models["bf16"] and args_of(online)["--quantization"] == "fp8"
    prequantized = eng.launch_spec(with_model("fp8", models["fp8"]))
    assert prequantized.model == models["fp8"] and "--quantization" not in args_of(prequantized)
    hub = eng.launch_spec(with_model("fp8", "RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic"))
    assert "--quantization" not in args_of(hub)  # its own checkpoint: SGLang reads config.json


def test_int4_needs_an_explicit_int4_checkpoint(models: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as err:
        engine(models).launch_spec(parse_variant("int4"))
    assert "INT4 checkpoint" in str(err.value) and "[variants.int4] model =" in err.value.fix


@pytest.mark.parametrize("key", ["awq", "ct"])
def test_int4_reads_the_method_from_config_json(models: dict[str, str], key: str) -> None:
    spec = engine(models).launch_spec(with_model("int4", models[key]))
    a = args_of(spec)
    assert spec.model == models[key] and "--quantization" not in a  # SGLang picks the kernel itself
    assert a["--kv-cache-dtype"] == "bfloat16" and a["--dtype"] == "bfloat16"  # Marlin takes bf16


@pytest.mark.parametrize(
    ("key", "message"), [("gptq8", "not INT4"), ("bf16", "no quantization_config"), ("fp8", "not INT4")]
)
def test_int4_refuses_a_checkpoint_that_is_not_4_bit(models: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        engine(models).launch_spec(with_model("int4", models[key]))


def test_int4_plus_fp8kv_composes(models: dict[str, str]) -> None:
    spec = engine(models).launch_spec(with_model("int4+fp8kv", models["awq"]))
    assert spec.model == models["awq"] and args_of(spec)["--kv-cache-dtype"] == "fp8_e4m3"


def test_a_quantized_baseline_is_refused(models: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="quantized checkpoint"):
        SGLangEngine(SGLangConfig(model_path=models["fp8"])).launch_spec(parse_variant("bf16"))


def test_no_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs a model checkpoint"):
        SGLangEngine().launch_spec(parse_variant("bf16"))


def test_settings_become_flags_and_variant_args_override(models: dict[str, str]) -> None:
    eng = engine(
        models,
        tp_size=2,
        mem_fraction_static=0.85,
        tool_call_parser="qwen25",
        reasoning_parser="qwen3",
        context_length=8192,
        random_seed=7,
    )
    v = Variant("bf16-triton", args=(("--attention-backend", "triton"), ("--tp-size", "4")))
    a = args_of(eng.launch_spec(v))
    assert a["--mem-fraction-static"] == "0.85" and a["--tool-call-parser"] == "qwen25"
    assert a["--reasoning-parser"] == "qwen3" and a["--context-length"] == "8192"
    assert a["--random-seed"] == "7" and a["--attention-backend"] == "triton" and a["--tp-size"] == "4"


# -- only quantization may differ ------------------------------------------------------------------
def test_fp8kv_against_bf16_is_a_fair_pair(models: dict[str, str], tmp_path: Path) -> None:
    eng = engine(models, kv_scales_path=scale_file(tmp_path, ranks=2), tp_size=2, context_length=4096)
    base = eng.launch_spec(parse_variant("bf16"))
    assert check_only_quantization(base, eng.launch_spec(parse_variant("fp8kv"))) == []
    assert check_only_quantization(base, eng.launch_spec(parse_variant("fp8"))) == []
    assert check_only_quantization(base, eng.launch_spec(with_model("int4+fp8kv", models["ct"]))) == []


def test_kernel_backends_and_gpu_placement_may_differ(models: dict[str, str]) -> None:
    eng = engine(models)
    base = eng.launch_spec(Variant("b", env=(("CUDA_VISIBLE_DEVICES", "0"),)))
    cand = eng.launch_spec(
        Variant(
            "c", kv="fp8", args=(("--attention-backend", "triton"),), env=(("CUDA_VISIBLE_DEVICES", "1"),)
        )
    )
    assert check_only_quantization(base, cand) == []


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--tp-size", "2"),
        ("--context-length", "8192"),
        ("--sampling-backend", "pytorch"),
        ("--dtype", "float16"),
    ],
)
def test_other_differences_are_refused(models: dict[str, str], flag: str, value: str) -> None:
    eng = engine(models)
    base = eng.launch_spec(parse_variant("bf16"))
    cand = eng.launch_spec(Variant("fp8kv-odd", kv="fp8", args=((flag, value),)))
    diffs = check_only_quantization(base, cand)
    assert [d[0] for d in diffs] == [flag] and diffs[0][2] == value


# -- the command and GPU assignment ----------------------------------------------------------------
def test_command_is_launch_server_with_loopback_and_key(models: dict[str, str]) -> None:
    eng = engine(models, python="/envs/sglang/bin/python")
    spec = eng.launch_spec(parse_variant("fp8kv"))
    before = spec.args
    cmd = eng.command(spec, port=30001, api_key="eg-secret")
    assert cmd[:3] == ["/envs/sglang/bin/python", "-m", "sglang.launch_server"]
    flat = " ".join(cmd)
    assert f"--model-path {models['bf16']} --host 127.0.0.1 --port 30001 --api-key eg-secret" in flat
    assert "--kv-cache-dtype fp8_e4m3" in flat and spec.args == before
    shim = SGLangEngine(SGLangConfig(model_path="m", launch_command=["wrapper", "serve"]))
    assert shim.command(spec, port=1, api_key="k")[:3] == ["wrapper", "serve", "--model-path"]


def test_gpus_are_assigned_per_arm_outside_the_spec() -> None:
    eng = SGLangEngine(SGLangConfig(gpus="0", arm_gpus={"candidate": "1"}))
    assert eng.gpus_for("baseline") == "0" and eng.gpus_for("candidate") == "1"
    assert SGLangEngine().gpus_for("baseline") is None


def test_version_asks_the_configured_interpreter(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 0.5.23\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert SGLangEngine(SGLangConfig(python=str(fake))).version() == "0.5.23"
    assert SGLangEngine(SGLangConfig(python=str(tmp_path / "missing"))).version() == "not installed"


# -- diagnosis from real SGLang logs ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("not_enough_memory.log", "raise mem_fraction_static"),
        ("cuda_oom.log", "lower mem_fraction_static"),
        ("fp8_unsupported.log", "compute capability 8.9"),
        ("invalid_choice.log", "does not accept --kv-cache-dtype fp8"),
        ("unrecognized_arguments.log", "does not know --reasoning_parser kimi_k2"),
        ("scheduler_sigquit.log", "scheduler process died"),
        ("scheduler_dead.log", "out-of-memory killer"),
    ],
)
def test_diagnosis_of_real_logs(fixture: str, expected: str) -> None:
    text = (LOGS / fixture).read_text()
    assert text.startswith("# source: ") and (
        "https://github.com/" in text.splitlines()[0] or "generated" in text
    )
    hint = diagnose(text)
    assert hint is not None and expected in hint, hint


def test_every_log_fixture_is_covered() -> None:
    assert {p.name for p in LOGS.glob("*.log")} == {
        "not_enough_memory.log",
        "cuda_oom.log",
        "fp8_unsupported.log",
        "invalid_choice.log",
        "unrecognized_arguments.log",
        "scheduler_sigquit.log",
        "scheduler_dead.log",
    }


def test_diagnosis_of_capability_message_and_unknown_logs() -> None:
    line = (
        "ValueError: The quantization method fp8 is not supported for the current GPU. "
        "Minimum capability: 89. Current capability: 80."
    )
    assert "compute capability 8.0" in (diagnose(line) or "") and "needs 8.9" in (diagnose(line) or "")
    traced = "Scheduler hit an exception: Traceback\n  File x\nKeyError: 'rope_scaling'\n"
    assert "KeyError: 'rope_scaling'" in (diagnose(traced) or "")
    busy = (
        "ValueError: port_base at 30001 is not available in 30 seconds. port_base at 30001 is not available"
    )
    assert "port SGLang needs is in use" in (diagnose(busy) or "")  # utils/network.py wait_port_available
    assert diagnose("INFO: Uvicorn running on http://127.0.0.1:30000") is None


# -- server info ----------------------------------------------------------------------------------
def test_server_info_keeps_settings_and_capacity_and_masks_the_key() -> None:
    raw = json.loads((FIXTURES / "capacity" / "sglang_server_info.json").read_text())
    raw = {
        **raw,
        "api_key": "eg-secret",
        "launch_command": "python -m sglang.launch_server --api-key eg-secret",
    }
    info = parse_server_info(raw, ["eg-secret"])
    assert info["version"] == "0.4.7.post1" and info["max_total_num_tokens"] == 855232
    assert info["kv_cache_dtype"] == "fp8_e4m3" and info["memory_usage_gb"]["kvcache"] == 52.2
    assert info["capacity"]["kv_tokens"] == 855232
    assert "eg-secret" not in json.dumps(info)


def test_server_info_sums_tokens_over_dp_ranks_when_not_top_level() -> None:
    raw = {
        "version": "0.5.23",
        "internal_states": [
            {"max_total_num_tokens": 1000, "memory_usage": {"kvcache": 1.5}},
            {"max_total_num_tokens": 1000, "memory_usage": {"kvcache": 1.5}},
        ],
    }
    info = parse_server_info(raw)
    assert info["max_total_num_tokens"] == 2000 and len(info["memory_usage_gb"]) == 2


def test_a_launch_that_dies_is_diagnosed_with_the_key_masked(tmp_path: Path, models: dict[str, str]) -> None:
    """A stand-in that prints a real SGLang failure and exits, launched as sglang.launch_server would be."""
    script = f"import sys; sys.stdout.write(open({str(LOGS / 'fp8_unsupported.log')!r}).read()); sys.exit(1)"
    eng = engine(models, launch_command=(sys.executable, "-c", script), ready_timeout_s=30)
    with (
        pytest.raises(ServerStartError) as err,
        eng.launch(eng.launch_spec(parse_variant("fp8")), LaunchSlot("candidate", tmp_path)),
    ):
        pass
    assert "exited during startup" in str(err.value) and "compute capability 8.9" in err.value.fix
    assert "--api-key '***'" in err.value.detail and "eg-" not in err.value.render()
    assert "--quantization fp8" in err.value.detail


def test_concurrent_arms_only_on_disjoint_gpus() -> None:
    assert not SGLangEngine(SGLangConfig(model_path="/m")).concurrent_arms
    assert not SGLangEngine(SGLangConfig(model_path="/m", gpus="0")).concurrent_arms
    split = SGLangConfig(model_path="/m", arm_gpus={"baseline": "0,1", "candidate": "2,3"})
    assert SGLangEngine(split).concurrent_arms
    overlap = SGLangConfig(model_path="/m", arm_gpus={"baseline": "0,1", "candidate": "1,2"})
    assert not SGLangEngine(overlap).concurrent_arms


def test_enough_gpus_give_each_arm_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    engine = SGLangEngine(SGLangConfig(model_path="/m", tp_size=2))
    assert (engine.gpus_for("baseline"), engine.gpus_for("candidate"), engine.gpus_for("aa")) == (
        "0,1",
        "2,3",
        "0,1",
    )
    assert engine.concurrent_arms
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # not enough for two arms of tp 2: take turns
    engine = SGLangEngine(SGLangConfig(model_path="/m", tp_size=2))
    assert engine.gpus_for("baseline") is None and not engine.concurrent_arms
    pinned = SGLangEngine(SGLangConfig(model_path="/m", tp_size=2, gpus="3"))
    assert pinned.gpus_for("candidate") == "3" and not pinned.concurrent_arms
