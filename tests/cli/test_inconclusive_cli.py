"""--require-power through the whole gate on the fake engine (#44): the README's first command
ends INCONCLUSIVE with exit 4 (its gsm8k and arc_easy rows are UNDERPOWERED at n = 50), GitHub's
outputs, summary and annotations say so, and `evalgate report` reproduces it from the run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine


def test_require_power_on_the_readme_command_is_inconclusive_everywhere(
    tmp_path: Path,
    data_dir: Path,
    use: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use(FakeEngine(answer=lambda arm, prompt: "The answer is 42."))
    output, summary = tmp_path / "github_output", tmp_path / "step_summary"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "run"
    readme = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--data-dir", str(data_dir)]
    here = [
        "--engine",
        "fake",
        "--out",
        str(out),
        "--skip-kernel-check",
        "--suite-opt",
        "drift.decode_tokens=64",
    ]
    assert main([*readme, *here, "--require-power"]) == 4
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "INCONCLUSIVE"
    assert "gsm8k exact_match,flexible-extract; arc_easy acc" in v["reason"]
    assert {r["suite"] for r in v["suites"] if r["status"] == "underpowered"} == {"gsm8k", "arc_easy"}
    assert "verdict=INCONCLUSIVE\n" in output.read_text() and "blocked=true\n" in output.read_text()
    assert "INCONCLUSIVE" in summary.read_text() and "exit code 4" in summary.read_text()
    assert "::error title=evalgate INCONCLUSIVE::" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["request"]["require_power"] is True
    assert main(["report", str(out)]) == 4  # the flag is in the manifest's request
    assert 'type="evalgate.inconclusive"' in (out / "junit.xml").read_text()
