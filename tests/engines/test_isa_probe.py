"""The instruction-set probe runs an instruction rather than trusting /proc/cpuinfo, and the vLLM
CPU engine refuses, before launch, the variants this CPU cannot execute (#35)."""

from __future__ import annotations

import dataclasses
import json
import platform
from pathlib import Path

import pytest

from evalgate.config import VLLMConfig
from evalgate.engines._isa import PROBES, IsaReport, cpu_flags, executes, isa_report, require_any
from evalgate.engines.api import LaunchSlot
from evalgate.engines.sglang import checkpoint_dir
from evalgate.engines.vllm import VLLMCPUEngine
from evalgate.engines.vllm._cpu import w4a16_dir
from evalgate.errors import ConfigError
from evalgate.variants import check_only_quantization, parse_variant

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 machine code")


@x86
def test_an_illegal_instruction_is_seen_as_sigill_and_a_plain_one_runs() -> None:
    assert executes(bytes.fromhex("0f0bc3")) is False  # ud2: SIGILL on every x86 CPU
    assert executes(bytes.fromhex("90c3")) is True  # nop; ret


@x86
def test_what_is_advertised_is_tried() -> None:
    report = isa_report()
    for flag in PROBES:
        if flag not in report.advertised:
            assert report.executed[flag] is None and not report.usable(flag)
    if "avx2" in cpu_flags():
        assert report.executed["avx2"] is True  # every machine here has run AVX2


def test_an_advertised_set_that_does_not_execute_is_not_usable(tmp_path: Path) -> None:
    """The machine that advertised AMX and could not run it: the flag alone would have passed."""
    report = IsaReport(frozenset({"avx2", "amx_tile"}), {"avx2": True, "avx512f": None, "amx_tile": False})
    assert not report.usable("amx_tile") and "AMX: advertised but SIGILL when run" in report.describe()
    with pytest.raises(ConfigError) as err:
        require_any(("avx512f", "amx_tile"), what="an FP8 KV cache", fix="elsewhere", report=report)
    assert err.value.exit_code == 2 and "AVX-512 or AMX" in str(err.value)
    assert cpu_flags(tmp_path / "missing") == frozenset()


AVX2_ONLY = IsaReport(frozenset({"avx2"}), {"avx2": True, "avx512f": None, "amx_tile": None})
AVX512 = IsaReport(frozenset({"avx2", "avx512f"}), {"avx2": True, "avx512f": True, "amx_tile": None})


def _engine(tmp_path: Path, isa: IsaReport) -> VLLMCPUEngine:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return VLLMCPUEngine(VLLMConfig(device="cpu", cpu_dir=str(tmp_path), model=str(model)), isa=isa)


