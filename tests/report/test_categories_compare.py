"""MMLU through ``evalgate compare`` on the fake engine (#44): the records carry each item's
subject, and verdict.json has the per-category rows beside the one gated mmlu row, untouched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine, shorter_is_likelier


def _logprob(arm: str, context: str, continuation: str) -> float:
    """The baseline answers A (the choices tie); the candidate answers D on high-school subjects
    only: a change by subject."""
    if arm == "candidate" and "about high school" in context.splitlines()[0] and continuation.strip() == "D":
        return 0.0
    return shorter_is_likelier(arm, context, continuation)


def test_mmlu_on_the_fake_engine_writes_category_rows(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(FakeEngine(logprob=_logprob))
    out = tmp_path / "run"
    code = main(["compare", "--engine", "fake", "--suites", "mmlu", "--limit", "60", "--data-dir", str(data_dir),
                 "--out", str(out), "--skip-kernel-check"])  # fmt: skip
    assert code in (0, 1)
    records = [json.loads(x) for x in (out / "items" / "mmlu.candidate.jsonl").read_text().splitlines()]
    assert all(r["extra"]["subject"] == r["item_id"].split("/")[0] for r in records)
    v = json.loads((out / "verdict.json").read_text())
    assert [(r["suite"], r["primary"]) for r in v["suites"]] == [("mmlu", True)]  # never a gated row
    (section,) = v["categories"]
    assert (section["suite"], section["unit"], section["within"]) == ("mmlu", "subject", "item")
    rows = {r["category"]: r for r in section["rows"]}
    assert set(rows) == {r["extra"]["subject"] for r in records} and sum(r["n"] for r in rows.values()) == 60
    changed = {name for name, r in rows.items() if r["n10"] + r["n01"]}
    assert changed and all(name.startswith("high_school_") for name in changed)
    assert section["overall"]["n_clusters"] == len(rows) > 30  # stratified by subject
    assert f"{len(rows)} subject rows, informational" in section["note"]
    assert "Per-category results" in (out / "report.html").read_text(encoding="utf-8")
