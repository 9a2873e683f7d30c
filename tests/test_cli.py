"""CLI behaviour that needs no server: refusals exit 2 with the cause and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.cli import main


def write_config(path: Path, extra: str = "") -> Path:
    path.write_text(
        '[variants.a]\nmodel = "/models/f16.gguf"\n\n'
        '[variants.b]\nmodel = "/models/q8.gguf"\nargs = { "-c" = "8192" }\n' + extra
    )
    return path


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("compare", "report", "suites", "setup"):
        assert cmd in out


def test_pair_differing_in_context_length_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path / "evalgate.toml")
    code = main(
        ["compare", "--config", str(cfg), "--baseline", "a", "--candidate", "b", "--suites", "arc_easy"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "differs in more than quantization" in err
    assert "-c: baseline='16384' candidate='8192'" in err
    assert "--allow-diff" in err


def test_unknown_variant_exit_2_with_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--baseline", "bf16", "--candidate", "fp8k"]) == 2
    assert "did you mean 'fp8kv'" in capsys.readouterr().err


def test_unknown_suite_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text('[variants.a]\nmodel = "/m.gguf"\n[variants.b]\nmodel = "/m.gguf"\n')
    assert (
        main(["compare", "--config", str(cfg), "--baseline", "a", "--candidate", "b", "--suites", "gsm8"])
        == 2
    )
    assert "did you mean gsm8k" in capsys.readouterr().err


def test_bad_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text("[llamacpp]\nparallel = 0\n")
    assert main(["compare", "--config", str(cfg)]) == 2
    assert "llamacpp.parallel" in capsys.readouterr().err


def test_report_on_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_attach_needs_both_urls_and_no_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compare", "--suites", "arc_easy", "--limit", "2", "--out", str(tmp_path / "r")]
    assert main([*base, "--baseline-url", "http://127.0.0.1:9"]) == 2
    assert "needs both --baseline-url and --candidate-url" in capsys.readouterr().err
    urls = ["--baseline-url", "http://127.0.0.1:9", "--candidate-url", "http://127.0.0.1:9"]
    assert main([*base, *urls, "--engine", "sglang"]) == 2
    assert "drop --engine" in capsys.readouterr().err
    assert main([*base, *urls]) == 3  # nothing listens on port 9: named, with the fix
    err = capsys.readouterr().err
    assert "127.0.0.1:9" in err and "fix:" in err
    assert not (tmp_path / "r").exists()  # refused before a run folder was made


def test_sequential_refuses_non_inferiority(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", "--sequential", "--policy", "non-inferiority", "--margin", "2pt",
                 "--suites", "arc_easy", "--out", str(tmp_path / "r")])  # fmt: skip
    assert code == 2
    assert "--sequential tests for a difference or a regression" in capsys.readouterr().err
