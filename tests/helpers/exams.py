"""A private exam on disk for the fake-engine tests: the smallest suite a compare can run."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["number_exam", "yes_exam"]


def yes_exam(folder: Path, n: int) -> Path:
    """``folder`` as an exam of ``n`` items q0..q(n-1) whose right answer is "yes" (exact grader),
    named after the folder (no exam.toml)."""
    folder.mkdir(parents=True)
    rows = [{"id": f"q{i}", "prompt": f"q{i}", "answer": "yes", "grader": "exact"} for i in range(n)]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def number_exam(folder: Path, answer: str, n: int) -> str:
    """``folder`` as an exam of ``n`` items "Is i a number?" whose right answer is ``answer`` (exact
    grader); the --suites value that names it."""
    folder.mkdir()
    rows = [
        {"id": f"q{i}", "prompt": f"Is {i} a number?", "answer": answer, "grader": "exact"} for i in range(n)
    ]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"private:{folder}"
