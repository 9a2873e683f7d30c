"""Issue #43 (part 3, continued): a drift-only (perplexity-only) lm-eval import has no accuracy
row, so report.html and summary.md print no empty Suites table (as the terminal already does),
and its drift panel says nothing of a KL it does not have."""

from __future__ import annotations

from pathlib import Path

from evalgate.cli import main

ROLLING = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval" / "rolling"


def _imported(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    code = main(["compare", "--baseline-samples", str(ROLLING / "bf16"), "--candidate-samples",
                 str(ROLLING / "int4"), "--out", str(out)])  # fmt: skip
    assert code in (0, 1, 4)
    return out


def test_a_drift_only_import_prints_no_empty_suites_table(tmp_path: Path) -> None:
    out = _imported(tmp_path)
    html = (out / "report.html").read_text()
    md = (out / "summary.md").read_text()
    assert 'id="suites"' not in html and 'href="#suites"' not in html
    assert "| suite | metric |" not in md
    assert "distribution drift" in html and "perplexity" in md.lower()  # the drift panel stays


def test_a_drift_panel_without_distributions_says_nothing_of_kl(tmp_path: Path) -> None:
    out = _imported(tmp_path)
    html = (out / "report.html").read_text()
    assert "KL(baseline" not in html and "top-k lists" not in html
    assert "Perplexity ratio = candidate over baseline" in html
