"""A record's ``extra`` and an arm's ``server`` are typed and documented: every key evalgate writes
is a described field in docs/schemas/, a written unknown key is refused and a read one kept, the
facts the gate and the report read are typed, and what was written is what is read back (no added
nulls, the writers' order)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalgate.engines.sglang._server_info import _KEPT
from evalgate.store.facts import READ, GatewayWorkerFacts, KvCapacity, RecordExtra, ServerFacts
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
    """Keys the code puts into an item's or a result's ``extra`` (the record's ``extra`` is both):
    ``RecordExtra(...)`` and ``.updated(...)`` keywords, dicts validated into one, recorded columns."""
    keys: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
            if func.endswith("RecordExtra") or func.endswith("extra.updated"):
                keys |= {k.arg for k in node.keywords if k.arg is not None}  # type: ignore[union-attr]
            elif (
                isinstance(node, ast.keyword) and node.arg == "recorded" and isinstance(node.value, ast.Tuple)
            ):
                keys |= {
                    e.value for e in node.value.elts if isinstance(e, ast.Constant)
                }  # LmEvalSuite columns
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id == "extra":
                        keys |= _string_keys(node.value)
                        if isinstance(node.value, ast.IfExp):  # {"subject": ...} if grouped else {}
                            keys |= _string_keys(node.value.body)
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


def test_extra_is_written_as_given_and_read_by_field() -> None:
    r = rec(context_length=4096, task="niah", depth=0.5, empty=False, finish_reason=None, no_answer=None)
    line = r.to_json()  # None given by code is "not said": not written
    assert line.endswith('"extra":{"context_length":4096,"task":"niah","depth":0.5,"empty":false}}')
    back = parse_record(line)
    assert back == r and back.extra.context_length == 4096 and back.extra.sent_hash is None
    assert back.extra.to_dict() == json.loads(line)["extra"] and back.extra
    assert rec().extra == RecordExtra() and not rec().extra and json.loads(rec().to_json())["extra"] == {}
    with pytest.raises(ValidationError, match="frozen"):
        back.extra.task = "qa"  # type: ignore[misc]


def test_a_written_unknown_key_is_refused_naming_it_and_a_read_one_kept() -> None:
    with pytest.raises(
        ValidationError, match=r"RecordExtra has no field 'contxt_length' \(did you mean 'context_length'\?\)"
    ):
        rec(contxt_length=4096)  # the old model kept it silently
    with pytest.raises(ValidationError, match="RecordExtra has no field 'future_key'"):
        RecordExtra(empty=True).updated(future_key=1)
    old = '"extra":{"finish_reason":null,"future_key":[1],"context_length":8}}'  # another version's line
    line = rec().to_json().replace('"extra":{}}', old)
    back = parse_record(line)
    assert back.extra.model_extra == {"future_key": [1]} and back.extra.context_length == 8
    assert back.to_json() == line.replace(
        old, '"extra":{"context_length":8,"finish_reason":null,"future_key":[1]}}'
    )
    kept = back.extra.updated(error="timeout")  # a read key survives an update
    assert kept.to_dict() == {
        "context_length": 8,
        "finish_reason": None,
        "error": "timeout",
        "future_key": [1],
    }


def test_an_error_scored_as_wrong_keeps_the_rest() -> None:
    failed = Record("r", "baseline", "bf16", "s", 1, "i", 0, "h", None, None, None, {}, error="timeout",
                    extra={"subject": "law"})  # fmt: skip
    scored = errors_as_wrong({"k": failed}, ["m"])["k"]
    assert scored.extra == RecordExtra(subject="law", error="timeout") and scored.metrics == {"m": 0.0}


def test_server_facts_keep_their_order_and_read_keys_but_refuse_written_ones() -> None:
    given = {"version": "0.5", "capacity": {"kv_tokens": 1}, "cuda_visible_devices": "0", "odd": {"a": 1}}
    facts = ServerFacts.model_validate(given, context=READ)
    assert (
        facts.to_dict() == given
        and list(facts.to_dict()) == list(given)
        and facts.model_extra == {"odd": {"a": 1}}
    )
    assert facts.kv_scales is None and facts.version == "0.5" and facts.capacity == KvCapacity(kv_tokens=1)
    assert not ServerFacts() and facts
    with pytest.raises(ValidationError, match="ServerFacts has no field 'odd'"):
        ServerFacts.model_validate(given)
    with pytest.raises(AttributeError, match="did you mean 'cache_flush'"):
        facts.cache_flsh = {"gsm8k": "flushed"}


def test_the_facts_the_gate_and_report_read_are_typed() -> None:
    facts = ServerFacts(
        capacity={"engine": "sglang", "kv_tokens": 1000, "kv_mib": 360, "pool_sized_by_memory": True},
        kv_scales={"scale": "1.0", "file": None, "log": "Using KV cache scaling factor 1.0"},
        gateway={"url": "http://g", "workers": [{"url": "http://w", "role": "prefill", "healthy": True}]},
    )
    assert facts.kv_pools() == [
        KvCapacity(engine="sglang", kv_tokens=1000, kv_mib=360, pool_sized_by_memory=True)
    ]
    assert facts.kv_scales is not None and facts.kv_scales.scale == "1.0" and facts.kv_scales.file is None
    assert facts.gateway is not None and facts.gateway.workers is not None
    assert facts.gateway.workers[0] == GatewayWorkerFacts(url="http://w", role="prefill", healthy=True)
    assert facts.to_dict()["capacity"] == {
        "engine": "sglang",
        "kv_tokens": 1000,
        "kv_mib": 360,
        "pool_sized_by_memory": True,
    }
    with pytest.raises(ValidationError, match="kv_tokens"):
        ServerFacts(kv_capacity={"kv_tokens": "many"})
    with pytest.raises(ValidationError, match="GatewayWorkerFacts has no field 'rol'"):
        ServerFacts(gateway={"workers": [{"rol": "decode"}]})
