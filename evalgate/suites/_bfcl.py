"""BFCL cases as OpenAI tools, and the two checks on a model's calls.

Berkeley Function Calling Leaderboard (Patil et al., "The Berkeley Function Calling
Leaderboard", 2024; ShishirPatil/gorilla). Its parameter schemas use Python type names, so
they are mapped to JSON Schema before they are sent: ``dict`` -> ``object``, ``float`` ->
``number``, ``tuple`` -> ``array``, and ``any`` is dropped (no type constraint). Two data
quirks that no value could satisfy are repaired: an enum written on an array moves to its items,
and an enum whose values do not fit the declared type is dropped.

- ``validity``: the response is well formed. Checked with the ``jsonschema`` library against
  the tool's schema made strict (objects that declare properties allow no others).
- ``match``: BFCL's AST-style check, re-implemented from its documented rules: the right
  function, every argument among the accepted ground-truth values (strings normalised as BFCL
  does), no unexpected argument, optional ones (accepted value ``""``) may be left out, and
  parallel calls in any order. Differences from BFCL's checker: an int is accepted wherever a
  float is (BFCL does this only at the top level), ``any`` accepts every type, and parallel
  calls are paired by a full search rather than greedily.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

__all__ = [
    "Call",
    "call_matches",
    "match",
    "openai_tools",
    "parse_calls",
    "standardize",
    "strict_schema",
    "to_json_schema",
    "validity",
]

BFCL_TO_JSON = {"dict": "object", "float": "number", "tuple": "array"}
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "float": (float, int),
    "boolean": (bool,),
    "array": (list,),
    "tuple": (list,),
    "dict": (dict,),
}
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "contains")
_SUBSCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")


def _map(schema: Any, fn: Any) -> Any:
    """Apply ``fn`` to every (sub)schema, walking only schema positions (a property may be
    *named* "type")."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _map(v, fn) for k, v in out[key].items()}
    for key in _SUBSCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = _map(out[key], fn)
    for key in _SUBSCHEMA_LIST:
        if isinstance(out.get(key), list):
            out[key] = [_map(v, fn) for v in out[key]]
    return fn(out)


_JSON_TYPE = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


def _fits(value: Any, json_type: str) -> bool:
    got = _JSON_TYPE.get(type(value), "null")
    return got == json_type or (json_type == "number" and got == "integer")


def _bfcl_types(node: dict[str, Any]) -> dict[str, Any]:
    t = node.get("type")
    if t == "any":
        node.pop("type")
    elif isinstance(t, str) and t in BFCL_TO_JSON:
        node["type"] = t = BFCL_TO_JSON[t]
    enum = node.get("enum")
    if isinstance(enum, list) and isinstance(t, str) and not all(_fits(e, t) for e in enum):
        # BFCL quirks no value could satisfy: an array's item enum written on the array (12 live
        # cases) belongs to its items; a boolean or integer with string values ("True", "1"; 71
        # live cases, whose ground truth holds real booleans and integers) loses the enum.
        node.pop("enum")
        if t == "array" and not any(isinstance(e, list) for e in enum):
            node["items"] = {**(node.get("items") or {}), "enum": enum}
    return node


def to_json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema as JSON Schema (``dict``/``float``/``tuple`` mapped, ``any`` dropped)."""
    return _map(parameters, _bfcl_types)  # type: ignore[no-any-return]


def _no_extra(node: dict[str, Any]) -> dict[str, Any]:
    if "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    return node


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """What a call's arguments are validated against: no keys beyond the declared properties."""
    return _map(schema, _no_extra)  # type: ignore[no-any-return]


