""".ci/run in a scratch repository whose README command is a tiny pytest run: each ` && ` part is
timed, pytest's tiers are totalled by tests/helpers/phase_timer.py without a line after pytest's
summary, the table ends the output, and a failing part (pytest's exit 5 too) fails CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TESTS = """import pytest

def test_fast():
    pass

@pytest.mark.e2e
def test_slow():
    pass

@pytest.mark.e2e
@pytest.mark.sglang_cpu
def test_sglang():
    pass
"""


def scratch_repo(root: Path, command: str) -> Path:
    (root / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    (root / "tests" / "helpers").mkdir(parents=True)
    for name in ("__init__.py", "helpers/__init__.py", "helpers/phase_timer.py"):
        shutil.copy(REPO / "tests" / name, root / "tests" / name)
    (root / "README.md").write_text(
        f"# x\n\n<!-- test-command -->\n```bash\n{command}\n```\n<!-- /test-command -->\n"
    )
    (root / "t").mkdir()
    (root / "t" / "test_tiers.py").write_text(TESTS)
    (root / "t" / "conftest.py").write_text(
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'e2e: x')\n"
        "    config.addinivalue_line('markers', 'sglang_cpu: x')\n"
    )
    bin_dir = root / "fakebin"
    bin_dir.mkdir()
    scripts = {name: f'exec "{sys.executable}" "$@"' for name in ("python", "python3")}  # this venv's
    scripts |= {name: f"echo {name} ok" for name in ("chromium", "ruff")}  # no apt-get; lint passes
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return bin_dir


def ci(root: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_PLUGINS", "EVALGATE_PHASE_TIMES")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(
        ["bash", str(root / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=120
    )


def test_each_part_and_tier_is_timed_after_pytests_own_summary(tmp_path: Path) -> None:
    command = 'X="a && b" true && . .venv/bin/activate && python -m pytest -q -p no:cacheprovider t'
    proc = ci(tmp_path, scratch_repo(tmp_path, command))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    summary = next(i for i, line in enumerate(lines) if " passed in " in line)
    assert lines[summary].startswith("3 passed") and lines[summary + 1] == "+ ruff"  # nothing after it
    table = "\n".join(lines[lines.index("CI phases (wall seconds)") :])
    for row in ("true", ". .venv/bin/activate", "python -m pytest -q -p no:cacheprovider t",
                "fast tests (1 passed", "e2e tests (1 passed", "sglang_cpu tests (1 passed",
                "ruff check .", "ruff format --check ."):  # fmt: skip
        assert row in table, (row, table)
    totals = [line.split()[0] for line in lines if " total " in line]
    assert totals == ["install", "tests", "lint", "all"]
    slowest = lines.index("slowest 3 tests (setup + call + teardown, seconds)")
    assert {line.split()[-1] for line in lines[slowest + 1 : slowest + 4]} == {
        "t/test_tiers.py::test_fast", "t/test_tiers.py::test_slow", "t/test_tiers.py::test_sglang"}  # fmt: skip
    assert lines[-1] == "tests: 3 passed, 0 failed, 0 skipped"  # the plain closing line CI reads


def test_two_pytest_runs_each_get_their_tiers_and_xdist_reports_the_markers(tmp_path: Path) -> None:
    """The README's shape: the fast tier over 2 pytest-xdist workers, then the server tests alone.
    The controller collects nothing, so the tiers come from the reports' keywords."""
    run = "python -m pytest -q -p no:cacheprovider"
    command = f'. .venv/bin/activate && {run} -n 2 -m "not e2e" t && {run} -m e2e t'
    proc = ci(tmp_path, scratch_repo(tmp_path, command))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    table = lines[lines.index("CI phases (wall seconds)") :]
    first = next(i for i, line in enumerate(table) if "-n 2" in line)
    second = next(i for i, line in enumerate(table) if "-m e2e t" in line)
    assert first < second
    assert any("fast tests (1 passed, 0 failed, 0 skipped, test seconds over 2 workers)" in line
               for line in table[first:second])  # fmt: skip
    below = table[second : second + 4]
    assert any("e2e tests (1 passed" in line for line in below), table
    assert any("sglang_cpu tests (1 passed" in line for line in below), table
    assert not any("fast tests" in line for line in below), table
    assert lines[-1] == "tests: 3 passed, 0 failed, 0 skipped"


@pytest.mark.parametrize(("tests", "code"), [("empty", 5), ("t", 1)])
def test_a_failing_part_fails_ci_and_still_prints_the_table(tmp_path: Path, tests: str, code: int) -> None:
    bin_dir = scratch_repo(
        tmp_path, f". .venv/bin/activate && python -m pytest -q -p no:cacheprovider {tests}"
    )
    (tmp_path / "empty").mkdir()
    if code == 1:
        (tmp_path / "t" / "test_tiers.py").write_text("def test_no():\n    assert False\n")
    proc = ci(tmp_path, bin_dir)
    assert proc.returncode == code
    assert ("collected no tests (exit 5)" in proc.stderr) == (code == 5)
    assert f"[exit {code}]" in proc.stdout and "CI phases" in proc.stdout
    assert "ruff ok" not in proc.stdout  # the rest did not run
