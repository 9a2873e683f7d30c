"""Issue #43 (part 3, continued), options that changed nothing and said nothing: ``--chat`` with
drift (no chat variant: it ran the plain drift), ``--drift-budget`` with no drift suite, a
``[suites.drift]`` budget of ``true`` (read as 1 nat per token) or ``inf`` (refused naming a flag
the user never passed), each exit 2 naming what to change; and a server that tokenizes a drift
document to nothing, which is the server's garbage (an item error, exit 3), not a usage error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine, FakeScorer


def _dry(tmp_path: Path, *flags: str) -> int:
    return main(["compare", "--engine", "fake", "--dry-run", "--skip-kernel-check",
                 "--out", str(tmp_path / "run"), *flags])  # fmt: skip


def test_chat_with_drift_is_refused_not_run_as_plain_drift(
    tmp_path: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(FakeEngine())
    for suites in ("drift", "gsm8k,drift"):
        code = _dry(tmp_path, "--chat", "--suites", suites)
        err = capsys.readouterr().err
        assert code == 2 and "drift has no chat variant" in err and "drop --chat" in err, err


def test_a_drift_budget_without_a_drift_suite_is_refused(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(FakeEngine())
    code = _dry(tmp_path, "--suites", "gsm8k", "--drift-budget", "kld=0.5")
    err = capsys.readouterr().err
    assert code == 2 and "--drift-budget kld=0.5" in err and "add drift to --suites" in err, err
    flags = ("--suites", "gsm8k,drift", "--drift-budget", "kld=0.5", "--data-dir", str(data_dir))
    assert _dry(tmp_path, *flags) == 0


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("kld_budget = true", "[suites.drift] kld_budget"),
        ("ppl_margin = false", "[suites.drift] ppl_margin"),
        ("ppl_margin = inf", "[suites.drift] ppl_margin"),
        ("kld_budget = nan", "[suites.drift] kld_budget"),
    ],
    ids=["kld-true", "ppl-false", "ppl-inf", "kld-nan"],
)
def test_a_drift_table_budget_that_is_no_number_is_refused_naming_the_table(
    tmp_path: Path, use: Any, capsys: pytest.CaptureFixture[str], line: str, says: str
) -> None:
    use(FakeEngine())
    config = tmp_path / "evalgate.toml"
    config.write_text(f"[suites.drift]\n{line}\n")
    code = _dry(tmp_path, "--config", str(config), "--suites", "drift")
    err = capsys.readouterr().err
    assert code == 2 and says in err and "--drift-budget" not in err.split("fix:")[0], err


def test_the_drift_table_still_takes_numbers(tmp_path: Path, data_dir: Path, use: Any) -> None:
    use(FakeEngine())
    config = tmp_path / "evalgate.toml"
    config.write_text("[suites.drift]\nkld_budget = 1\nppl_margin = 0.05\n")
    assert _dry(tmp_path, "--config", str(config), "--suites", "drift", "--data-dir", str(data_dir)) == 0


def test_a_server_tokenizing_a_drift_document_to_nothing_is_an_item_error(
    tmp_path: Path, data_dir: Path, use: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    use(FakeEngine())
    real = FakeScorer.tokenize

    async def tokenize(self: FakeScorer, text: str) -> list[int]:
        if self.arm == "candidate" and "####" in text:  # a GSM8K solution: nothing on the candidate
            return []
        return await real(self, text)

    monkeypatch.setattr(FakeScorer, "tokenize", tokenize)
    out = tmp_path / "run"
    code = main(["compare", "--engine", "fake", "--suites", "drift", "--limit", "3", "--data-dir", str(data_dir),
                 "--out", str(out), "--skip-kernel-check", "--suite-opt", "drift.decode_tokens=4"])  # fmt: skip
    assert code == 3
    recs = [json.loads(x) for x in (out / "items" / "drift.candidate.jsonl").read_text().splitlines()]
    assert recs and all("tokenized drift document" in (r.get("error") or "") for r in recs), recs
