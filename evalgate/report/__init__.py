"""Reports rendered afterwards from a run folder's files (never while scoring)."""

from __future__ import annotations

from pathlib import Path

from evalgate.analysis import RunData, verdict_for
from evalgate.gate import Verdict

__all__ = ["render_run"]


def render_run(run_dir: Path) -> tuple[RunData, Verdict]:
    """Recompute the verdict from the files and write verdict.json beside them."""
    run = RunData(run_dir)
    verdict = verdict_for(run)
    (Path(run_dir) / "verdict.json").write_text(verdict.to_json())
    return run, verdict
