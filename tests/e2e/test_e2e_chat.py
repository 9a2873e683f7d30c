"""Chat suites end to end on the real llama-server with SmolLM2-135M (marked e2e, ~2 min on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.engines import ServerHandle
from tests.conftest import needs_models
from tests.e2e.test_e2e import records
from tests.e2e.test_e2e_sglang_shim import shim_config

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


@pytest.mark.usefixtures("sglang_models")
def test_chat_suites_on_the_sglang_engine_pass_sglangs_request_model(
    upstream: ServerHandle, tmp_path: Path, data_dir: Path
) -> None:
    """--engine sglang over tests/helpers/sglang_shim.py, which answers 400 to any request SGLang 0.5.23's
    own ChatCompletionRequest refuses: the chat payloads (seed, stop, chat_template_kwargs, ARC's
    prefill sent with continue_final_message) pass, and every item is a graded chat answer."""
    config = shim_config(upstream, tmp_path)  # the llama-server test_e2e_sglang_shim.py uses too
    run = tmp_path / "run"
    code = main(["compare", "--engine", "sglang", "--config", str(config), "--baseline", "bf16",
                 "--candidate", "fp8kv", "--suites", "arc_easy,gsm8k", "--chat", "--thinking", "on",
                 "--limit", "3", "--max-gen-tokens", "48", "--data-dir", str(data_dir), "--out", str(run),
                 "--skip-kernel-check"])  # fmt: skip
    assert code == 0  # one llama-server behind both arms: an A/A
    for suite in ("arc_easy_chat", "gsm8k_chat"):
        for arm in ("baseline", "candidate"):
            recs = records(run, suite, arm)
            assert len(recs) == 3 and all(r["error"] is None and "no_answer" in r["extra"] for r in recs)
    arc = records(run, "arc_easy_chat", "baseline")
    assert not any(str(r["response"]).startswith("The best answer is") for r in arc)
