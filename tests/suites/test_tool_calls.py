"""tool_calls: BFCL schema mapping, validity and match on recorded llama-server replies, the suite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalgate.engines.client import RequestFailed
from evalgate.errors import ConfigError
from evalgate.suites import SuiteOptions, default_registry
from evalgate.suites._base import Item
from evalgate.suites._bfcl import (
    Call,
    call_matches,
    match,
    openai_tools,
    parse_calls,
    standardize,
    strict_schema,
    to_json_schema,
    validity,
)
from evalgate.suites.tool_calls import (
    PREFILL,
    ToolCallSettings,
    ToolCallSuite,
    build_request,
    recorded_message,
    score,
    tool_calls,
    tool_prefill,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tool_calls"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def scored(name: str) -> tuple[dict[str, float], dict[str, Any]]:
    fx = fixture(name)
    message = fx["response"]["choices"][0]["message"]
    return score(message, fx["case"], fx["request"].get("tools", []))


# -- schema mapping ---------------------------------------------------------------------------
def test_bfcl_types_map_to_json_schema() -> None:
    bfcl = {
        "type": "dict",
        "required": ["a"],
        "properties": {
            "a": {"type": "float"},
            "b": {"type": "tuple", "items": {"type": "float"}},
            "c": {"type": "any", "description": "anything"},
            "d": {"type": "dict", "properties": {"e": {"type": "integer"}}},
            "type": {"type": "string", "enum": ["dict", "float"]},  # a parameter *named* type
        },
    }
    out = to_json_schema(bfcl)
    assert out["type"] == "object"
    props = out["properties"]
    assert props["a"] == {"type": "number"}
    assert props["b"] == {"type": "array", "items": {"type": "number"}}
    assert props["c"] == {"description": "anything"}
    assert props["d"]["type"] == "object" and props["d"]["properties"]["e"] == {"type": "integer"}
    assert props["type"] == {"type": "string", "enum": ["dict", "float"]}
    assert bfcl["type"] == "dict" and bfcl["properties"]["a"]["type"] == "float"  # input untouched


def test_strict_schema_forbids_unknown_keys_only_where_properties_are_declared() -> None:
    schema = {
        "type": "object",
        "properties": {"p": {"type": "object"}, "q": {"type": "object", "properties": {}}},
    }
    strict = strict_schema(schema)
    assert strict["additionalProperties"] is False
    assert "additionalProperties" not in strict["properties"]["p"]  # a free-form dict stays free
    assert strict["properties"]["q"]["additionalProperties"] is False
    assert "additionalProperties" not in schema


def test_unsatisfiable_bfcl_enums_are_repaired() -> None:
    bfcl = {
        "type": "dict",
        "properties": {
            "metrics": {"type": "array", "items": {"type": "string"}, "enum": ["buzz", "trust"]},
            "smoking": {"type": "boolean", "enum": ["True", "False", "dontcare"]},
            "rooms": {"type": "integer", "enum": ["1", "2"]},
            "unit": {"type": "string", "enum": ["C", "F"]},
            "scale": {"type": "float", "enum": [1, 2.5]},
        },
    }
    props = to_json_schema(bfcl)["properties"]
    assert props["metrics"] == {"type": "array", "items": {"type": "string", "enum": ["buzz", "trust"]}}
    assert props["smoking"] == {"type": "boolean"} and props["rooms"] == {"type": "integer"}
    assert props["unit"]["enum"] == ["C", "F"] and props["scale"]["enum"] == [1, 2.5]


def test_openai_tools_shape() -> None:
    tools = openai_tools(
        [{"name": "f.g", "description": "d", "parameters": {"type": "dict", "properties": {}}}]
    )
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "f.g",
                "description": "d",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _nodes(schema: Any) -> list[dict[str, Any]]:
    if not isinstance(schema, dict):
        return []
    out = [schema]
    for sub in (schema.get("properties") or {}).values():
        out += _nodes(sub)
    return out + _nodes(schema.get("items"))


def test_every_shared_case_maps_to_a_valid_json_schema(data_dir: Path) -> None:
    from jsonschema import Draft202012Validator

    cases = tool_calls().cases(SuiteOptions(data_dir=data_dir))
    assert len(cases) == 3491
    schemas = [strict_schema(t["function"]["parameters"]) for c in cases for t in openai_tools(c["function"])]
    nodes = [node for schema in schemas for node in _nodes(schema)]  # a property may be *named* type
    assert {node["type"] for node in nodes if "type" in node} <= JSON_TYPES
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA)  # check_schema; 2 ms each, so a sample
    assert [i for i in range(0, len(schemas), 17) if not meta.is_valid(schemas[i])] == []
    assert not meta.is_valid({"type": "object", "properties": {"x": {"type": "float"}}})
    enums = [(e, node["type"]) for node in nodes if "enum" in node and "type" in node for e in node["enum"]]
    assert enums and all(Draft202012Validator({"type": t}).is_valid(e) for e, t in enums)


# -- validity and match on recorded real replies ------------------------------------------------
def test_valid_repeated_call() -> None:
    metrics, extracted = scored("valid_repeated_call")
    assert metrics == {"valid": 1.0, "match": 0.0, "decision": 1.0}  # two identical calls: BFCL wants one
    assert extracted["problems"] == [] and len(extracted["calls"]) == 2


def test_truncated_arguments_are_invalid() -> None:
    fx = fixture("truncated_arguments")
    assert fx["response"]["choices"][0]["finish_reason"] == "length"
    metrics, extracted = scored("truncated_arguments")
    assert metrics["valid"] == 0.0 and metrics["match"] == 0.0
    assert "arguments are not a JSON object" in extracted["problems"][-1]


def test_schema_violations_in_a_real_reply_are_reported() -> None:
    # The grammar behind tool_choice=required keeps this engine's calls schema-shaped, so the
    # violations are injected into a real reply: an unknown key, a wrong type, a missing key.
    fx = fixture("valid_repeated_call")
    message = json.loads(json.dumps(fx["response"]["choices"][0]["message"]))
    first, second = (tc["function"] for tc in message["tool_calls"])
    first["arguments"] = first["arguments"].replace(
        '"number_of_trials": 8', '"number_of_trials": "8", "coin": 1'
    )
    second["arguments"] = second["arguments"].replace('"number_of_successes": 5,', "")
    metrics, extracted = score(message, fx["case"], fx["request"]["tools"])
    assert metrics["valid"] == 0.0
    text = " | ".join(extracted["problems"])
    assert "call 1 (calculate_binomial_probability): Additional properties are not allowed ('coin'" in text
    assert "number_of_trials: '8' is not of type 'integer'" in text
    assert "call 2 (calculate_binomial_probability): 'number_of_successes' is a required property" in text


def test_irrelevance_forced_call_is_invalid_and_no_call_is_valid() -> None:
    forced, _ = scored("irrelevance_forced_call")
    assert forced == {"valid": 0.0, "match": 0.0, "decision": 0.0}
    free, extracted = scored("irrelevance_no_call")
    assert free == {"valid": 1.0, "match": 1.0, "decision": 1.0} and extracted["calls"] == []


def test_missing_call_where_one_is_expected() -> None:
    metrics, extracted = scored("relevant_no_call")
    assert metrics == {"valid": 0.0, "match": 0.0, "decision": 0.0}
    assert extracted["problems"] == ["no call where one was expected"]


def test_no_tools_offered_sends_plain_chat() -> None:
    fx = fixture("no_tools_offered")
    assert "tools" not in fx["request"] and fx["request"]["messages"][-1]["role"] == "user"
    metrics, _ = scored("no_tools_offered")
    assert metrics["valid"] == 1.0


def test_parallel_calls_match_in_any_order() -> None:
    fx = fixture("parallel_two_calls")
    case, message = fx["case"], fx["response"]["choices"][0]["message"]
    metrics, _ = scored("parallel_two_calls")
    assert metrics == {"valid": 1.0, "match": 0.0, "decision": 1.0}  # Boston came back in celsius
    # The same reply with Boston's unit left out (it is optional) matches, in either order.
    fixed = json.loads(json.dumps(message))
    boston = fixed["tool_calls"][0]["function"]
    boston["arguments"] = json.dumps({"location": "Boston, MA"})
    assert score(fixed, case, fx["request"]["tools"])[0]["match"] == 1.0
    fixed["tool_calls"].reverse()
    assert score(fixed, case, fx["request"]["tools"])[0]["match"] == 1.0


def test_recorded_message_drops_random_ids() -> None:
    fx = fixture("valid_repeated_call")
    choice = fx["response"]["choices"][0]
    kept = recorded_message(choice["message"], choice["finish_reason"])
    assert "id" not in json.dumps(kept["tool_calls"][0]) and kept["finish_reason"] == "tool_calls"
    json.dumps(kept)  # serialisable


# -- match rules (BFCL) ---------------------------------------------------------------------------
FN = {
    "name": "get_weather",
    "parameters": {
        "type": "dict",
        "required": ["city"],
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "scale": {"type": "float"},
            "opts": {"type": "dict", "properties": {"unit": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    },
}
GT = {
    "get_weather": {
        "city": ["New York, NY"],
        "days": [3, ""],
        "scale": [2.0, ""],
        "opts": [{"unit": ["C", ""]}, ""],
        "tags": [["a b"], ""],
    }
}


def call(args: Any, name: str = "get_weather") -> Call:
    return Call(name, json.dumps(args), args)


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        ({"city": "new york ny"}, True),  # BFCL normalisation: case, spaces, punctuation
        ({"city": "New_York-NY."}, True),
        ({"city": "Boston"}, False),
        ({"city": "New York, NY", "days": 3}, True),
        ({"city": "New York, NY", "days": True}, False),  # a bool is not an integer
        ({"city": "New York, NY", "days": 3.0}, False),  # BFCL: a float is not an integer
        ({"city": "New York, NY", "scale": 2}, True),  # an int is accepted for a float
        ({"city": "New York, NY", "extra": 1}, False),  # unexpected parameter
        ({"days": 3}, False),  # required missing
        ({"city": "New York, NY", "opts": {"unit": "c"}}, True),
        ({"city": "New York, NY", "opts": {"unit": "F"}}, False),
        ({"city": "New York, NY", "opts": {}}, True),  # the dict's key is optional
        ({"city": "New York, NY", "tags": ["A-B"]}, True),
        ({"city": "New York, NY", "tags": ["a", "b"]}, False),
    ],
)
def test_call_matches(args: dict[str, Any], ok: bool) -> None:
    assert call_matches(call(args), GT, FN) is ok


def test_gt_param_without_empty_option_must_be_given() -> None:
    gt = {"get_weather": {"city": ["Paris"], "days": [5]}}
    assert not call_matches(call({"city": "Paris"}), gt, FN)
    assert call_matches(call({"city": "Paris", "days": 5}), gt, FN)


def test_wrong_name_and_count() -> None:
    assert not match([call({"city": "New York, NY"}, "other")], [FN], [GT], "call")
    assert not match([call({"city": "New York, NY"})] * 2, [FN], [GT], "call")
    assert match([call({"city": "New York, NY"})], [FN], [GT], "call")


def test_relevance_and_irrelevance() -> None:
    assert match([], [FN], None, "no_call") and not match([call({"city": "x"})], [FN], None, "no_call")
    assert match([call({"anything": 1})], [FN], None, "any_call")
    assert not match([Call("get_weather", "{", None)], [FN], None, "any_call")
    assert not match([], [FN], None, "any_call")


def test_standardize_matches_bfcl() -> None:
    assert standardize("April 1, 2024") == standardize("april 1,2024") == "april12024"
    assert standardize("it's") == 'it"s'


def test_parse_calls_accepts_string_or_object_arguments() -> None:
    msg = {
        "tool_calls": [
            {"function": {"name": "a", "arguments": '{"x": 1}'}},
            {"function": {"name": "b", "arguments": {"y": 2}}},
            {"function": {"name": "c", "arguments": "[1, 2]"}},
        ]
    }
    calls = parse_calls(msg)
    assert [c.arguments for c in calls] == [{"x": 1}, {"y": 2}, None]


def test_validity_rules() -> None:
    tools = openai_tools([FN])
    assert validity([call({"city": "x", "days": 2})], tools, "call") == []
    assert validity([call({"city": "x"}, "nope")], tools, "call") == ["call 1 (nope): not an offered tool"]
    (problem,) = validity([call({"city": "x", "days": "2"})], tools, "call")
    assert problem.startswith("call 1 (get_weather): days: '2' is not of type 'integer'")
    assert validity([call({"city": 1})], tools, "call")
    assert validity([call({"city": "x"})], tools, "no_call") == ["1 call(s) where none was expected"]
    enum_tool = openai_tools(
        [
            {
                "name": "f",
                "parameters": {"type": "dict", "properties": {"u": {"type": "string", "enum": ["a"]}}},
            }
        ]
    )
    assert validity([call({"u": "b"}, "f")], enum_tool, "call")


# -- the suite ------------------------------------------------------------------------------------
def test_prefill_default_follows_the_engine_and_can_be_set() -> None:
    assert tool_prefill(SuiteOptions(engine="llamacpp"))
    assert not tool_prefill(SuiteOptions(engine="sglang"))
    assert not tool_prefill(SuiteOptions(engine="llamacpp"), ToolCallSettings(prefill=False))
    assert tool_prefill(SuiteOptions(engine="sglang"), ToolCallSettings(prefill=True))


def test_prefill_is_the_suites_own_option() -> None:
    reg = default_registry()
    suite = reg.get("tool_calls", options={"prefill": False})
    assert isinstance(suite, ToolCallSuite) and suite.settings.prefill is False
    assert "tool_choice=auto" in suite.source(SuiteOptions(engine="llamacpp"))
    assert reg.get("tool_calls").settings.prefill is None  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"tool_calls\.prefil: Extra inputs") as err:
        reg.get("tool_calls", options={"prefil": True})
    assert "prefill=None" in err.value.fix
    with pytest.raises(ConfigError, match="suite gsm8k has no options"):
        reg.get("gsm8k", options={"prefill": True})


def test_build_request_prefill_and_auto() -> None:
    case = fixture("valid_repeated_call")["case"]
    pre = build_request(case, prefill=True, max_tokens=64)
    assert pre["tool_choice"] == "required" and pre["messages"][-1] == {
        "role": "assistant",
        "content": PREFILL,
    }
    auto = build_request(case, prefill=False, max_tokens=64)
    assert auto["tool_choice"] == "auto" and auto["messages"][-1]["role"] == "user"
    assert pre["tools"] == auto["tools"] and pre["tools"][0]["function"]["parameters"]["type"] == "object"


def test_needs_data_dir() -> None:
    with pytest.raises(ConfigError) as err:
        tool_calls().load(SuiteOptions(), 5)
    assert "--data-dir" in err.value.fix
    assert default_registry().get("tool_calls").name == "tool_calls"


def test_load_is_stable_stratified_and_hashes_the_mode(data_dir: Path) -> None:
    suite = tool_calls()
    opts = SuiteOptions(data_dir=data_dir)
    items = suite.load(opts, 40)
    assert len(items) == 40 and items == suite.load(opts, 40)
    cats = {it.extra.category for it in items}
    assert {"simple_python", "live_multiple", "live_irrelevance", "irrelevance"} <= cats
    it = items[0]
    assert set(it.display) == {"prompt", "choices"} and it.display["choices"] is None and it.display["prompt"]
    json.dumps([i.target for i in items])
    other = suite.load(SuiteOptions(data_dir=data_dir, engine="sglang"), 40)
    assert [i.item_id for i in other] == [i.item_id for i in items]
    assert all(a.prompt_hash != b.prompt_hash for a, b in zip(items, other, strict=True))
    capped = suite.load(SuiteOptions(data_dir=data_dir, max_gen_tokens=32), 40)
    assert capped[0].payload[1]["max_tokens"] == 32


class FakeScorer:
    """Replays one recorded reply (or raises the recorded failure); never a stand-in for e2e."""

    def __init__(self, fx: dict[str, Any]) -> None:
        self.fx = fx
        self.sent: list[dict[str, Any]] = []

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(payload)
        if self.fx["status"] != 200:
            body = json.dumps(self.fx["response"])
            raise RequestFailed(
                f"POST /v1/chat/completions failed 4 times: HTTP 500 from /v1/chat/completions: {body}"
            )
        return dict(self.fx["response"])


def _item(fx: dict[str, Any]) -> Item:
    request = {k: v for k, v in fx["request"].items() if k != "seed"}
    return Item(fx["case"]["id"], "h", None, (fx["case"], request))


def test_run_records_calls_and_seed() -> None:
    fx = fixture("valid_repeated_call")
    scorer = FakeScorer(fx)
    res = asyncio.run(tool_calls().run(_item(fx), scorer, SuiteOptions(seed=7)))  # type: ignore[arg-type]
    assert scorer.sent[0]["seed"] == 7 and res.metrics["valid"] == 1.0
    assert (
        res.tokens["completion"] > 0
        and res.response["tool_calls"][0]["name"] == "calculate_binomial_probability"
    )
    json.dumps([res.response, res.extracted])


def test_run_turns_a_parser_failure_into_an_invalid_item() -> None:
    fx = fixture("parse_failure")
    res = asyncio.run(tool_calls().run(_item(fx), FakeScorer(fx), SuiteOptions()))  # type: ignore[arg-type]
    assert res.metrics == {"valid": 0.0, "match": 0.0, "decision": 1.0}
    assert "peg-native" in res.response["parse_error"]


def test_run_reraises_other_failures() -> None:
    class Down:
        async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
            raise RequestFailed("POST /v1/chat/completions failed 4 times: ConnectError")

    fx = fixture("valid_repeated_call")
    with pytest.raises(RequestFailed):
        asyncio.run(tool_calls().run(_item(fx), Down(), SuiteOptions()))  # type: ignore[arg-type]