def test_vllm_cpu_refuses_fp8_kv_without_avx512_and_launches_it_with(tmp_path: Path) -> None:
    engine = _engine(tmp_path, AVX2_ONLY)
    with pytest.raises(ConfigError, match="needs AVX-512 or AMX"):
        engine.launch_spec(parse_variant("fp8kv"))
    with pytest.raises(ConfigError, match="needs AVX-512 or AMX"):
        engine.launch_spec(parse_variant("fp8"))
    spec = engine.launch_spec(parse_variant("bf16"))
    args, env = dict(spec.args), dict(spec.env)
    assert "--enforce-eager" in args and env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    command = engine.command(spec, port=8000, api_key="k")
    assert command[1:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model"]  # not `vllm serve`
    fp8 = dict(_engine(tmp_path / "b", AVX512).launch_spec(parse_variant("fp8kv")).args)
    assert fp8["--kv-cache-dtype"] == "fp8_e4m3"


def test_vllm_cpu_kv_space_is_whole_gib() -> None:
    with pytest.raises(ValueError):
        VLLMConfig(device="cpu", cpu_kv_cache_gib=1.5)  # vLLM reads it with int()


def test_the_default_models_int4_arm_is_its_w4a16_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int4 on vLLM's CPU serves the Q4_0 codes as compressed-tensors W4A16 (``setup --vllm-cpu``),
    refused before launch where AVX-512/AMX does not run (the AVX2 build has no INT4 kernel)."""
    monkeypatch.setenv("EVALGATE_CACHE", str(tmp_path))
    python = tmp_path / "vllm-cpu" / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    bf16 = checkpoint_dir(tmp_path / "sglang-cpu", "bf16")
    int4 = w4a16_dir(tmp_path / "vllm-cpu")
    quant = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 4}}}}
    for folder, config in ((bf16, {}), (int4, {"quantization_config": quant})):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="needs AVX-512 or AMX"):
        VLLMCPUEngine(VLLMConfig(device="cpu"), isa=AVX2_ONLY).launch_spec(parse_variant("int4"))
    engine = VLLMCPUEngine(VLLMConfig(device="cpu"), isa=AVX512)
    base, cand = engine.launch_spec(parse_variant("bf16")), engine.launch_spec(parse_variant("int4"))
    assert base.model == str(bf16) and cand.model == str(int4)
    assert check_only_quantization(base, cand) == []


def test_deterministic_on_vllms_cpu_backend_is_refused_before_launch(tmp_path: Path) -> None:
    """#43: --deterministic set VLLM_BATCH_INVARIANT=1, the CPU server died at start with a generic
    message; it is exit 2 before any server, naming the cause and the fix."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    engine = VLLMCPUEngine(
        VLLMConfig(device="cpu", cpu_dir=str(tmp_path), model=str(model), deterministic=True), isa=AVX512
    )
    with pytest.raises(ConfigError, match="CPU backend") as err:
        engine.launch_spec(parse_variant("bf16"))
    assert "drop --deterministic" in err.value.fix


def test_the_quoted_command_carries_the_spec_environment_masked(tmp_path: Path) -> None:
    """#43: the command a failed start quotes omitted the variables the spec sets."""
    engine = _engine(tmp_path, AVX512)
    spec = engine.launch_spec(parse_variant("bf16"))
    spec = dataclasses.replace(spec, env=(*spec.env, ("HF_TOKEN", "hf_secret_value")))
    shown = engine.launch_command(spec, name="baseline", port=1, api_key="k")
    assert "VLLM_CPU_KVCACHE_SPACE=1" in shown and "HF_TOKEN=***" in shown
    assert not any("hf_secret_value" in part for part in shown)


def test_a_passing_probe_is_recorded_with_the_server_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#45: the run folder shows that FP8 ran on a machine where AVX-512 executes: the probe's
    findings join the server's facts (``server.cpu_isa``), which the report lists per arm."""
    import contextlib
    from collections.abc import Iterator
    from typing import Any

    from evalgate.engines import ServerHandle
    from evalgate.engines.vllm import VLLMEngine
    from evalgate.report._sections import flatten
    from evalgate.store.facts import ServerFacts

    @contextlib.contextmanager
    def launched(self: Any, spec: Any, slot: LaunchSlot) -> Iterator[ServerHandle]:
        yield ServerHandle(
            slot.name, "http://127.0.0.1:1", "k", ["vllm"], slot.log_dir / "log", info={"served_model": "m"}
        )

    monkeypatch.setattr(VLLMEngine, "launch", launched)
    engine = _engine(tmp_path, AVX512)
    spec = engine.launch_spec(parse_variant("fp8kv"))
    with engine.launch(spec, LaunchSlot("candidate", tmp_path)) as handle:
        info = dict(handle.info)
    assert info["cpu_isa"] == {"AVX2": "executes", "AVX-512": "executes", "AMX": "not advertised"}
    facts = ServerFacts.model_validate(info)
    assert facts.cpu_isa == info["cpu_isa"]
    rows = flatten(facts.to_dict())
    assert any("cpu_isa" in str(k) and "AVX-512" in str(k) and "executes" in str(v) for k, v in rows), rows
    plain = _engine(tmp_path / "b", None)  # type: ignore[arg-type]  # probes on first need
    bf16 = plain.launch_spec(parse_variant("bf16"))
    with plain.launch(bf16, LaunchSlot("baseline", tmp_path)) as handle:
        assert "cpu_isa" not in handle.info  # no variant asked for AVX-512: nothing was probed
