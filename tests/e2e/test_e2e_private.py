"""A private exam on the real llama-server (marked e2e): the pair is graded, the report gives
k / n, and no item's text reaches any file of the run. Graders and folder validation are tested
in tests/suites/test_private.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_models
from tests.suites.test_private import write

pytestmark = [pytest.mark.e2e, needs_models]

SECRET_ITEMS = [
    {
        "id": "e1",
        "prompt": "Zorblax question one: reply with the word Quimby.",
        "answer": "Quimby",
        "grader": "exact",
    },
    {
        "id": "n1",
        "prompt": "Zorblax question two: what is 86421000 plus 357?",
        "answer": "86421357",
        "grader": "numeric",
    },
    {
        "id": "c1",
        "prompt": "Zorblax question three: which is a fruit?\nA) Granitequartz\nB) Mangosteenwhirl\nReply with the letter.",
        "answer": "Mangosteenwhirl",  # the text, not the letter: a lone "B" is in every file anyway
        "grader": "choice",
        "choices": ["Granitequartz", "Mangosteenwhirl"],
    },
    {"id": "r1", "prompt": "Zorblax question four: say hello.", "answer": "(?i)hel+o", "grader": "regex"},
]


def _texts() -> list[str]:
    out = []
    for it in SECRET_ITEMS:
        out += [it["prompt"], it["answer"], *it.get("choices", [])]
    return [*out, "Zorblax", "Quimby", "SECRET-SYSTEM-PROMPT"]


def test_private_exam_end_to_end_leaks_nothing(tmp_path: Path) -> None:
    from evalgate.cli import main

    folder = write(tmp_path / "exam", SECRET_ITEMS, 'name = "zx"\nsystem_prompt = "SECRET-SYSTEM-PROMPT"\n')
    run = tmp_path / "run"
    argv = ["compare", "--baseline", "bf16", "--candidate", "bf16", "--suites", f"private:{folder}"]
    assert main([*argv, "--max-gen-tokens", "24", "--out", str(run)]) == 0
    verdict = json.loads((run / "verdict.json").read_text())
    (row,) = [r for r in verdict["suites"] if r["suite"] == "private:zx"]
    assert row["metric"] == "pass" and row["n"] == 4 and row["n10"] == row["n01"] == 0
    leaks = [
        (str(path.relative_to(run)), text)
        for path in run.rglob("*")
        if path.is_file()
        for text in _texts()
        if text in path.read_text(errors="replace")
    ]
    assert leaks == []
