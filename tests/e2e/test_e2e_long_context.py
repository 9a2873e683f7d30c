"""long_context on the real llama-server with SmolLM2-135M (marked e2e): the prompts are
token-exact with the server's own tokenizer and byte-identical on both arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.suites.long_context import ANSWER_ROOM
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def _records(run: Path, arm: str) -> dict[str, dict[str, object]]:
    lines = (run / "items" / f"long_context.{arm}.jsonl").read_text().splitlines()
    return {r["item_id"]: r for r in map(json.loads, lines)}


def test_long_context_prompts_are_token_exact_and_identical_on_both_arms(tmp_path: Path) -> None:
    run = tmp_path / "lc"
    flags = ["--suites", "long_context", "--context-lengths", "1k,2k", "--limit", "1", "--out", str(run)]
    code = main(["compare", "--baseline", "bf16", "--candidate", "fp8kv", *flags])
    assert code in (0, 1)  # a verdict: PASS or BLOCK, never a failed run
    base, cand = _records(run, "baseline"), _records(run, "candidate")
    assert sorted(base) == sorted(cand) == ["niah_single/1024/0000", "niah_single/2048/0000"]
    for item_id, rec in base.items():
        other = cand[item_id]
        assert rec["error"] is None and other["error"] is None
        assert rec["extra"]["sent_hash"] == other["extra"]["sent_hash"]  # byte-identical prompts
        assert rec["prompt_hash"] == other["prompt_hash"]
        budget = rec["extra"]["context_length"] - ANSWER_ROOM
        sent = rec["extra"]["prompt_tokens"]
        assert budget - 4 <= sent <= budget, (item_id, sent, budget)  # the server's own tokenizer
        assert abs(rec["tokens"]["prompt"] - sent) <= 1  # as the server counted what it was sent
        assert "truncated_tokens" not in rec["extra"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["request"]["context_lengths"] == [1024, 2048]
    checks = [c["check"] for c in manifest["arms"]["candidate"]["preflight"]]
    assert "long_context: context fits" in checks


def test_long_context_beyond_a_slot_is_refused_before_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--suites", "long_context", "--context-lengths", "16k", "--out", str(tmp_path / "x")]
    assert main(["compare", "--baseline", "bf16", "--candidate", "fp8kv", *flags]) == 2
    err = capsys.readouterr().err
    assert "does not fit the baseline: a slot holds 4096 tokens" in err and "ctx_per_slot" in err
    assert not (tmp_path / "x" / "manifest.json").exists()  # refused while planning: nothing launched
