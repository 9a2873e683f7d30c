"""``evalgate compare --dry-run`` (issue #18): both launch commands with the key masked, what the
engine pins on them, and the planned items per suite; nothing launched, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from tests.engines.test_engine_sglang import checkpoint, scale_file


def config(tmp_path: Path, extra: str = "") -> Path:
    model = checkpoint(tmp_path, "Llama-BF16")
    (Path(model) / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    path = tmp_path / "evalgate.toml"
    path.write_text(f"[sglang]\nmodel_path = {json.dumps(model)}\n{extra}")
    return path


def dry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path, *extra: str, toml: str = ""
) -> tuple[int, str]:
    code = main(
        ["compare", "--engine", "sglang", "--baseline", "bf16", "--candidate", "fp8kv", "--dry-run",
         "--config", str(config(tmp_path, toml)), "--data-dir", str(data_dir), "--suites", "arc_easy,gsm8k",
         "--limit", "7", *extra]
    )  # fmt: skip
    return code, capsys.readouterr().out


def test_dry_run_shows_both_commands_the_pins_and_the_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = dry(tmp_path, capsys, data_dir)
    assert code == 0, out
    base, cand = out.split("\nbaseline")[1].split("\ncandidate")
    assert "sglang.launch_server" in base and "--api-key '***'" in base and "--port 30000" in base
    assert "--kv-cache-dtype bfloat16" in base and "--kv-cache-dtype fp8_e4m3" in cand
    for arm in (base, cand):
        assert "--sampling-defaults openai" in arm
    assert "KV scales: none given" in cand and "uses 1.0 on every layer" in cand
    assert "KV scales" not in base
    assert "arc_easy: 7 items" in out and "gsm8k: 7 items" in out
    assert not (tmp_path / "reports").exists()  # nothing written, nothing launched


def test_dry_run_names_a_checked_scale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    scales = scale_file(tmp_path)
    code, out = dry(tmp_path, capsys, data_dir, toml=f"kv_scales_path = {json.dumps(scales)}\n")
    assert code == 0, out
    cand = out.split("\ncandidate")[1]
    assert f"--quantization-param-path {scales}" in cand and "checked: 2 layers" in cand


def test_dry_run_refuses_what_the_run_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code = main(
        ["compare", "--engine", "sglang", "--baseline", "bf16", "--candidate", "fp8kv", "--dry-run",
         "--config", str(config(tmp_path)), "--data-dir", str(data_dir), "--suites", "tool_calls"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2 and "--tool-call-parser" in captured.out + captured.err


def test_dry_run_shows_the_sampling_the_run_sends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, out = dry(
        tmp_path,
        capsys,
        data_dir,
        "--suites",
        "gsm8k",
        "--repeats",
        "2",
        "--temperature",
        "0.7",
        "--top-k",
        "20",
    )
    assert code == 0, out
    assert "sampling: temperature 0.7, top_k 20; seed 1234" in out and "repeats: 2 per item" in out
    assert "gsm8k: 7 items x 2 repeats" in out
