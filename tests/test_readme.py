"""The README opens with the two commands a fresh machine needs, and CI runs the second one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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


def test_readme_installs_the_portable_llamacpp_build() -> None:
    """The SIGILL diagnosis tells users to reinstall with PORTABLE_CMAKE_ARGS: it must be what the
    README's two commands (and so CI) build with."""
    from evalgate.engines.llamacpp import PORTABLE_CMAKE_ARGS

    blocks = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    for block in blocks[:2]:
        assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in block
