"""What the engine and suite contract tests share: finding ``getattr(x, "name")``-style probes in
source by walking its syntax tree, each test deciding which calls count."""

from __future__ import annotations

import ast
from collections.abc import Callable

__all__ = ["named", "probe_calls"]


def named(node: ast.AST) -> str:
    """The last name of ``x``, ``a.b.x`` or ``x[...]``, lower-cased ('' for anything else)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id.lower()
    return node.attr.lower() if isinstance(node, ast.Attribute) else ""


def probe_calls(source: str, counts: Callable[[str, ast.Call], bool]) -> list[str]:
    """Each call of a bare function name with two or more arguments for which ``counts(name, call)``
    holds, as "line: source"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            if counts(node.func.id, node):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found
