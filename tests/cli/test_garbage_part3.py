"""Issue #43 (part 3), unclear input to ``plan-power``: suites that name nothing, a drift suite
alone (no accuracy row to plan) and a ``--data-dir`` that is not there are exit 2 naming them,
never a plan for nothing (exit 0)."""

from __future__ import annotations

import pytest

from evalgate.cli import main


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--suites", ""], "names no suite"),
        (["--suites", ",,,"], "names no suite"),
        (["--suites", "drift"], "a drift suite has no accuracy row"),
        (
            ["--data-dir", "/nonexistent/evalgate-data"],
            "--data-dir /nonexistent/evalgate-data is not a folder",
        ),
    ],
    ids=["empty", "commas", "drift-only", "missing-data-dir"],
)
def test_plan_power_refuses_a_plan_for_nothing(
    capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    code = main(["plan-power", "--mde", "0.05", *flags])
    err = capsys.readouterr().err
    assert code == 2 and says in err, err


def test_a_drift_suite_beside_an_accuracy_suite_still_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan-power", "--mde", "0.05", "--suites", "gsm8k,drift"]) == 0
    assert "gsm8k" in capsys.readouterr().out
