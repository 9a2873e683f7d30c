"""Import hygiene: the statistics load without engines, suites or the runner; no evalgate module
imports another in a cycle (read from the source, and by importing every module in shuffled
orders in fresh interpreters); no module is longer than a reader can hold."""

from __future__ import annotations

import ast
import json
import pkgutil
import random
import subprocess
import sys
from pathlib import Path

import pytest

import evalgate

PACKAGE = Path(evalgate.__file__).resolve().parent
MAX_LINES = 400
STATS_MAY_NOT_LOAD = ("evalgate.engines", "evalgate.suites", "evalgate.run.loop", "evalgate.run.plan",
                      "evalgate.run.schedule", "evalgate.cli")  # fmt: skip


def _modules() -> dict[str, Path]:
    """Every module in the evalgate/ folder, by dotted name, with its source file."""
    out = {"evalgate": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="evalgate."):
        rel = info.name.split(".")[1:]
        path = PACKAGE.joinpath(*rel)
        out[info.name] = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
    return out


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: its top level (inside ``if`` and ``try``
    too), not inside functions or classes, and not under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(block)

    visit(tree.body)
    return found


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the evalgate modules it imports at import time."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base])
                    base = base.strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import evalgate.x.y` of a non-module name
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_stats_loads_no_engine_suite_or_runner() -> None:
    code = "import json, sys, evalgate.stats; print(json.dumps(sorted(sys.modules)))"
    loaded = [m for m in json.loads(_python(code)) if m.startswith("evalgate")]
    assert "evalgate.stats.sequential" in loaded
    heavy = [m for m in loaded if m.startswith(STATS_MAY_NOT_LOAD)]
    assert not heavy, f"import evalgate.stats loads {heavy}"


def test_no_import_cycles_in_the_source() -> None:
    graph = _graph(_modules())
    assert graph["evalgate.run.loop"] >= {
        "evalgate.run.plan",
        "evalgate.run.schedule",
    }  # the parser sees imports
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_finder_reports_the_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_module_imports_first_in_any_order(seed: int) -> None:
    """A cycle breaks only when it is entered from one of its modules: shuffled orders, each in a
    fresh interpreter, enter the graph from different places."""
    names = sorted(m for m in _modules() if not m.endswith(".__main__"))  # that one runs the CLI
    random.Random(seed).shuffle(names)
    _python(f"import importlib\nfor name in {names!r}:\n    importlib.import_module(name)\n")


def test_no_module_is_too_long() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concept (over {MAX_LINES} lines): {long}"
