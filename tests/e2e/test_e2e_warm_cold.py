"""``evalgate probe warm-cold`` on the real llama-server (SmolLM2 F16): llama-server takes no salt,
so its cold condition is ``cache_prompt: false`` per request (0 cached tokens) and its warm one
the shared namespace, each prompt read back from its slot but for one token; with
``--deterministic`` (one slot) these six greedy answers are the same warm and cold. (At the
default 20, gsm8k test-675 flips, reproducibly: docs/probe.md.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def test_warm_and_cold_answers_agree_on_llama_server(data_dir: Path, tmp_path: Path) -> None:
    code = main(
        ["probe", "warm-cold", "--engine", "llamacpp", "--deterministic", "--limit", "3",
         "--data-dir", str(data_dir), "--out", str(tmp_path)]
    )  # fmt: skip
    report = json.loads((tmp_path / "probe.json").read_text())
    assert code == 0 and report["verdict"] == "PASS", report["reasons"]
    assert report["flips"] == 0 and report["budget"] == 0 and report["n"] == 6
    for item in report["items"]:
        assert item["cold_cached_tokens"] == 0
        assert item["warm_cached_tokens"] == item["prompt_tokens"] - 1  # all but the token it must compute
    assert (tmp_path / "probe.html").exists() and (tmp_path / "summary.md").exists()
