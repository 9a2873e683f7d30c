"""Chat suites end to end on the real llama-server with SmolLM2-135M (marked e2e, ~2 min on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main

from .conftest import needs_models
from .test_e2e import records

pytestmark = [pytest.mark.e2e, needs_models]


def test_chat_suites_run_an_aa_pair_through_the_chat_template(data_dir: Path, tmp_path: Path) -> None:
    """gsm8k_chat and arc_easy_chat through /v1/chat/completions on both arms, --thinking off sent as
    chat_template_kwargs (llama-server takes it; SmolLM2's template has no switch): a verdict, one
    chat answer per item, ARC's prefill not part of the graded answer."""
    run = tmp_path / "chat"
    code = main(
        ["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", "gsm8k,arc_easy", "--chat",
         "--thinking", "off", "--limit", "5", "--data-dir", str(data_dir), "--out", str(run)]
    )  # fmt: skip
    assert code == 0
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["verdict"] == "PASS"
    assert {r["suite"] for r in verdict["suites"]} >= {"gsm8k_chat", "arc_easy_chat"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["request"]["chat"] is True and manifest["request"]["thinking"] == "off"
    for suite in ("gsm8k_chat", "arc_easy_chat"):
        base, cand = records(run, suite, "baseline"), records(run, suite, "candidate")
        assert len(base) == len(cand) == 5
        for rec in base + cand:
            assert rec["error"] is None and isinstance(rec["response"], str)
            extra = rec["extra"]
            assert extra["finish_reason"] in ("stop", "length") and "no_answer" in extra
            assert rec["tokens"]["prompt"] > 20 and rec["tokens"]["completion"] >= 1
    # llama-server answers "The best answer is D" to the prefill "The best answer is": graded " D"
    arc = records(run, "arc_easy_chat", "baseline")
    assert not any(str(r["response"]).startswith("The best answer is") for r in arc)
