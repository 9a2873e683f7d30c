"""Where tests live: every test that starts a real server (llama-server, SGLang) is in tests/e2e/
and marked, so `-m "not e2e"` is the fast tier and CI can time the tiers apart (.ci/run).

A module outside tests/e2e/ fails here when it uses the real-server markers or skip conditions
(``needs_models``, ``needs_server``, ``pytest.mark.e2e`` / ``sglang_cpu``), calls the real binary
(``find_binary()``) or borrows an e2e module's fixtures; every tests/e2e module carries ``e2e`` in
its module ``pytestmark``, and those that run real SGLang carry ``sglang_cpu`` too.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
E2E = TESTS / "e2e"

REAL_SERVER_NAMES = frozenset(
    {
        "needs_models",
        "needs_server",
        "needs_sglang_cpu",
        "have_models",
        "have_llama_server",
        "have_sglang_cpu",
    }
)
REAL_SERVER_MARKS = frozenset({"e2e", "sglang_cpu"})
REAL_BINARY_CALLS = frozenset({"find_binary"})
# what starts real SGLang on the CPU: a module naming one of these needs the sglang_cpu mark
SGLANG_CPU_NAMES = frozenset({"SGLangCPUEngine", "needs_sglang_cpu", "have_sglang_cpu"})


def real_server_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each use of the real-server tier's markers, skip conditions, binary or
    e2e fixtures in one module's source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in REAL_SERVER_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in REAL_SERVER_NAMES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").startswith("tests.e2e"):
                found.append((node.lineno, f"from {node.module} import ..."))
            found += [(node.lineno, a.name) for a in node.names if a.name in REAL_SERVER_NAMES]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in REAL_SERVER_MARKS
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"
        ):
            found.append((node.lineno, f"mark.{node.attr}"))
        elif isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in REAL_BINARY_CALLS:
                found.append((node.lineno, f"{name}()"))
    return sorted(set(found))


def test_modules_outside_e2e_start_no_real_server() -> None:
    offences = [
        f"{path.relative_to(TESTS.parent)}:{line}: {what}"
        for path in sorted(TESTS.rglob("test_*.py"))
        if E2E not in path.parents
        for line, what in real_server_uses(path.read_text())
    ]
    assert offences == [], "move these tests to tests/e2e/ (marked e2e):\n" + "\n".join(offences)


@pytest.mark.parametrize(
    "source",
    [
        "import pytest\n@pytest.mark.e2e\ndef test_x(): ...\n",
        "import pytest\npytestmark = pytest.mark.sglang_cpu\n",
        "from tests.conftest import needs_models\n",
        "from tests import conftest\nskip = conftest.needs_server\n",
        "from evalgate.engines.llamacpp import find_binary\ncmd = [str(find_binary())]\n",
        "from tests.e2e.test_e2e_sglang_shim import upstream\n",
    ],
)
def test_the_check_sees_each_kind_of_real_server_use(source: str) -> None:
    assert real_server_uses(source)


def test_the_check_passes_unit_tests_that_stub_the_binary() -> None:
    stubbed = 'monkeypatch.setattr("evalgate.engines.llamacpp.find_binary", lambda name="": "/bin/true")\n'
    assert real_server_uses(stubbed) == []
    assert real_server_uses("if request.node.get_closest_marker('e2e'): ...\n") == []


def module_marks(path: Path) -> set[str]:
    module = importlib.import_module(".".join(path.relative_to(TESTS.parent).with_suffix("").parts))
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    return {getattr(m, "mark", m).name for m in marks}


E2E_MODULES = sorted(E2E.glob("test_*.py"))


@pytest.mark.parametrize("path", E2E_MODULES, ids=[p.name for p in E2E_MODULES])
def test_every_e2e_module_is_marked_e2e(path: Path) -> None:
    marks = module_marks(path)
    assert "e2e" in marks, f"{path.name}: add pytestmark = [pytest.mark.e2e, ...] at module level"
    names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
    if names & SGLANG_CPU_NAMES:
        assert "sglang_cpu" in marks, f"{path.name} runs real SGLang: mark it sglang_cpu too"
