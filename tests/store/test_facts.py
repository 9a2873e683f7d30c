"""A record's ``extra`` and an arm's ``server`` are typed and documented: every key evalgate writes
is a described field in docs/schemas/, the sections read as the dicts they were, unknown keys are
kept, and what was written is what is read back (no added nulls, the writers' order)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from evalgate.engines.sglang._server_info import _KEPT
from evalgate.store.facts import RecordExtra, ServerFacts
from evalgate.store.manifest import load_manifest
from evalgate.store.records import Record, RecordStore, errors_as_wrong, parse_record

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "evalgate"
SCHEMAS = REPO / "docs" / "schemas"
RUNS = sorted(p.parent for p in (REPO / "reports").glob("*/manifest.json"))


def _string_keys(node: ast.AST) -> set[str]:
    return {
        k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant) and isinstance(k.value, str)
    }


def written_extra_keys() -> set[str]:
    """Keys the code puts into an item's or a result's ``extra`` (the record's ``extra`` is both)."""
    keys: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "extra":
                keys |= _string_keys(node.value)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in ("extra", "meta"):
                        keys |= _string_keys(node.value)
                        if isinstance(node.value, ast.IfExp):  # {"subject": ...} if grouped else {}
                            keys |= _string_keys(node.value.body)
                    if (
                        isinstance(t, ast.Subscript)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "extra"
                        and isinstance(t.slice, ast.Constant)
                    ):
                        keys.add(t.slice.value)
    return keys


def written_server_keys() -> set[str]:
    """Keys the engines put into a handle's ``info`` (what ``arm_launched`` records as ``server``)."""
    keys = set(_KEPT) | {"max_total_num_tokens", "memory_usage_gb", "capacity", "server_info_error"}
    for path in (PACKAGE / "engines").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                if ast.unparse(node.value) == "handle.info" and isinstance(node.slice, ast.Constant):
                    keys.add(node.slice.value)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "seen.update" and node.args:
                keys |= _string_keys(node.args[0])  # vLLM's /v1/models
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "info":
                keys |= _string_keys(node.value)  # attach mode
    return keys | {"lm_eval", "cache_flush"}  # an imported run's; the run's own (suite_flushed)


def schema_def(document: str, name: str) -> dict:
    return json.loads((SCHEMAS / f"{document}.schema.json").read_text(encoding="utf-8"))["$defs"][name]


@pytest.mark.parametrize(
    ("document", "name", "written"),
    [("record", "RecordExtra", written_extra_keys), ("manifest", "ServerFacts", written_server_keys)],
)
def test_every_key_written_is_documented(document: str, name: str, written) -> None:
    keys = written()
    assert {"sent_hash", "no_answer", "finish_reason", "context_length"} <= keys or name == "ServerFacts"
    assert {"kv_buffers_mib", "cpu_features", "kv_scales", "urls"} <= keys or name == "RecordExtra"
    schema = schema_def(document, name)
    assert keys - set(schema["properties"]) == set(), "add the key to evalgate/store/facts.py"
    assert all(p.get("description") for p in schema["properties"].values())
    assert schema["additionalProperties"] is True  # unknown keys are kept (see facts.py)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_committed_runs_use_only_documented_keys(run: Path) -> None:
    for arm in load_manifest(run).arms.values():
        assert not arm.server.model_extra, arm.server.model_extra
    for path in RecordStore(run).all_paths():
        for line in path.read_text(encoding="utf-8").splitlines():
            extra = parse_record(line).extra
            assert not extra.model_extra and json.loads(line)["extra"] == extra.to_dict()


def rec(**extra: object) -> Record:
    return Record("r", "baseline", "bf16", "s", 1, "i", 0, "h", None, "x", None, {"m": 1.0}, extra=extra)


def test_extra_reads_as_the_dict_it_was_written_as() -> None:
    r = rec(context_length=4096, task="niah", depth=0.5, empty=False, finish_reason=None, future_key=[1])
    line = r.to_json()
    assert line.endswith(
        '"extra":{"context_length":4096,"task":"niah","depth":0.5,"empty":false,"finish_reason":null,'
        '"future_key":[1]}}'
    )
    back = parse_record(line)
    assert back == r and back.extra.context_length == 4096 and back.extra["future_key"] == [1]
    assert "finish_reason" in back.extra and back.extra.get("finish_reason", "x") is None
    assert (
        "sent_hash" not in back.extra and back.extra.get("sent_hash") is None and back.extra.sent_hash is None
    )
    with pytest.raises(KeyError):
        back.extra["sent_hash"]
    assert dict(back.extra) == {**back.extra} == json.loads(line)["extra"] and len(back.extra) == 6
    assert rec().extra == {} and not rec().extra and json.loads(rec().to_json())["extra"] == {}
    with pytest.raises(Exception, match="frozen"):
        back.extra.task = "qa"  # type: ignore[misc]


def test_an_error_scored_as_wrong_keeps_the_rest() -> None:
    failed = Record("r", "baseline", "bf16", "s", 1, "i", 0, "h", None, None, None, {}, error="timeout",
                    extra={"subject": "law"})  # fmt: skip
    scored = errors_as_wrong({"k": failed}, ["m"])["k"]
    assert scored.extra == {"subject": "law", "error": "timeout"} and scored.metrics == {"m": 0.0}


def test_server_facts_keep_their_order_and_unknown_keys() -> None:
    given = {"version": "0.5", "capacity": {"kv_tokens": 1}, "cuda_visible_devices": "0", "odd": {"a": 1}}
    facts = ServerFacts.model_validate(given)
    assert facts.to_dict() == given and list(facts.to_dict()) == list(given) and facts["odd"] == {"a": 1}
    assert facts.get("kv_scales") is None and "kv_scales" not in facts and facts.version == "0.5"
    assert not ServerFacts() and RecordExtra.model_validate({"x": 1}) == {"x": 1}
