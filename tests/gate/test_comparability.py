"""#44: comparability first. A pair whose arms differ in anything but the numerics (tokenizer,
chat template, generation cap) is "not comparable" and never PASS; a fact one arm does not
record is "inconclusive", a note."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from evalgate.gate import load_run, verdict_for
from evalgate.report.terminal import print_verdict
from tests.helpers.runs import SynthSuite, build_run

TEMPLATE = {"check": "chat template applied", "ok": True, "detail": "rendered 171 chars around the message"}


def _run(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A passing run (identical answers), both arms with a chat template check, then ``edit``."""
    run = build_run(tmp_path / "run", [SynthSuite("gsm8k", (30, 0, 0, 10))])
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    for arm in manifest["arms"].values():
        arm["preflight"].append(dict(TEMPLATE))
    if edit is not None:
        edit(manifest)
    path.write_text(json.dumps(manifest, indent=2))
    return run


def _records(run: Path, arm: str, change: Callable[[int, dict[str, Any]], None]) -> None:
    path = run / "items" / f"gsm8k.{arm}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        change(i, row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_identical_arms_are_comparable_and_pass(tmp_path: Path) -> None:
    verdict = verdict_for(load_run(_run(tmp_path)))
    assert verdict.verdict == "PASS"
    assert verdict.comparability is not None and verdict.comparability.status == "comparable"
    assert verdict.comparability.checked == ["tokenizer", "chat template", "sample counts"]
    assert verdict.to_dict()["comparability"]["status"] == "comparable"
    console = Console(record=True, width=200)
    print_verdict(verdict, console)
    assert "comparability: comparable: same tokenizer, chat template, sample counts" in console.export_text()


def test_a_different_tokenizer_is_not_comparable_and_never_passes(tmp_path: Path) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["arms"]["candidate"]["tokenizer_fingerprint"] = "0000aaaa1111bbbb"

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.comparability is not None and verdict.comparability.status == "not comparable"
    assert verdict.verdict == "ERROR" and verdict.exit_code == 3
    assert "different tokenizer: baseline 8d5347c2eb89cc84, candidate 0000aaaa1111bbbb" in verdict.reason
    assert "it would have been PASS" in verdict.reason


def test_a_different_chat_template_is_not_comparable(tmp_path: Path) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["arms"]["candidate"]["preflight"][-1]["detail"] = "rendered 64 chars around the message"

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.verdict == "ERROR"
    assert verdict.comparability is not None and "different chat template" in verdict.comparability.reasons[0]


def test_a_server_reported_template_that_differs_is_not_comparable(tmp_path: Path) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["arms"]["baseline"]["server"]["chat_template"] = "chatml"
        m["arms"]["candidate"]["server"]["chat_template"] = "llama-3"

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.verdict == "ERROR" and "server chat template" in verdict.reason


def test_a_different_generation_cap_is_not_comparable(tmp_path: Path) -> None:
    run = _run(tmp_path)

    def cut(cap: int) -> Callable[[int, dict[str, Any]], None]:
        def change(i: int, row: dict[str, Any]) -> None:
            if i < 5:  # the same long items, cut at each arm's own cap
                row["tokens"]["completion"] = cap
                row["extra"] = {**row.get("extra", {}), "finish_reason": "length"}

        return change

    _records(run, "baseline", cut(256))
    _records(run, "candidate", cut(128))
    verdict = verdict_for(load_run(run))
    assert verdict.verdict == "ERROR"
    assert verdict.comparability is not None
    assert verdict.comparability.reasons == [
        "different generation cap on gsm8k (item 'gsm8k-0000': baseline cut at 256 tokens, "
        "candidate cut at 128 tokens)"
    ]


def test_an_answer_longer_than_the_other_arms_cut_shows_a_different_cap(tmp_path: Path) -> None:
    run = _run(tmp_path)

    def change(i: int, row: dict[str, Any]) -> None:
        if i == 3:
            row["tokens"]["completion"] = 64
            row["extra"] = {**row.get("extra", {}), "finish_reason": "length"}

    _records(run, "candidate", change)
    _records(run, "baseline", lambda i, row: row["tokens"].update(completion=200) if i == 3 else None)
    verdict = verdict_for(load_run(run))
    assert verdict.verdict == "ERROR" and "candidate cut at 64 tokens" in verdict.reason


def test_the_same_cap_on_both_arms_is_checked(tmp_path: Path) -> None:
    run = _run(tmp_path)

    def change(i: int, row: dict[str, Any]) -> None:
        if i < 2:
            row["tokens"]["completion"] = 256
            row["extra"] = {**row.get("extra", {}), "finish_reason": "length"}

    _records(run, "baseline", change)
    _records(run, "candidate", change)
    verdict = verdict_for(load_run(run))
    assert verdict.verdict == "PASS"
    assert verdict.comparability is not None and "generation cap" in verdict.comparability.checked


def test_a_fact_one_arm_does_not_record_is_an_inconclusive_note(tmp_path: Path) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["arms"]["candidate"]["tokenizer_fingerprint"] = None

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.verdict == "PASS"
    assert verdict.comparability is not None and verdict.comparability.status == "inconclusive"
    assert (
        "comparability inconclusive: the candidate records no tokenizer (the other does: 8d5347c2eb89cc84)"
        in verdict.notes
    )


def test_an_import_with_different_lm_eval_versions_is_not_comparable(tmp_path: Path) -> None:
    def edit(m: dict[str, Any]) -> None:
        m["imported"] = {
            "from": "lm-eval --log_samples",
            "baseline": {"lm_eval_version": "0.4.8", "model_args": "pretrained=a,tokenizer=t"},
            "candidate": {"lm_eval_version": "0.4.9", "model_args": "pretrained=b,tokenizer=t"},
        }
        for arm in m["arms"].values():
            arm["tokenizer_fingerprint"] = None

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.verdict == "ERROR"
    assert verdict.comparability is not None
    assert verdict.comparability.reasons == ["different lm-eval version: baseline 0.4.8, candidate 0.4.9"]
    assert "tokenizer named in model_args" in verdict.comparability.checked


def test_imported_arms_naming_different_tokenizers_are_inconclusive(tmp_path: Path) -> None:
    """Two names can be one tokenizer (an FP8 checkpoint's own repository): said, not refused."""

    def edit(m: dict[str, Any]) -> None:
        m["imported"] = {
            "baseline": {"lm_eval_version": "0.4.9", "model_args": "pretrained=a,tokenizer=org/tok-a"},
            "candidate": {"lm_eval_version": "0.4.9", "model_args": "pretrained=b,tokenizer=org/tok-b"},
        }

    verdict = verdict_for(load_run(_run(tmp_path, edit)))
    assert verdict.verdict == "PASS"
    assert verdict.comparability is not None and verdict.comparability.status == "inconclusive"
    assert any("different tokenizer named in model_args" in n and "org/tok-b" in n for n in verdict.notes)
