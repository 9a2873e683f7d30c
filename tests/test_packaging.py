"""The installed layout: every package folder ships, and the top-level ``kernels/`` folder imports
as ``evalgate.kernels`` only, so the PyPI package ``kernels`` (Hugging Face's kernel loader,
common beside transformers and vLLM) cannot take its place whatever the order of sys.path."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("evalgate", "kernels", "tests", "benchmarks", "scripts")

# Stands in for `pip install kernels`: a top-level package of that name that fails loudly if imported.
FAKE_KERNELS = 'raise ImportError("the fake PyPI kernels package was imported")\n'

PROBE = "import kernels"  # finds the fake: proves it comes first on sys.path

CHECK = """
import json
import evalgate.kernels, evalgate.kernels.fp8_kv.sglang_json
from evalgate.gate import kernel_check_for
from evalgate.variants import parse_variant

print(json.dumps({
    "file": evalgate.kernels.__file__,
    "names": list(evalgate.kernels.KERNEL_NAMES),
    "check": kernel_check_for(parse_variant("int4+fp8kv"), skip=True),
}))
"""


def _folder_packages() -> set[str]:
    """Dotted names of the package folders, as they install (``kernels/x`` -> ``evalgate.kernels.x``)."""
    names = set()
    for top, prefix in (("evalgate", "evalgate"), ("kernels", "evalgate.kernels")):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / top).parts
            names.add(".".join((prefix, *rel)))
    return names


def test_pyproject_lists_every_package_folder_and_maps_kernels() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = setuptools["packages"]
    assert len(listed) == len(set(listed)) and set(listed) == _folder_packages()
    assert setuptools["package-dir"] == {"evalgate.kernels": "kernels"}


IMPORTS_OF_KERNELS = """
import ast, json, sys
from pathlib import Path
repo, tops = Path(sys.argv[1]), sys.argv[2:]
offenders = []
for top in tops:
    for path in sorted((repo / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            else:
                continue
            if any(m == "kernels" or m.startswith("kernels.") for m in mods):
                offenders.append(f"{path.relative_to(repo)}:{node.lineno}")
print(json.dumps(offenders))
"""


def test_nothing_imports_the_top_level_name_kernels() -> None:
    # In a fresh interpreter: CPython 3.11's ast.parse can fail with "AST constructor recursion
    # depth mismatch" when another thread of the test process builds an AST at the same moment
    # (pydantic reads attribute docstrings that way), which made this test flaky.
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS_OF_KERNELS, str(REPO), *SOURCES],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == []


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` in a fresh interpreter, outside the repository, with a fake ``kernels`` first on
    PYTHONPATH."""
    fake = tmp_path / "site"
    (fake / "kernels").mkdir(parents=True, exist_ok=True)
    (fake / "kernels" / "__init__.py").write_text(FAKE_KERNELS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_pypi_kernels_package_does_not_shadow_evalgate_kernels(tmp_path: Path) -> None:
    shadowed = _run(tmp_path, sys.executable, "-c", PROBE)
    assert "fake PyPI kernels" in shadowed.stderr  # the fake is what `import kernels` finds
    proc = _run(tmp_path, sys.executable, "-c", CHECK)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).resolve() == REPO / "kernels" / "__init__.py"
    assert out["names"] == ["fp8_kv", "int4"]
    assert out["check"] == {"kernels": ["fp8_kv", "int4"], "skipped": "--skip-kernel-check"}


def test_the_kernels_cli_runs_evalgates_own_check_beside_a_pypi_kernels(tmp_path: Path) -> None:
    """``evalgate kernels check`` reaches evalgate's check, which rejects an unknown kernel name
    (without torch it stops earlier, naming the extra); it never imports the fake."""
    script = Path(sys.executable).with_name("evalgate")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "evalgate"]
    proc = _run(tmp_path, *cli, "kernels", "check", "--kernels", "nope")
    assert proc.returncode == 2 and "fake PyPI kernels" not in proc.stderr, proc.stderr[-3000:]
    has_torch = all(importlib.util.find_spec(m) for m in ("torch", "triton"))
    assert ("unknown kernel 'nope'" if has_torch else "evalgate[kernels]") in proc.stderr