def openai_tools(functions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as the OpenAI ``tools`` list."""
    return [
        {
            "type": "function",
            "function": {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": to_json_schema(f["parameters"]),
            },
        }
        for f in functions
    ]


@dataclass(frozen=True)
class Call:
    """One tool call as the engine's parser returned it."""

    name: str
    raw_arguments: str
    arguments: Any
    """The parsed arguments, or None when they are not a JSON object."""


def parse_calls(message: dict[str, Any]) -> list[Call]:
    """The calls in an OpenAI chat ``message`` (arguments may come as a string or an object)."""
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        raw = fn.get("arguments")
        if isinstance(raw, dict):
            raw = json.dumps(raw, ensure_ascii=False)
        raw = "" if raw is None else str(raw)
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            args = None
        calls.append(Call(str(fn.get("name") or ""), raw, args if isinstance(args, dict) else None))
    return calls


def validity(calls: Sequence[Call], tools: Sequence[dict[str, Any]], expect: str) -> list[str]:
    """Why the calls are not valid (empty when they are). ``expect`` is 'call', 'any_call'
    or 'no_call'; ``tools`` is the OpenAI tools list that was sent."""
    if expect == "no_call":
        return [f"{len(calls)} call(s) where none was expected"] if calls else []
    if not calls:
        return ["no call where one was expected"]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    problems = []
    for i, call in enumerate(calls, 1):
        where = f"call {i} ({call.name or '?'})"
        if call.arguments is None:
            problems.append(f"{where}: arguments are not a JSON object")
        elif call.name not in schemas:
            problems.append(f"{where}: not an offered tool")
        else:
            validator = Draft202012Validator(strict_schema(schemas[call.name]))
            for err in sorted(validator.iter_errors(call.arguments), key=lambda e: list(e.path))[:3]:
                path = "/".join(str(p) for p in err.path)
                problems.append(f"{where}: {path + ': ' if path else ''}{err.message[:160]}")
    return problems


def standardize(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ``,./-_*^``, lowercase, ' -> "."""
    return re.sub(r"[ ,./\-_*^]", "", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return standardize(value)
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _type_ok(value: Any, btype: str | None, accepted: list[Any]) -> bool:
    if btype is None or btype == "any":
        return True
    want = _PY_TYPES.get(btype, (object,))
    if isinstance(value, bool) and bool not in want:
        return False
    if isinstance(value, want):
        return True
    # BFCL "variables": the ground truth holds a different type (usually a name as a string).
    given = [a for a in accepted if a != ""]
    return bool(given) and type(value) is type(given[0])


def _dict_ok(value: dict[str, Any], option: Any) -> bool:
    """One accepted dict is ``{key: [accepted values]}``; missing keys must accept ``""``."""
    if not isinstance(option, dict):
        return False
    for key, v in value.items():
        if key not in option or _norm(v) not in [_norm(x) for x in option[key]]:
            return False
    return all(k in value or "" in vals for k, vals in option.items())


def _value_ok(value: Any, accepted: list[Any]) -> bool:
    if isinstance(value, dict) and any(isinstance(o, dict) for o in accepted):
        return any(_dict_ok(value, o) for o in accepted if o != "")
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for option in accepted:
            if isinstance(option, list) and len(option) == len(value):
                if all(_dict_ok(v, o) for v, o in zip(value, option, strict=True)):
                    return True
    return _norm(value) in [_norm(a) for a in accepted]


def call_matches(call: Call, expected: dict[str, dict[str, list[Any]]], function: dict[str, Any]) -> bool:
    """BFCL's per-call check against one ground-truth call ``{name: {param: [accepted]}}``."""
    ((name, params),) = expected.items()
    if call.name != name or call.arguments is None:
        return False
    spec = function.get("parameters", {})
    props = spec.get("properties", {})
    if any(r not in call.arguments for r in spec.get("required", [])):
        return False
    for key, value in call.arguments.items():
        if key not in props or key not in params:
            return False
        if not _type_ok(value, props[key].get("type"), params[key]):
            return False
        if not _value_ok(value, params[key]):
            return False
    return all(k in call.arguments or "" in vals for k, vals in params.items())


def match(
    calls: Sequence[Call],
    functions: Sequence[dict[str, Any]],
    ground_truth: list[dict[str, Any]] | None,
    expect: str,
) -> bool:
    """BFCL accuracy for one case: 'no_call' wants no call, 'any_call' at least one decodable
    call (live_relevance), 'call' exactly the ground-truth calls in any order."""
    if expect == "no_call":
        return not calls
    if expect == "any_call":
        return bool(calls) and all(c.arguments is not None for c in calls)
    truth = ground_truth or []
    if len(calls) != len(truth):
        return False
    docs = {f["name"]: f for f in functions}
    ok = [[call_matches(c, t, docs.get(next(iter(t)), {})) for c in calls] for t in truth]
    return _perfect_matching(ok, 0, set())


def _perfect_matching(ok: list[list[bool]], row: int, used: set[int]) -> bool:
    if row == len(ok):
        return True
    for col, good in enumerate(ok[row]):
        if good and col not in used and _perfect_matching(ok, row + 1, used | {col}):
            return True
    return False
