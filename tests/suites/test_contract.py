"""The suite contract (#28): ``Suite`` declares every optional fact with its default, so nothing
outside evalgate/suites/ probes a suite with ``getattr`` or tests it for a concrete class; the
built-ins declare what differs. Read from the source, as tests/test_imports.py reads imports."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

import evalgate
import evalgate.suites
from evalgate.errors import ConfigError
from evalgate.suites import Suite, SuiteOptions, configure, default_registry
from tests.helpers.ast_probes import named, probe_calls

PACKAGE = Path(evalgate.__file__).resolve().parent
SUITES = PACKAGE / "suites"
FACTS = ("samples", "metric_kind", "settings", "needs_tool_parser", "plans_lengths", "takes_thinking")
"""The optional facts ``Suite`` declares; a getattr of one of them is a probe whatever it is on."""


def concrete_suites() -> set[str]:
    """Every class in evalgate/suites/ that is a suite (the protocol itself is the contract)."""
    names = set()
    for info in pkgutil.iter_modules([str(SUITES)], prefix="evalgate.suites."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and Suite in obj.__mro__[1:]:  # not runtime-checkable: by its bases
                names.add(name)
    return names


def probes(source: str, classes: set[str]) -> list[str]:
    """``getattr(`` on a suite (a receiver named s/suite/...suite..., or an optional fact by
    name) and ``isinstance``/``issubclass`` against a concrete suite class, with line numbers."""
    lowered = {c.lower() for c in classes}

    def counts(func: str, node: ast.Call) -> bool:
        if func in ("getattr", "hasattr"):
            receiver, attr = named(node.args[0]), node.args[1]
            fact = isinstance(attr, ast.Constant) and attr.value in FACTS
            return receiver == "s" or "suite" in receiver or fact
        if func in ("isinstance", "issubclass"):
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            return any((named(k) or "") in lowered for k in kinds)
        return False

    return probe_calls(source, counts)


def test_nothing_outside_suites_probes_a_suite() -> None:
    """Acceptance: no getattr( on a suite and no concrete-suite isinstance outside suites/."""
    classes = concrete_suites()
    assert {"ToolCallSuite", "LongContextSuite", "PrivateSuite", "LmEvalSuite", "LmEvalChatSuite"} <= classes
    bad = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if SUITES not in path.parents and (hits := probes(path.read_text(encoding="utf-8"), classes))
    }
    assert not bad, f"declare the fact on Suite (evalgate/suites/_base.py) and read it: {bad}"


def test_the_scan_finds_what_it_forbids() -> None:
    classes = {"ToolCallSuite", "LongContextSuite"}
    source = """
getattr(s, "samples", False)
getattr(suite, "whatever")
getattr(plan.suites[0], "kind")
getattr(thing, "needs_tool_parser", False)
isinstance(s, ToolCallSuite)
isinstance(x, (int, long_context.LongContextSuite))
"""
    assert len(probes(source, classes)) == 6
    fine = 'getattr(req, "baseline")\nisinstance(s, SuitePreflight)\ngetattr(meta, "kind")\n'
    assert probes(fine, classes) == []


@dataclass
class Bare(Suite):
    """A suite that declares only what every suite must."""

    name: str = "bare"
    version: int = 1
    metrics: tuple[str, ...] = ("acc",)
    kind: str = "generate"
    private: bool = False


def test_a_suite_inherits_the_defaults() -> None:
    suite = Bare()
    assert suite.samples is False and suite.metric_kind == "binary" and suite.settings is None
    assert suite.needs_tool_parser is False and suite.plans_lengths is False
    assert suite.takes_thinking is False
    assert Bare(kind="chat").takes_thinking is True  # a chat suite takes --thinking unless it says not
    with pytest.raises(ConfigError, match="has no options"):
        configure(suite, {"x": 1})  # no settings: no options


def test_the_built_ins_declare_what_differs() -> None:
    reg = default_registry()
    suites = {name: reg.get(name) for name in reg.names() if ":" not in name}
    assert all(Suite in type(s).__mro__ for s in suites.values())  # they subclass the contract
    assert {n for n, s in suites.items() if s.needs_tool_parser} == {"tool_calls"}
    assert {n for n, s in suites.items() if s.plans_lengths} == {"long_context"}
    assert {n for n, s in suites.items() if s.samples} == {
        "gsm8k", "gsm8k_chat", "arc_easy_chat", "arc_challenge_chat", "mmlu_pro_chat", "mmlu_pro"
    } - {n for n, s in suites.items() if s.kind == "loglikelihood"}  # fmt: skip
    assert {n for n, s in suites.items() if s.takes_thinking} == {
        n for n, s in suites.items() if s.kind == "chat" and n != "tool_calls"
    }
    assert {n for n, s in suites.items() if s.metric_kind != "binary"} == {"drift"}
    assert suites["drift"].metric_kind == "drift" and suites["drift"].drift_budget is None
    with_options = {n for n, s in suites.items() if isinstance(s.settings, BaseModel)}
    assert {"tool_calls", "long_context", "gsm8k_chat"} <= with_options
    assert suites["tool_calls"].takes_thinking is False  # its requests carry no enable_thinking


def test_a_private_exam_is_a_suite(tmp_path: Path) -> None:
    exam = tmp_path / "exam"
    exam.mkdir()
    (exam / "items.jsonl").write_text(
        '{"id": "q1", "prompt": "say yes", "answer": "yes", "grader": "exact"}\n'
    )
    suite = default_registry().get(f"private:{exam}")
    assert Suite in type(suite).__mro__ and suite.takes_thinking and not suite.samples
    assert suite.settings is None and SuiteOptions().engine == "llamacpp"
