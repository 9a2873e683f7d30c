"""``evalgate plan-power``: the items a suite needs at the level the gate really tests it at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate import stats
from evalgate.cli import main
from evalgate.gate._power import family_size, plan_power
from tests.conftest import DATA_DIR


def test_family_size_counts_every_test_in_the_holm_family() -> None:
    kinds = ["loglikelihood", "generate", "chat"]
    assert family_size(kinds, policy="difference", agreement_gate=True) == 3 + 3 + 2
    assert family_size(kinds, policy="difference", agreement_gate=False) == 3
    assert family_size(kinds, policy="non-inferiority", agreement_gate=True) == 3 + 2
    assert family_size(["loglikelihood"], policy="regression", agreement_gate=True, errors_as_wrong=True) == 3


def test_plan_matches_connor_at_holms_first_step() -> None:
    suites = {"a": ("loglikelihood", 2376), "b": ("loglikelihood", 300)}
    rates = {"a": (0.05, "x"), "b": (0.10, "x")}
    tests, rows = plan_power(suites, mde=0.02, flip_rates=rates)
    assert tests == 4 and all(r.level == 0.05 / 4 for r in rows)
    a, b = rows
    assert a.needed == stats.required_n(0.02, 0.05, alpha=0.0125) and a.needed <= 2376
    assert b.needed == stats.required_n(0.02, 0.10, alpha=0.0125) and b.needed > 300
    assert b.mde_available == stats.mde(300, 0.10, alpha=0.0125)
    _, ni = plan_power(suites, mde=0.02, flip_rates=rates, policy="non-inferiority")
    assert ni[0].level == 0.05 and ni[0].alternative == "less"


def test_cli_prints_the_level_and_items(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan-power", "--suites", "arc_easy,gsm8k", "--mde", "2pt", "--flip-rate", "0.08"]
    if DATA_DIR.is_dir():
        args += ["--data-dir", str(DATA_DIR)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert (
        "5 tests in the Holm family" in out and "0.05/5 = 0.01" in out
    )  # 2 accuracy, 2 agreement, 1 unanswered
    assert str(stats.required_n(0.02, 0.08, alpha=0.01)) in out
    if DATA_DIR.is_dir():
        assert "2376" in out and "1319 (too few)" in out


def test_cli_takes_the_flip_rate_from_a_runs_aa_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    doc = {
        "suites": [{"suite": "arc_easy", "primary": True, "flips": 0.2}],
        "aa": [{"suite": "arc_easy", "primary": True, "flips": 0.07}],
    }
    (run / "verdict.json").write_text(json.dumps(doc))
    assert main(["plan-power", "--suites", "arc_easy", "--mde", "0.03", "--from", str(run)]) == 0
    out = capsys.readouterr().out
    assert "7.0%" in out and "A/A of run" in out
    assert str(stats.required_n(0.03, 0.07, alpha=0.025)) in out
    assert main(["plan-power", "--suites", "arc_easy", "--mde", "1%rel"]) == 2
    assert main(["plan-power", "--suites", "arc_esay", "--mde", "2pt"]) == 2  # did you mean arc_easy?
    assert "arc_easy" in capsys.readouterr().err


def test_the_longest_length_row_is_one_more_test_and_a_row_of_its_own() -> None:
    kinds = ["generate", "generate"]
    assert family_size(kinds, policy="difference", agreement_gate=True, longest=1) == 2 + 2 + 2 + 1
    assert family_size(kinds, policy="non-inferiority", agreement_gate=False, longest=1) == 1
    suites = {"gsm8k": ("generate", None), "long_context": ("generate", 1500)}
    rates = {"gsm8k": (0.05, "x"), "long_context": (0.05, "x")}
    tests, rows = plan_power(
        suites, mde=0.03, flip_rates=rates, lengths={"long_context": (1024, 2048, 4096)},
        longest_rates={"long_context": (0.12, "pilot at 4096")},
    )  # fmt: skip
    assert tests == 7 and [r.longest for r in rows] == [None, None, 4096]
    longest = rows[-1]
    assert (longest.alternative, longest.level, longest.available) == ("less", 0.05 / 7, 500)
    assert longest.needed == stats.required_n(0.03, 0.12, alpha=0.05 / 7, alternative="less")
    assert longest.mde_available == stats.mde(500, 0.12, alpha=0.05 / 7, alternative="less")
    one, _ = plan_power(suites, mde=0.03, flip_rates=rates, lengths={"long_context": (4096,)})
    assert one == 6  # one length: the pooled row is the test of it, no longest-length row
    ni_tests, ni = plan_power(
        suites, mde=0.03, flip_rates=rates, policy="non-inferiority", lengths={"long_context": (1024, 4096)}
    )
    assert ni_tests == 2 + 2 + 1 and all(r.longest is None for r in ni)  # counted, not sized


def test_cli_plans_long_context_at_its_longest_length_and_says_what_it_assumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan-power", "--suites", "gsm8k,long_context", "--mde", "3pt"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "7 tests in the Holm family" in out and "long_context longest (4096 tokens)" in out
    needed = stats.required_n(0.03, 0.05, alpha=0.05 / 7, alternative="less")
    assert str(needed) in out and f"long_context --limit {needed} (3 lengths)" in out
    assert "assumes:" in out and "independent items" in out and "two-sided alpha 0.05/7 = 0.0071" in out
    assert "one-sided (the candidate worse)" in out

    run = tmp_path / "run"
    run.mkdir()
    doc = {
        "suites": [
            {"suite": "long_context", "primary": True, "flips": 0.04, "test": "mcnemar"},
            {"suite": "gsm8k", "primary": True, "flips": 0.3, "test": "sign-flip"},
        ],
        "lengths": [{"suite": "long_context", "rows": [{"context_length": 8192, "flip_rate": 0.2}]}],
    }
    (run / "verdict.json").write_text(json.dumps(doc))
    flags = [
        "--suites",
        "gsm8k,long_context",
        "--mde",
        "3pt",
        "--from",
        str(run),
        "--context-lengths",
        "2k,8k",
    ]
    assert main(["plan-power", *flags]) == 0
    out = " ".join(capsys.readouterr().out.split())
    at_longest = stats.required_n(0.03, 0.2, alpha=0.05 / 7, alternative="less")
    assert (
        f"long_context longest (8192 tokens) │ 20.0% │ {at_longest}" in out
        and "candidate of run at 8192" in out
    )
    assert "graded: each differing item counted as a whole-range change" in out  # gsm8k's row was sign-flip
    assert main(["plan-power", "--suites", "gsm8k", "--mde", "3pt", "--context-lengths", "4k"]) == 2
    assert main(["plan-power", "--suites", "long_context", "--mde", "3pt", "--context-lengths", "0k"]) == 2
