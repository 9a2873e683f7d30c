"""Acceptance (#46): a record's ``extra`` and an arm's ``server`` are read by field, never by key.

Two halves. At runtime the sections have no mapping interface left (``[key]``, ``in``,
iteration, ``**``, ``get``, ``keys``, ``items``), so a reader that still uses one fails on its
first call instead of reading an unchecked key. In the source, outside ``evalgate/store/`` (which
writes the sections to disk), no expression that names a section (``….extra``, ``….server`` and
their typed parts, or a local ``extra``) is subscripted by a string, asked ``.get("…")``,
tested with ``"…" in``, unpacked with ``**`` or turned into a ``dict``: the scan below reads
every module with ``ast`` so such a line is named, with its file and line, before it runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from evalgate.store.facts import (
    GatewayFacts,
    GatewayWorkerFacts,
    KvCapacity,
    KvScales,
    RecordExtra,
    ServerFacts,
)

PACKAGE = Path(__file__).resolve().parents[2] / "evalgate"
SECTIONS = [
    RecordExtra(context_length=8, empty=False),
    ServerFacts(kv_buffers_mib={"total": 1.0}, kv_scales={"scale": "file"}),
    GatewayFacts(url="http://g"),
    GatewayWorkerFacts(url="http://w"),
    KvCapacity(kv_tokens=1),
    KvScales(scale="1.0"),
]
RECEIVER = re.compile(r"(^|\.)(extra|server)(\.(gateway|capacity|kv_capacity|kv_scales|kv_pools\(\)))?$")
"""An expression naming a section: ``r.extra``, ``info.server.gateway``, a local ``extra``."""
MAPPING_METHODS = {"get", "keys", "items", "values", "__getitem__", "__contains__", "setdefault", "pop"}


def _section(node: ast.AST) -> bool:
    return RECEIVER.search(ast.unparse(node)) is not None


def _string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def key_reads(source: str) -> list[tuple[int, str]]:
    """(line, code) of each read of a section by key in ``source``."""
    hits: list[ast.AST] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and _section(node.value) and _string(node.slice):
            hits.append(node)  # extra["error"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MAPPING_METHODS and _section(node.func.value):
                hits.append(node)  # extra.get("error"), server.items()
        elif isinstance(node, ast.Compare) and _string(node.left):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                map(_section, node.comparators)
            ):
                hits.append(node)  # "error" in r.extra
        elif isinstance(node, ast.Dict) and any(
            k is None and _section(v) for k, v in zip(node.keys, node.values, strict=True)
        ):
            hits.append(node)  # {**item.extra, ...}
        elif isinstance(node, ast.Call):
            if any(k.arg is None and _section(k.value) for k in node.keywords):
                hits.append(node)  # f(**extra)
            elif ast.unparse(node.func) == "dict" and len(node.args) == 1 and _section(node.args[0]):
                hits.append(node)  # dict(info.server)
    return sorted((getattr(n, "lineno", 0), ast.unparse(n)) for n in hits)


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: type(s).__name__)
def test_a_section_has_no_mapping_interface(section: object) -> None:
    with pytest.raises(TypeError, match="read by field"):
        section["context_length"]  # type: ignore[index]
    with pytest.raises(TypeError, match="read by field"):
        _ = "context_length" in section  # type: ignore[operator]
    with pytest.raises(TypeError, match="read by field"):
        list(section)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        dict(section)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        _ = {**section}  # type: ignore[dict-item]
    assert not {"get", "keys", "items", "values"} & set(dir(section))


def test_no_section_is_read_by_key_outside_the_store() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}:{line}": code
        for path in sorted(PACKAGE.rglob("*.py"))
        if PACKAGE / "store" not in path.parents
        for line, code in key_reads(path.read_text(encoding="utf-8"))
    }
    assert found == {}, "read the field (record.extra.finish_reason), or add one in evalgate/store/facts.py"


def test_the_scan_finds_each_old_pattern() -> None:
    old = """
if "error" in record.extra or "sent_hash" not in p.baseline.extra:
    value = record.extra.get("context_length")
first = failed[0].extra["error"]
block = info.server.get("capacity")
rows = flatten(dict(value.items()))
merged = {**item.extra, **(res.extra if res else {})}
n = getattr(p, side).extra.get("error")
url = info.server.gateway.get("url")
extra["no_answer"] = True
facts = dict(info.server)
Record(**extra)
"""
    assert [line for line, _ in key_reads(old)] == [2, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]
    fine = """
if record.extra.error is not None and p.baseline.extra.sent_hash is None:
    value = record.extra.context_length
extra = RecordExtra(empty=True)
servers = before.server.servers
rows = flatten(value.to_dict())
kv = {"kv_mib": 1.0}["kv_mib"]
extras = [1, 2]
first = extras[0]
"""
    assert key_reads(fine) == []
