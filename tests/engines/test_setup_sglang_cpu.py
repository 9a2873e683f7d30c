"""SGLang on the CPU without running it: the launch settings of ``[sglang] device = "cpu"``, the
``sgl_kernel`` stand-in's files, and ``evalgate setup --sglang-cpu``'s steps and idempotence.
The real server is tests/e2e/test_e2e_sglang_cpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalgate.config import EvalgateConfig, SGLangConfig
from evalgate.engines import get_engine
from evalgate.engines.sglang import _cpu_install
from evalgate.engines.sglang._cpu import CPU_ARGS, SGLangCPUEngine, checkpoint_dir, venv_python
from evalgate.engines.sglang._standin import NAMES, standin_files
from evalgate.errors import ConfigError
from evalgate.variants import parse_variant, require_only_quantization


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A made-up install: the venv's python and the two checkpoints' config.json."""
    python = venv_python(tmp_path)
    python.parent.mkdir(parents=True)
    python.write_text("")
    for weights in ("bf16", "int4"):
        checkpoint_dir(tmp_path, weights).mkdir()
        (checkpoint_dir(tmp_path, weights) / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return tmp_path


def engine(root: Path, **fields: object) -> SGLangCPUEngine:
    return SGLangCPUEngine(SGLangConfig(device="cpu", cpu_dir=str(root), **fields))  # type: ignore[arg-type]


def test_device_cpu_selects_the_cpu_engine_with_the_setup_venv(root: Path) -> None:
    cfg = EvalgateConfig.model_validate({"sglang": {"device": "cpu", "cpu_dir": str(root)}})
    eng = get_engine("sglang", cfg)
    assert isinstance(eng, SGLangCPUEngine)
    assert eng.config.python == str(venv_python(root))
    assert eng.config.model_path == str(checkpoint_dir(root, "bf16"))
    kept = engine(root, python="/opt/sgl/bin/python")
    assert kept.config.python == "/opt/sgl/bin/python"
    assert type(get_engine("sglang", EvalgateConfig())).__name__ == "SGLangEngine"


def test_cpu_flags_and_env_are_on_both_arms_and_only_the_weights_differ(root: Path) -> None:
    eng = engine(root, cpu_threads=1)
    base, cand = eng.launch_spec(parse_variant("bf16")), eng.launch_spec(parse_variant("int4"))
    for spec in (base, cand):
        args = dict(spec.args)
        assert {k: args[k] for k in CPU_ARGS} == CPU_ARGS
        assert "--quantization" not in args
        assert dict(spec.env) == {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1", "PYTHONSAFEPATH": "1"}
    assert base.model == str(checkpoint_dir(root, "bf16")) and cand.model == str(checkpoint_dir(root, "int4"))
    require_only_quantization(base, cand)  # the pair is fair: weights only
    assert eng.gpus_for("baseline") is None and not eng.concurrent_arms
    assert eng.request_timeout_s() == 600.0 and eng.default_gen_cap("smoke") == 256


def test_cpu_command_is_the_venv_python_running_launch_server(root: Path) -> None:
    eng = engine(root)
    cmd = eng.command(eng.launch_spec(parse_variant("bf16")), port=30000, api_key="eg-key")
    assert cmd[:3] == [str(venv_python(root)), "-m", "sglang.launch_server"]
    assert "--sleep-on-idle" in cmd and cmd[cmd.index("--device") + 1] == "cpu"


@pytest.mark.parametrize(
    ("variant", "needs"),
    [("fp8kv", "FP8 KV cache"), ("int4+fp8kv", "FP8 KV cache"), ("fp8", "no fp8 weights")],
)
def test_what_sglang_cannot_run_on_this_cpu_is_refused_before_launch(
    root: Path, variant: str, needs: str
) -> None:
    with pytest.raises(ConfigError, match=needs) as err:
        engine(root).launch_spec(parse_variant(variant))
    assert err.value.exit_code == 2


def test_a_missing_install_names_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="venv is missing") as err:
        engine(tmp_path).launch_spec(parse_variant("bf16"))
    assert "evalgate setup --sglang-cpu" in err.value.fix
    venv_python(tmp_path).parent.mkdir(parents=True)
    venv_python(tmp_path).write_text("")
    with pytest.raises(ConfigError, match="is missing") as err:
        engine(tmp_path).launch_spec(parse_variant("int4"))
    assert "evalgate setup --sglang-cpu" in err.value.fix


def test_the_stand_in_imports_its_names_and_every_call_raises(tmp_path: Path) -> None:
    for rel, text in standin_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    checks = "; ".join(f"from {module} import {', '.join(names)}" for module, names in NAMES.items())
    module, names = next(iter(NAMES.items()))
    code = (
        f"{checks}\nimport sgl_kernel, {module} as m\n"
        f"try:\n    m.{names[0]}(1)\nexcept NotImplementedError as e:\n    print(e)\n"
        "print(sgl_kernel.__version__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{module}.{names[0]} was called" in proc.stdout and "stand-in" in proc.stdout
    assert proc.stdout.strip().endswith("+evalgate.standin")
    assert all("NOT sglang-kernel" in text for text in standin_files().values())


def test_setup_is_idempotent_and_says_each_step(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second run finds every result in place: no pip, no conversion, one line per step."""
    site = root / "site"
    ran: list[list[str]] = []

    def run(cmd: list[str], what: str, fix: str, *, timeout: float = 0) -> str:
        ran.append(cmd)
        return f"{site}\n" if "sysconfig" in " ".join(cmd) else "0.5.23\n"

    gguf = root / "x.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(_cpu_install, "run_step", run)
    monkeypatch.setattr("evalgate.engines._cpu_setup.run_step", run)  # the import check
    monkeypatch.setattr("evalgate.engines.llamacpp.find_binary", lambda name="": Path("/bin/true"))
    monkeypatch.setattr(_cpu_install, "derived_gguf", lambda weights, binary: gguf)
    (root / "venv" / "evalgate-packages.txt").write_text(
        "\n".join((*_cpu_install.TORCH, *_cpu_install.LEAN_PACKAGES, _cpu_install.SGLANG)) + "\n"
    )
    from evalgate.engines.gguf import file_sha256

    for weights in ("bf16", "int4"):
        stamp = {"gguf": gguf.name, "sha256": file_sha256(gguf)}
        (checkpoint_dir(root, weights) / "evalgate-source.json").write_text(json.dumps(stamp))
    lines: list[str] = []
    for _ in range(2):
        lines.clear()
        _cpu_install.install_sglang_cpu(root, say=lines.append)
    assert len(lines) == 6 and all(line.startswith(f"sglang-cpu [{n}/6]") for n, line in enumerate(lines, 1))
    assert all("(kept)" in line for i, line in enumerate(lines) if i != 3), lines  # 3: the import check
    assert not any("pip" in cmd for cmd in ran) and not any("gguf_to_hf" in " ".join(c) for c in ran)
    assert (site / "sgl_kernel" / "__init__.py").is_file()


def test_a_kernel_call_or_a_missing_module_is_diagnosed(root: Path) -> None:
    eng = engine(root)
    called = (
        "KernelUnavailable: sgl_kernel.foo was called, but this sgl_kernel is evalgate's import-only stand-in"
    )
    assert "sgl_kernel.foo" in (eng.diagnose(called) or "")
    missing = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'outlines'"
    assert "LEAN_PACKAGES" in (eng.diagnose(missing) or "")
