"""Tiers (#44): an advisory suite is tested and shown, never gates, and is outside the Holm family;
a blocking suite that cannot be judged ends the run as ERROR naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine, shorter_is_likelier
from evalgate.gate import GatePolicy, decide
from tests.gate.test_drift import drift_pairs
from tests.gate.test_gate import pairs

SUITES = {
    "gsm8k": (("acc",), pairs(180, 4, 4, 12)),  # unchanged
    "arc_easy": (("acc",), pairs(150, 40, 2, 8)),  # regressed by 19 points
}


def test_an_advisory_suite_that_regresses_is_shown_and_the_run_passes() -> None:
    blocked = decide(SUITES, policy=GatePolicy())
    assert blocked.verdict == "BLOCK"
    v = decide(SUITES, policy=GatePolicy(advisory=("arc_easy",)))
    assert v.verdict == "PASS" and v.exit_code == 0
    assert [r.suite for r in v.suites] == ["gsm8k", "arc_easy"]  # the run's order, both shown
    arc = next(r for r in v.suites if r.suite == "arc_easy")
    assert arc.status == "advisory-block" and not arc.significant
    assert arc.reason.startswith("advisory, not gated: would block: significant after Holm")
    flips = next(a for a in v.agreement if a.suite == "arc_easy")
    assert flips.status == "advisory-block" and not flips.significant
    assert "advisory, not gated: arc_easy would block" in v.reason
    assert any(n.startswith("advisory (not gated): arc_easy would BLOCK") for n in v.notes)


def test_advisory_rows_are_outside_the_holm_family() -> None:
    """The blocking rows' adjusted p is what it is without the advisory suite; the advisory rows
    are adjusted within their own family (the suite decided alone)."""
    alone = decide({"gsm8k": SUITES["gsm8k"]}, policy=GatePolicy())
    own = decide({"arc_easy": SUITES["arc_easy"]}, policy=GatePolicy())
    v = decide(SUITES, policy=GatePolicy(advisory=("arc_easy",)))
    gsm = next(r for r in v.suites if r.suite == "gsm8k" and r.primary)
    arc = next(r for r in v.suites if r.suite == "arc_easy" and r.primary)
    assert gsm.p_adjusted == alone.suites[0].p_adjusted and gsm.mde_alpha == alone.suites[0].mde_alpha
    assert arc.p_value == own.suites[0].p_value and arc.p_adjusted == own.suites[0].p_adjusted
    assert "over 2 test(s)" in v.reason  # gsm8k's accuracy and flips, not arc_easy's


def test_a_required_suite_with_zero_items_is_an_error_naming_it() -> None:
    v = decide({**SUITES, "mmlu": (("acc",), [])}, policy=GatePolicy(advisory=("arc_easy",)))
    assert v.verdict == "ERROR" and "mmlu" in v.reason


def test_an_advisory_suite_with_zero_items_is_an_error_row_not_an_error_run() -> None:
    v = decide({"gsm8k": SUITES["gsm8k"], "mmlu": (("acc",), [])}, policy=GatePolicy(advisory=("mmlu",)))
    assert v.verdict == "PASS"
    assert next(r for r in v.suites if r.suite == "mmlu").status == "error"
    assert any("not judged" in n and "mmlu" in n for n in v.notes)


def test_an_advisory_drift_suite_never_gates() -> None:
    v = decide(
        {"gsm8k": SUITES["gsm8k"], "drift": (("loglik", "tokens"), drift_pairs(40, noise=1.0))},
        policy=GatePolicy(advisory=("drift",)),
        kinds={"drift": "drift"},
    )
    assert v.verdict == "PASS"
    kl = next(r for d in v.drift for r in d.rows if r.measure == "kld" and r.gated)
    assert kl.status == "advisory-block" and not kl.significant


def _compare(out: Path, data_dir: Path, *flags: str) -> int:
    return main(["compare", "--engine", "fake", "--suites", "gsm8k,arc_easy", "--limit", "30", "--data-dir",
                 str(data_dir), "--out", str(out), "--skip-kernel-check", *flags])  # fmt: skip


def _longer_for_the_candidate(arm: str, context: str, continuation: str) -> float:
    """The candidate prefers longer choices on ARC's questions (the preflight's probes unchanged)."""
    if arm != "candidate" or "Question:" not in context:
        return shorter_is_likelier(arm, context, continuation)
    return -1.0 / (1 + len(continuation))


def test_an_advisory_suite_through_the_whole_gate_and_its_report(
    tmp_path: Path, data_dir: Path, use: Any
) -> None:
    use(FakeEngine(answer=lambda arm, prompt: "The answer is 42.", logprob=_longer_for_the_candidate))
    out = tmp_path / "run"
    assert _compare(out, data_dir, "--advisory", "arc_easy") == 0
    v = json.loads((out / "verdict.json").read_text())
    assert v["verdict"] == "PASS"
    statuses = {a["suite"]: a["status"] for a in v["agreement"]}
    assert statuses["arc_easy"] == "advisory-block" and statuses["gsm8k"] == "pass"
    assert json.loads((out / "manifest.json").read_text())["request"]["advisory"] == ["arc_easy"]
    assert main(["report", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "ADVISORY-UNDERPOWERED" in summary and "would BLOCK" in summary  # the row, and the note


def test_advisory_from_the_config_and_refused_names(
    tmp_path: Path, data_dir: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    use(FakeEngine(answer=lambda arm, prompt: "The answer is 42.", logprob=_longer_for_the_candidate))
    config = tmp_path / "evalgate.toml"
    config.write_text('[suites.arc_easy]\ntier = "advisory"\n')
    out = tmp_path / "run"
    assert _compare(out, data_dir, "--config", str(config)) == 0
    request = json.loads((out / "manifest.json").read_text())["request"]
    assert request["advisory"] == ["arc_easy"] and "arc_easy" not in request["suite_options"]
    assert _compare(tmp_path / "z", data_dir, "--suite-opt", "gsm8k.tier=optional") == 2
    assert "tier = 'optional': not blocking or advisory" in capsys.readouterr().err
    assert _compare(tmp_path / "x", data_dir, "--advisory", "mmlu") == 2
    assert "--advisory mmlu: not a suite of this run" in capsys.readouterr().err
    assert _compare(tmp_path / "y", data_dir, "--advisory", "gsm8k,arc_easy") == 2
    assert "nothing would gate" in capsys.readouterr().err
