"""Suites: the registry and the built-ins (imported explicitly; no directory scanning)."""

from __future__ import annotations

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


def default_registry() -> Registry:
    """A fresh registry with every built-in suite (no global state to leak between runs)."""
    reg = Registry()
    reg.register("gsm8k", gsm8k)
    reg.register("arc_easy", arc)
    reg.register("arc_challenge", arc)
    reg.register("mmlu", mmlu)
    reg.register("mmlu_pro", mmlu_pro)
    reg.register("gsm8k_chat", gsm8k_chat)
    reg.register("arc_easy_chat", arc_chat)
    reg.register("arc_challenge_chat", arc_chat)
    reg.register("mmlu_pro_chat", mmlu_pro_chat)
    reg.register("tool_calls", tool_calls)
    reg.register("long_context", long_context)
    reg.register("drift", drift)
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
