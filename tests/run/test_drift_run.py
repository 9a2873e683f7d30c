"""The drift suite through the whole loop on the fake engine: records, the verdict's drift rows,
a resume that reproduces them, and the budget from the flag and from [suites.drift]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.suites import SuiteOptions, default_registry


def _compare(out: Path, data_dir: Path, *flags: str) -> int:
    return main(["compare", "--engine", "fake", "--suites", "drift", "--limit", "12", "--data-dir", str(data_dir),
                 "--out", str(out), "--skip-kernel-check", "--suite-opt", "drift.decode_tokens=64", *flags])  # fmt: skip


def _rows(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    v = json.loads((out / "verdict.json").read_text())
    (section,) = v["drift"]
    return {(r["measure"], r["pair"]): r for r in section["rows"]}


def test_identical_arms_pass_with_zero_drift_and_records_pair_by_token_ids(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    engine = use(FakeEngine())
    out = tmp_path / "run"
    assert _compare(out, data_dir) == 0
    v = json.loads((out / "verdict.json").read_text())
    rows = [r for r in v["drift"][0]["rows"] if r["pair"] == "candidate"]
    assert {r["path"] for r in rows} == {"prefill", "decode"}  # the fake engine forces through prefill
    assert all(
        r["estimate"] == (1.0 if r["measure"] == "ppl_ratio" else 0.0)
        for r in rows
        if r["measure"] != "top1_agree"
    )
    assert all(r["status"] != "block" for r in rows) and v["verdict"] == "PASS"
    base = [json.loads(x) for x in (out / "items" / "drift.baseline.jsonl").read_text().splitlines()]
    cand = [json.loads(x) for x in (out / "items" / "drift.candidate.jsonl").read_text().splitlines()]
    assert len(base) == len(cand) == 12
    for b, c in zip(base, cand, strict=True):
        assert b["extra"]["sent_hash"] == c["extra"]["sent_hash"]
        assert len(b["response"]["top"]) == b["metrics"]["tokens"] == b["tokens"]["scored"] > 0
        assert all(len(pos) == 20 for pos in b["response"]["top"])
    # per document and arm: the forced solution, and the prefill path re-reading the greedy text
    # (identical texts: no cross read); a text that ended at a stop reads its stop token in one step
    assert sum(1 for c in engine.calls if c.kind == "token_distributions") == 48
    stopped = sum(r["response"]["decode"]["finish"] == "stop" for r in base + cand)
    assert sum(1 for c in engine.calls if c.kind == "decode_distributions") == 24 + stopped
    assert all(len(r["response"]["reads"]) == 1 for r in base + cand)
    assert all(
        b["response"]["decode"]["ids"] == c["response"]["decode"]["ids"]
        for b, c in zip(base, cand, strict=True)
    )


def test_a_drifting_candidate_blocks_and_a_resume_reaches_the_same_rows(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(FakeEngine(drift=lambda arm: 1.0 if arm == "candidate" else 0.0))
    out = tmp_path / "run"
    assert _compare(out, data_dir) == 1
    first = _rows(out)
    assert first[("kld", "candidate")]["status"] == "block"
    verdict = json.loads((out / "verdict.json").read_text())
    assert "mean KL" in verdict["reason"]
    engine = use(FakeEngine(drift=lambda arm: 1.0 if arm == "candidate" else 0.0))
    assert main(["compare", "--resume", str(out)]) == 1
    assert not any(c.kind == "token_distributions" for c in engine.calls)  # nothing rescored
    assert _rows(out) == first
    assert main(["report", str(out)]) == 1


def test_the_budget_comes_from_the_flag_or_the_suite_table(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(FakeEngine(drift=lambda arm: 0.2 if arm == "candidate" else 0.0))
    loose = tmp_path / "loose"
    assert _compare(loose, data_dir, "--drift-budget", "kld=5,ppl=500%") == 0
    assert _rows(loose)[("kld", "candidate")]["budget"] == 5.0
    config = tmp_path / "evalgate.toml"
    config.write_text("[suites.drift]\nkld_budget = 7.5\n")
    table = tmp_path / "table"
    use(FakeEngine(drift=lambda arm: 0.2 if arm == "candidate" else 0.0))
    assert _compare(table, data_dir, "--config", str(config)) in (0, 1)
    assert _rows(table)[("kld", "candidate")]["budget"] == 7.5
    manifest = json.loads((table / "manifest.json").read_text())
    assert manifest["request"]["drift_budget"] == "kld=7.5"


def test_the_documents_are_gsm8k_train_never_the_test_split(data_dir: Path) -> None:
    suite = default_registry().get("drift")
    items = suite.load(SuiteOptions(data_dir=data_dir), 50)
    assert len(items) == 50 and len({i.prompt_hash for i in items}) == 50
    test = {
        json.loads(x)["question"].strip()
        for x in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()
    }
    assert not any(i.payload[0] in test for i in items)
    assert suite.metric_kind == "drift" and not suite.samples


def test_a_decode_only_fault_blocks_the_whole_loop_on_the_decode_row(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    """#42: a candidate whose forced (prefill) positions are exact and whose greedy decoding drifts
    from generated position 70 on: the drift suite alone BLOCKs through the whole gate, on the
    decode path, naming the bucket where it starts; a resume and `report` reach the same verdict."""
    from evalgate.engines.fake import decode_drift_from

    use(FakeEngine(decode_drift=decode_drift_from("candidate", 70, 1.0)))
    out = tmp_path / "run"
    code = main(["compare", "--engine", "fake", "--suites", "drift", "--limit", "12", "--data-dir", str(data_dir),
                 "--out", str(out), "--skip-kernel-check", "--suite-opt", "drift.decode_tokens=96"])  # fmt: skip
    v = json.loads((out / "verdict.json").read_text())
    rows = [r for r in v["drift"][0]["rows"] if r["pair"] == "candidate"]
    assert code == 1 and all(r["status"] != "block" for r in rows if r["path"] == "prefill")
    assert "decode-path mean KL" in v["reason"] and "starts at positions 64-255" in v["reason"]
    assert main(["report", str(out)]) == 1
