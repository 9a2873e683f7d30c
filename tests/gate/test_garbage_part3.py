"""Issue #43 (part 3), the gate's share: records of items the manifest never planned are not
this run's, and are never scored (an ERROR naming the suite and an item id, not a PASS at the
planned n)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main

LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"


def test_records_of_items_never_planned_are_an_error_not_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["compare", "--baseline-samples", str(LMEVAL / "bf16"), "--candidate-samples",
            str(LMEVAL / "int4"), "--suites", "arc_easy", "--out", str(out)]  # fmt: skip
    assert main(argv) in (0, 1)
    for arm in ("baseline", "candidate"):  # every record moved to an item id the plan never had
        path = out / "items" / f"arc_easy.{arm}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for r in rows:
            r["item_id"] = "other-" + r["item_id"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["report", str(out)]) == 3
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "ERROR"
    assert "never planned" in verdict["reason"] and "'other-" in verdict["reason"], verdict["reason"]
