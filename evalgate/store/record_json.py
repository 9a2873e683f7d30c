"""A record as one line of strict JSON, whatever numbers and text it carries, and back.

Two things a server (or an imported log) can put into a record have no place in a UTF-8 JSON
line as Python's ``json`` writes it by default:

- **NaN and infinities.** ``json.dumps`` writes bare ``NaN``/``Infinity``, which strict parsers
  (jq, JavaScript, most data tools) reject. Such a value is written as ``null`` and its path and
  kind go into ``extra["nonfinite"]`` (``{"metrics.acc": "nan"}``). Reading puts the float back,
  so the gate sees exactly what it saw before (a non-finite primary metric is an ERROR).
- **A lone UTF-16 surrogate** (``"\\ud800"`` in a server's JSON, or in an exam's id): Python
  holds it in a ``str``, but no UTF-8 file can, so the append raised ``UnicodeEncodeError`` and
  every resume hit it again. Such a line is written ASCII-only (``ensure_ascii``), with the text
  as ``\\uXXXX`` escapes, and ``extra["surrogates"]`` names the fields. Escaping the whole line,
  rather than replacing the surrogate with some other text, keeps every string exact: an item id
  still matches the plan's (pairing and resume work by id), and a response reads back as the
  server sent it. Lines without either are written as before (UTF-8, no escapes), byte for byte.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["NONFINITE", "SURROGATES", "dumps_record", "restore_nonfinite"]

NONFINITE = "nonfinite"
"""``extra`` key: path -> "nan", "inf" or "-inf" of each value written as null."""
SURROGATES = "surrogates"
"""``extra`` key: the paths of the strings holding a lone surrogate (the line is ASCII-only)."""
_KINDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def dumps_record(data: dict[str, Any], default: Callable[[Any], Any]) -> str:
    """``data`` (a record as plain values, ``extra`` a dict) as one line of strict JSON."""
    opts: dict[str, Any] = {"separators": (",", ":"), "default": default, "allow_nan": False}
    try:
        text = json.dumps(data, ensure_ascii=False, **opts)
    except ValueError:  # a NaN or infinity somewhere
        found: dict[str, str] = {}
        data = _finite(data, "", found)
        data["extra"] = {**data["extra"], NONFINITE: found}
        text = json.dumps(data, ensure_ascii=False, **opts)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        where: list[str] = []
        _surrogates(data, "", where)
        data = {**data, "extra": {**data["extra"], SURROGATES: where}}
        text = json.dumps(data, ensure_ascii=True, **opts)
    return text


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _finite(obj: Any, path: str, found: dict[str, str]) -> Any:
    """``obj`` with every NaN or infinity replaced by None, its path and kind put in ``found``."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        found[path] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    if isinstance(obj, dict):
        return {k: _finite(v, _join(path, k), found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_finite(v, _join(path, i), found) for i, v in enumerate(obj)]
    if not isinstance(obj, (str, int)) and callable(getattr(obj, "item", None)):
        try:
            value = obj.item()  # a numpy scalar
        except (TypeError, ValueError):
            return obj
        return _finite(value, path, found) if isinstance(value, float) else value
    return obj


def _bad(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogates(obj: Any, path: str, out: list[str]) -> None:
    if isinstance(obj, str):
        if _bad(obj):
            out.append(path)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and _bad(k):
                out.append(_join(path, k))
            _surrogates(v, _join(path, k), out)
    elif isinstance(obj, (list, tuple, set)):
        for i, v in enumerate(obj):
            _surrogates(v, _join(path, i), out)


def restore_nonfinite(data: dict[str, Any]) -> dict[str, Any]:
    """A parsed record with each value listed in ``extra["nonfinite"]`` (and written as null) set
    back to its float, so a reader sees the record as it was before it was written."""
    extra = data.get("extra")
    listed = extra.get(NONFINITE) if isinstance(extra, dict) else None
    if isinstance(listed, dict):
        for path, kind in listed.items():
            if isinstance(path, str) and kind in _KINDS:
                _put(data, path.split("."), _KINDS[kind])
    return data


def _put(node: Any, parts: list[str], value: float) -> bool:
    """Set the null at ``parts`` (dict keys may hold dots: each split is tried) to ``value``."""
    if isinstance(node, list):
        if not parts[0].isdigit() or int(parts[0]) >= len(node):
            return False
        i = int(parts[0])
        if len(parts) == 1:
            if node[i] is None:
                node[i] = value
                return True
            return False
        return _put(node[i], parts[1:], value)
    if isinstance(node, dict):
        for j in range(1, len(parts) + 1):
            key = ".".join(parts[:j])
            if key not in node:
                continue
            if j == len(parts):
                if node[key] is None:
                    node[key] = value
                    return True
            elif _put(node[key], parts[j:], value):
                return True
    return False
