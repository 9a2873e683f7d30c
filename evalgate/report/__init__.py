"""Reports rendered afterwards from a run folder's files (never while scoring).

``render_run`` is the one entry point (``evalgate compare`` at the end, ``evalgate report``
any time later): it recomputes the verdict from manifest.json and items/*.jsonl, builds one
view model, and writes verdict.json, report.html, summary.md and junit.xml beside them.
The notes of an lm-eval import (a run chosen among several, a results file missing, a metric
converted) join the verdict's notes, so the terminal and summary.md carry them as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalgate.gate import RunData, Verdict, verdict_for
from evalgate.report._view import build_view
from evalgate.report.html import render_html
from evalgate.report.junit import render_junit
from evalgate.report.markdown import render_markdown
from evalgate.store.files import write_atomic
from evalgate.store.manifest import Manifest

__all__ = ["OUTPUTS", "import_notes", "render_run"]

OUTPUTS = ("verdict.json", "report.html", "summary.md", "junit.xml")


def _write(path: Path, text: str) -> None:
    """Atomic, so a crash never leaves a half report that looks complete; the temporary file is
    never opened through a link planted in the run folder (``write_atomic``)."""
    write_atomic(path, text)


def import_notes(manifest: Manifest) -> list[str]:
    """The manifest's import notes (``imported["notes"]`` and each arm's ``imported[arm]["notes"]``),
    each naming its arm: they change how the result reads, so every output shows them."""
    imported: Any = manifest.imported
    if not isinstance(imported, Mapping):
        return []
    out: list[str] = []
    for where, value in [("", imported), *imported.items()]:
        notes = value.get("notes") if isinstance(value, Mapping) else None
        for note in notes if isinstance(notes, list) else []:
            text = str(note)
            if where and not text.startswith((f"{where}:", f"{where} ")):
                text = f"{where}: {text}"
            if text not in out:
                out.append(text)
    return out


def render_run(run_dir: Path) -> tuple[RunData, Verdict]:
    """Recompute the verdict from the files and write every report beside them."""
    run_dir = Path(run_dir)
    run = RunData(run_dir)
    verdict = verdict_for(run)
    verdict.notes[:0] = [n for n in import_notes(run.manifest) if n not in verdict.notes]
    _write(run_dir / "verdict.json", verdict.to_json())
    view = build_view(run, verdict)
    _write(run_dir / "report.html", render_html(view))
    _write(run_dir / "summary.md", render_markdown(view))
    _write(run_dir / "junit.xml", render_junit(view))
    return run, verdict
