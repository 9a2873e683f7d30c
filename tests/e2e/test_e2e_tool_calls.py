"""tool_calls on the real llama-server (marked e2e): an A/A pair with the tools chat template,
where the prefill makes SmolLM2 call tools. The mapping, graders and suite are tested on recorded
replies in tests/suites/test_tool_calls.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def test_tool_calls_pair_on_llamacpp(data_dir: Path, tmp_path: Path) -> None:
    from importlib.resources import files

    from evalgate.cli import main

    template = files("evalgate.engines.llamacpp") / "templates" / "chatml_tools.jinja"
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text(
        "[variants.bf16]\nbase = 'bf16'\n"
        f"args = {{ '--jinja' = true, '--chat-template-file' = '{template}' }}\n"
    )
    run = tmp_path / "run"
    argv = ["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", "tool_calls", "--limit", "8"]
    argv += ["--max-gen-tokens", "96", "--data-dir", str(data_dir), "--out", str(run), "--config", str(cfg)]
    assert main(argv) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    rows = {r["metric"]: r for r in verdict["suites"] if r["suite"] == "tool_calls"}
    assert rows["valid"]["primary"] and rows["valid"]["n"] == 8 and "match" in rows
    lines = (run / "items" / "tool_calls.baseline.jsonl").read_text().splitlines()
    assert sum(1 for r in map(json.loads, lines) if r["response"]["tool_calls"]) >= 4  # the prefill works
