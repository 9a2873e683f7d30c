"""Reports rendered afterwards from a run folder's files (never while scoring).

``render_run`` is the one entry point (``evalgate compare`` at the end, ``evalgate report``
any time later): it recomputes the verdict from manifest.json and items/*.jsonl, builds one
view model, and writes verdict.json, report.html, summary.md and junit.xml beside them.
"""

from __future__ import annotations

from pathlib import Path

from evalgate.gate import Verdict
from evalgate.gate.verdict import RunData, verdict_for
from evalgate.report._view import build_view
from evalgate.report.html import render_html
from evalgate.report.junit import render_junit
from evalgate.report.markdown import render_markdown

__all__ = ["OUTPUTS", "render_run"]

OUTPUTS = ("verdict.json", "report.html", "summary.md", "junit.xml")


def _write(path: Path, text: str) -> None:
    """Atomic, so a crash never leaves a half report that looks complete."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    tmp.replace(path)


def render_run(run_dir: Path) -> tuple[RunData, Verdict]:
    """Recompute the verdict from the files and write every report beside them."""
    run_dir = Path(run_dir)
    run = RunData(run_dir)
    verdict = verdict_for(run)
    _write(run_dir / "verdict.json", verdict.to_json())
    view = build_view(run, verdict)
    _write(run_dir / "report.html", render_html(view))
    _write(run_dir / "summary.md", render_markdown(view))
    _write(run_dir / "junit.xml", render_junit(view))
    return run, verdict
