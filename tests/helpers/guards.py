"""What tests/run/test_guards.py and tests/engines/test_guards_http.py share: a private exam whose prompt,
answer and system prompt carry markers that no artifact may hold, both arms' API keys, and
`evalgate compare` on the fake engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main

__all__ = ["EXAMPLE", "KEYS", "MARKERS", "Capture", "N", "compare", "exam"]

N = 12
KEYS = {
    "EVALGATE_BASELINE_API_KEY": "sk-base-SECRETKEY-4f1c",
    "EVALGATE_CANDIDATE_API_KEY": "sk-cand-SECRETKEY-9e2a",
}
MARKERS = ("PROMPT-MARKER-q7x", "ANSWER-MARKER-k2z", "SYSTEM-MARKER-m5w")
EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example"
Capture = pytest.CaptureFixture[str]


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items whose prompt, answer and system prompt carry private markers; the answer is "yes"
    for the fake servers (exact grader), so a clean run passes."""
    folder = tmp_path / "exam"
    folder.mkdir()
    rows = [
        {"id": f"q{i}", "prompt": f"q{i} {MARKERS[0]} tell me", "answer": "yes", "grader": "exact"}
        for i in range(N)
    ]
    rows[0]["answer"] = f"yes {MARKERS[1]}"  # one private answer to keep out of every file
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "exam.toml").write_text(f'name = "exam"\nsystem_prompt = "{MARKERS[2]} be brief"\n')
    return folder


def compare(out: Path, exam: Path, *flags: str) -> int:
    base = ["--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites", f"private:{exam}"]
    return main(["compare", *base, "--out", str(out), *flags])
