"""The report never contradicts the verdict (#31): a suite in ERROR says why it was not judged, in
full, in report.html, summary.md and on the terminal; "The arms agree on every item" only when the
gated values are equal on every item; an lm-eval import's notes reach the console and summary.md;
an exported CSV holds no spreadsheet formula (#32).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import html5lib
import pytest
from markupsafe import escape
from rich.console import Console

from evalgate.cli import main
from evalgate.report import render_run
from evalgate.report.terminal import print_verdict
from evalgate.store.records import RecordStore
from tests.helpers.runs import SynthSuite, build_run
from tests.helpers.samples import compare_to_bf16

AGREE = "The arms agree on every item."
METRICS = ("exact_match,flexible-extract", "exact_match,strict-match")
LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _set_metrics(
    run_dir: Path, suite: str, arm: str, change: Callable[[int, dict[str, Any]], dict[str, Any]]
) -> None:
    """Rewrite one arm's records with other metric values (a garbage or missing value)."""
    path = RecordStore(run_dir).path(suite, arm)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row["metrics"] = change(i, row["metrics"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _terminal(verdict: Any) -> str:
    console = Console(record=True, width=100)
    print_verdict(verdict, console)
    return _flat(console.export_text())


def _rows(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {r["metric"]: r for r in json.loads((run_dir / "verdict.json").read_text())["suites"]}


def test_an_error_suite_says_why_in_full_and_never_that_the_arms_agree(tmp_path: Path) -> None:
    """Scores on [0, 1] that differ on every item but never cross 0.5, in a suite declared binary:
    ERROR. The report used to say "The arms agree on every item" and cut the secondary row's reason."""
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10), metrics=METRICS)])
    _set_metrics(run_dir, "gsm8k", "baseline", lambda i, m: {k: 0.1 for k in m})
    _set_metrics(run_dir, "gsm8k", "candidate", lambda i, m: {k: 0.2 for k in m})
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "ERROR"
    primary, secondary = (_rows(run_dir)[m] for m in METRICS)
    why = primary["reason"]
    assert primary["status"] == "error" and "not 0 or 1" in why
    assert secondary["reason"] == f"not judged: the suite's primary metric cannot be judged: {why}"

    page = (run_dir / "report.html").read_text(encoding="utf-8")
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    assert AGREE not in page
    assert "the exact_match,flexible-extract values differ on 20 of 20 items" in page
    assert f'<p class="not-judged">Not judged: {escape(why)}</p>' in page  # the item section
    assert f'<p class="not-judged">gsm8k was not judged: {escape(why.removeprefix("gsm8k: "))}</p>' in page

    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    assert f"gsm8k was not judged: {_flat(why.removeprefix('gsm8k: '))}" in _flat(summary.replace("\\", ""))
    assert _flat(why) in _terminal(verdict)  # in the verdict's reason, which it is here


def test_a_suite_whose_reference_failed_says_why_beside_another_verdict_reason(tmp_path: Path) -> None:
    """The verdict's reason is the incomplete run; the suite's own reason is still shown, in full."""
    run_dir = build_run(
        tmp_path / "run", [SynthSuite("gsm8k", (6, 0, 0, 4), metrics=METRICS, errors={"baseline": 10})]
    )
    _, verdict = render_run(run_dir)
    why = _rows(run_dir)[METRICS[0]]["reason"]
    assert verdict.verdict == "ERROR" and "on the baseline" in why
    assert why not in verdict.reason
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert AGREE not in page and "No paired items." in page  # a failed item is not paired
    assert f"gsm8k was not judged: {why.removeprefix('gsm8k: ')}" in page
    summary = _flat((run_dir / "summary.md").read_text(encoding="utf-8").replace("\\", ""))
    assert f"gsm8k was not judged: {_flat(why.removeprefix('gsm8k: '))}" in summary
    assert f"gsm8k was not judged: {why.removeprefix('gsm8k: ')}" in _terminal(verdict)


