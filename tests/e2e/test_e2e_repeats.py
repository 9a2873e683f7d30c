"""Sampled runs on the real llama-server with the real SmolLM2 model (#20, marked e2e): an A/A pair
sampled with common seeds passes, and the report says how far the seeds coupled the arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from tests.conftest import needs_models

pytestmark = [pytest.mark.e2e, needs_models]


def test_a_sampled_aa_pair_passes_and_reports_its_coupling(data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "aa"
    code = main(
        ["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", "gsm8k", "--limit", "4",
         "--repeats", "2", "--temperature", "0.7", "--max-gen-tokens", "48", "--data-dir", str(data_dir),
         "--out", str(run)]
    )  # fmt: skip
    verdict = json.loads((run / "verdict.json").read_text())
    assert code == 0, verdict["reason"]
    row = verdict["agreement"][0]
    assert row["sampled"]["k"] == 2 and row["sampled"]["items"] == 4 and row["status"] == "pass"
    answers = verdict["answers"][0]
    assert answers["k"] == 2 and answers["items"] == 4
    assert answers["identical"] >= 0.5  # one seed per (item, repeat): the arms mostly sample alike
    recs = [json.loads(x) for x in (run / "items" / "gsm8k.candidate.jsonl").read_text().splitlines()]
    assert sorted(r["repeat"] for r in recs) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert "Answers per arm" in (run / "summary.md").read_text()
