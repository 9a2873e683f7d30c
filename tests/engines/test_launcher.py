"""The launcher's diagnoses without a real server: a readiness timeout kills the process group,
and a server killed by a signal is named with its likely cause (a fake binary). The same contract
on the real llama-server binary is tests/e2e/test_launcher.py."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from evalgate.engines.api import LaunchSlot
from evalgate.engines.llamacpp import LlamaCppEngine
from evalgate.errors import ServerStartError
from evalgate.variants import parse_variant
from tests.helpers.launcher import never_ready, processes_with, spec_with


def test_readiness_timeout_kills_the_group(tmp_path: Path) -> None:
    marker = f"sleeper-{uuid.uuid4().hex[:8]}"
    cmd = [
        sys.executable,
        "-c",
        f"import subprocess,time; subprocess.Popen(['sleep','60','{marker}']); time.sleep(60)",
    ]
    err = never_ready(cmd, tmp_path / "sleeper.log", timeout_s=1.0)
    assert "not ready within 1 s" in str(err)
    assert processes_with(marker) == []  # the grandchild went with the group


# What a native llama.cpp build prints on a VM that advertises AMX (the system_info and buffer
# lines are llama.cpp's own format), after which the first AMX instruction faults.
AMX_LOG = (
    "system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | "
    "AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | REPACK = 1 |\n"
    "load_tensors:          AMX model buffer size =    89.00 MiB\n"
)


def _dying_server(tmp_path: Path, sig: str, log: str) -> Path:
    script = tmp_path / "llama-server"
    script.write_text(
        f"#!{sys.executable}\nimport os, signal, sys\nsys.stdout.write({log!r})\nsys.stdout.flush()\n"
        f"os.kill(os.getpid(), signal.{sig})\n"
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("sig", "cause", "fix"),
    [
        ("SIGILL", "killed by signal SIGILL", "cannot execute; the build has AVX512, AMX_INT8"),
        ("SIGKILL", "killed by signal SIGKILL", "most likely out of memory"),
        ("SIGSEGV", "killed by signal SIGSEGV", "segmentation fault"),
    ],
)
def test_server_killed_by_a_signal_is_diagnosed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: str, cause: str, fix: str
) -> None:
    import evalgate.engines.llamacpp as llamacpp

    monkeypatch.setattr(
        llamacpp._engine, "find_binary", lambda name="llama-server": _dying_server(tmp_path, sig, AMX_LOG)
    )
    with (
        pytest.raises(ServerStartError) as err,
        LlamaCppEngine().launch(spec_with("/m.gguf"), LaunchSlot("candidate", tmp_path)),
    ):
        pass
    assert cause in str(err.value)
    assert fix in err.value.fix
    if sig == "SIGILL":
        assert "AMX buffer" in err.value.fix and "repack = false" in err.value.fix
        assert llamacpp.PORTABLE_CMAKE_ARGS in err.value.fix
        assert "AMX model buffer" in err.value.detail  # the log tail is shown too


def test_no_repack_and_thread_settings_reach_both_arms_flags() -> None:
    from dataclasses import replace

    from evalgate.config import LlamaCppConfig

    engine = LlamaCppEngine(
        LlamaCppConfig(repack=False, threads=3, threads_batch=2, poll=0, wait_policy="passive")
    )
    for name in ("bf16", "int4"):
        variant = replace(parse_variant(name), model=f"/{name}.gguf")  # no GGUF is derived
        spec = engine.launch_spec(variant)
        args = dict(spec.args)
        assert "--no-repack" in args and args["-t"] == "3" and args["-tb"] == "2" and args["--poll"] == "0"
        assert dict(spec.env) == {"OMP_WAIT_POLICY": "PASSIVE"}  # on both arms


def test_both_arms_say_flash_attention_on_and_differ_only_in_the_kv_types() -> None:
    """q8_0 V forces flash attention on; the F16 arm must not be left to its build's ``auto``."""
    from dataclasses import replace

    from evalgate.config import LlamaCppConfig
    from evalgate.variants import require_only_quantization

    engine = LlamaCppEngine(LlamaCppConfig(wait_policy="default"))
    base, cand = (
        engine.launch_spec(replace(parse_variant(name), model="/m.gguf")) for name in ("bf16", "fp8kv")
    )
    assert dict(base.args)["-fa"] == dict(cand.args)["-fa"] == "on"
    assert {k: v for k, v in base.args if k not in ("-ctk", "-ctv")} == {
        k: v for k, v in cand.args if k not in ("-ctk", "-ctv")
    }
    require_only_quantization(base, cand)


def test_wait_policy_default_leaves_openmp_alone_and_a_variant_env_wins() -> None:
    from dataclasses import replace

    plain = replace(parse_variant("bf16"), model="/m.gguf")
    assert LlamaCppEngine().launch_spec(plain).env == ()  # the default leaves OpenMP alone
    own = replace(plain, env=(("OMP_WAIT_POLICY", "ACTIVE"),))
    assert dict(LlamaCppEngine().launch_spec(own).env) == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_cpu_features_are_read_from_system_info() -> None:
    from evalgate.engines.llamacpp import cpu_features

    assert cpu_features(AMX_LOG)[-4:] == ["AVX512", "AMX_INT8", "LLAMAFILE", "REPACK"]
    assert cpu_features("no such line") == []
