"""Suites: the registry and the built-ins (imported explicitly; no directory scanning)."""

from __future__ import annotations

from evalgate.suites._base import (
    PRESETS,
    Item,
    ItemResult,
    Registry,
    Scorer,
    Suite,
    SuiteOptions,
    SuitePreflight,
    configure,
    options_help,
)
from evalgate.suites.arc import arc
from evalgate.suites.gsm8k import gsm8k
from evalgate.suites.mmlu import mmlu
from evalgate.suites.mmlu_pro import mmlu_pro
from evalgate.suites.private import private
from evalgate.suites.tool_calls import ToolCallSuite, tool_calls

__all__ = [
    "PRESETS",
    "Item",
    "ItemResult",
    "Registry",
    "Scorer",
    "Suite",
    "SuiteOptions",
    "SuitePreflight",
    "ToolCallSuite",
    "configure",
    "default_registry",
    "options_help",
]


def default_registry() -> Registry:
    """A fresh registry with every built-in suite (no global state to leak between runs)."""
    reg = Registry()
    reg.register("gsm8k", gsm8k)
    reg.register("arc_easy", arc)
    reg.register("arc_challenge", arc)
    reg.register("mmlu", mmlu)
    reg.register("mmlu_pro", mmlu_pro)
    reg.register("tool_calls", tool_calls)
    reg.register("private", private, prefix=True)
    return reg