def test_missing_values_on_some_items_are_not_agreement(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10), metrics=METRICS)])
    _set_metrics(run_dir, "gsm8k", "candidate", lambda i, m: {METRICS[1]: 1.0} if i < 3 else m)
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "ERROR"
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert AGREE not in page and "3 of 20 items have no usable exact_match,flexible-extract value" in page


def test_equal_values_on_every_item_still_agree(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10), metrics=METRICS)])
    _, verdict = render_run(run_dir)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert verdict.verdict != "ERROR" and AGREE in page and "not-judged" not in page.split("</style>", 1)[1]


def test_import_notes_reach_the_terminal_and_summary(tmp_path: Path) -> None:
    extra = {
        "imported": {
            "from": "lm-eval --log_samples",
            "baseline": {"notes": ["baseline: 2 lm-eval runs found; the newest (2026-01-02) is used"]},
            "candidate": {"notes": ["acc converted from percent"]},
        }
    }
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (10, 0, 0, 10))], extra=extra)
    _, verdict = render_run(run_dir)
    wanted = [
        "baseline: 2 lm-eval runs found; the newest (2026-01-02) is used",
        "candidate: acc converted from percent",
    ]
    assert verdict.notes[:2] == wanted
    terminal = _terminal(verdict)
    summary = (run_dir / "summary.md").read_text(encoding="utf-8")
    for note in wanted:
        assert f"note: {note}" in terminal and f"> note: {note}" in summary
    render_run(run_dir)  # a re-render adds nothing twice
    assert json.loads((run_dir / "verdict.json").read_text())["notes"][:2] == wanted


def test_an_lmeval_import_prints_its_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A samples folder without its results file: the note says so on the console and in summary.md."""
    monkeypatch.setenv("COLUMNS", "400")
    cand = tmp_path / "int4"
    shutil.copytree(LMEVAL / "int4", cand)
    for f in cand.rglob("results_*.json"):
        f.unlink()
    out = tmp_path / "run"
    code = compare_to_bf16(cand, out)
    assert code in (0, 1, 3)
    manifest = json.loads((out / "manifest.json").read_text())
    notes = manifest["imported"]["candidate"]["notes"]
    assert notes
    console = _flat(capsys.readouterr().out)
    summary = _flat((out / "summary.md").read_text(encoding="utf-8").replace("\\", ""))
    for note in notes:
        shown = note if note.startswith("candidate") else f"candidate: {note}"
        assert f"note: {_flat(shown)}" in console
        assert _flat(shown) in summary


def test_csv_export_escapes_formula_cells_and_parquet_keeps_them(tmp_path: Path) -> None:
    formulas = ['=HYPERLINK("http://x.invalid","click")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]

    def text(arm: str, i: int, correct: bool) -> str:
        return formulas[i % len(formulas)] if arm == "candidate" else f"#### {40 + i % 7}"

    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (6, 0, 0, 0), text=text)])
    render_run(run_dir)
    assert main(["export", str(run_dir), "--format", "csv", "--out", str(tmp_path / "csv")]) == 0
    import pandas as pd

    items = pd.read_csv(tmp_path / "csv" / "items.csv", keep_default_na=False)
    responses = set(items[items["arm"] == "candidate"]["response"])
    assert responses == {"'" + f for f in formulas}
    for name in ("items", "pairs", "verdict"):
        for line in (tmp_path / "csv" / f"{name}.csv").read_text(encoding="utf-8").splitlines():
            for cell in line.split(","):
                assert not cell.lstrip('"').startswith(("=", "+", "@")), (name, line)
    assert all(isinstance(v, float) for v in items["score"])  # numbers stay numbers
    pytest.importorskip("pyarrow")
    assert main(["export", str(run_dir), "--format", "parquet", "--out", str(tmp_path / "pq")]) == 0
    kept = pd.read_parquet(tmp_path / "pq" / "items.parquet")
    assert set(kept[kept["arm"] == "candidate"]["response"]) == set(formulas)
