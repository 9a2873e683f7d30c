"""Suites: the registry and the built-ins (imported explicitly; no directory scanning).

A suite (``_base.Suite``) loads its items, builds each item's request and scores the response;
the gate only reads its facts (``metrics``, ``metric_kind``, ``kind``...). An lm-eval task is an
``LmEvalSuite`` over lm-eval's own task definition (``_lmeval``), its chat variant an
``LmEvalChatSuite`` (``_chat``); ``drift``, ``long_context``, ``tool_calls`` and ``private:<dir>``
are suites of their own.

How to add one: write ``suites/<name>.py`` with a factory ``name -> Suite`` (for an lm-eval task,
a few lines around ``LmEvalSuite`` and a ``LocalData`` for ``--data-dir``, as ``arc.py`` does);
subclass ``Suite`` and override only the facts that differ from its defaults; declare its options
as a pydantic ``settings`` model (``[suites.<name>]``, ``--suite-opt``); add it to ``BUILT_IN``
below (and ``CHAT_VARIANTS`` if it has a chat variant). Bump ``version`` whenever its prompts or
scoring change (every record carries it). ``tests/suites/test_contract.py``
checks that every registered suite subclasses the contract and lists the facts each declares.
"""

from __future__ import annotations

from collections.abc import Callable

from evalgate.errors import ConfigError
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
from evalgate.suites._chat import LmEvalChatSuite
from evalgate.suites._lmeval import LmEvalSuite, Member, lmeval_tasks
from evalgate.suites.arc import arc, arc_chat
from evalgate.suites.drift import DriftSuite, drift
from evalgate.suites.gsm8k import gsm8k, gsm8k_chat
from evalgate.suites.long_context import LongContextSuite, long_context, plan_lengths
from evalgate.suites.mmlu import mmlu
from evalgate.suites.mmlu_pro import mmlu_pro, mmlu_pro_chat
from evalgate.suites.private import private
from evalgate.suites.tool_calls import ToolCallSuite, tool_calls

__all__ = [
    "CHAT_NATIVE",
    "CHAT_VARIANTS",
    "PRESETS",
    "DriftSuite",
    "Item",
    "ItemResult",
    "LmEvalChatSuite",
    "LmEvalSuite",
    "LongContextSuite",
    "Member",
    "Registry",
    "Scorer",
    "Suite",
    "SuiteOptions",
    "SuitePreflight",
    "ToolCallSuite",
    "chat_variants",
    "configure",
    "default_registry",
    "lmeval_tasks",
    "options_help",
    "plan_lengths",
]


BUILT_IN: dict[str, Callable[[str], Suite]] = {
    "gsm8k": gsm8k,
    "arc_easy": arc,
    "arc_challenge": arc,
    "mmlu": mmlu,
    "mmlu_pro": mmlu_pro,
    "gsm8k_chat": gsm8k_chat,
    "arc_easy_chat": arc_chat,
    "arc_challenge_chat": arc_chat,
    "mmlu_pro_chat": mmlu_pro_chat,
    "tool_calls": tool_calls,
    "long_context": long_context,
    "drift": drift,
}
"""Name -> factory of each built-in suite, in ``--help``'s order; ``private:<dir>`` is registered by prefix."""


def default_registry() -> Registry:
    """A fresh registry with every built-in suite (no global state to leak between runs)."""
    reg = Registry()
    for name, factory in BUILT_IN.items():
        reg.register(name, factory)
    reg.register("private", private, prefix=True)
    return reg


CHAT_VARIANTS: dict[str, str] = {
    "gsm8k": "gsm8k_chat",
    "arc_easy": "arc_easy_chat",
    "arc_challenge": "arc_challenge_chat",
    "mmlu_pro": "mmlu_pro_chat",
}
"""Suite -> its chat variant (``--chat``): the prompt through the server's chat template."""


CHAT_NATIVE = ("tool_calls", "long_context", "private:")
"""Suites whose prompts go through the server's chat template already (``long_context`` unless its
``chat`` option is off): ``--chat`` leaves them as they are. drift is not one: it forces plain
documents through no template, so ``--chat`` with it is refused rather than run as plain drift."""


def chat_variants(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--chat``: each suite's chat variant (a chat variant or a suite that already speaks chat
    stays itself); a suite without one is a ConfigError naming those that have one."""
    chat = set(CHAT_VARIANTS.values()) | {n for n in names if n.startswith(CHAT_NATIVE)}
    missing = [n for n in names if n not in CHAT_VARIANTS and n not in chat]
    if missing:
        have = ", ".join(f"{k} -> {v}" for k, v in CHAT_VARIANTS.items())
        raise ConfigError(
            f"--chat: {', '.join(missing)} ha{'s' if len(missing) == 1 else 've'} no chat variant",
            fix=f"drop --chat, or run {', '.join(missing)} in a separate run without it; chat variants: {have}",
        )
    return tuple(dict.fromkeys(n if n in chat else CHAT_VARIANTS[n] for n in names))
