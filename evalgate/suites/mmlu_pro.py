"""MMLU-Pro (Wang et al. 2024, "MMLU-Pro: A More Robust and Challenging Multi-Task Language
Understanding Benchmark"), lm-eval ``mmlu_pro``: 14 category tasks, chain-of-thought, 5-shot
from validation, exact match of the letter after "the answer is" (``custom-extract``).

Generation may run to lm-eval's 2,048 new tokens; the engine caps each request to what fits
in the server's own context (never lm-eval's ``max_length=2048`` default, which cuts prompts).
"""

from __future__ import annotations

from typing import Any

from evalgate.suites._chat import LmEvalChatSuite
from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member

__all__ = ["mmlu_pro", "mmlu_pro_chat"]

CATEGORIES = (
    "biology", "business", "chemistry", "computer_science", "economics", "engineering", "health",
    "history", "law", "math", "other", "philosophy", "physics", "psychology",
)  # fmt: skip
_LOCAL = LocalData((("validation", "mmlu_pro/validation.jsonl"), ("test", "mmlu_pro/test.jsonl")))


def _item_id(doc: dict[str, Any], index: int) -> str:
    return str(doc["question_id"])


def mmlu_pro(name: str = "mmlu_pro") -> LmEvalSuite:
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("exact_match,custom-extract",),
        kind="generate",
        members=tuple(Member(c, f"mmlu_pro/mmlu_pro_{c}.yaml", _LOCAL) for c in CATEGORIES),
        hub="TIGER-Lab/MMLU-Pro",
        item_id=_item_id,
        recorded=("src",),
    )


def mmlu_pro_chat(name: str = "mmlu_pro_chat") -> LmEvalChatSuite:
    """MMLU-Pro as a chat: lm-eval's ``mmlu_pro_llama`` (``llama3/instruct/mmlu_pro``, its 14
    categories), the config lm-eval documents for instruct models with ``--apply_chat_template``,
    zero-shot (``--num_fewshot 0``; the config's 5 chain-of-thought examples would be multiturn and
    cost ~1,500 prompt tokens per item, and reasoning models are evaluated zero-shot).

    The question and lettered options end with "Let's think step by step." and ask for "The best
    answer is [letter]."; graded by exact match of the letter its ``strict_match`` filter finds
    ("[tT]he best answer is ([A-Z])"); up to 1,024 new tokens, no stop strings."""
    return LmEvalChatSuite(
        name=name,
        version=1,
        metrics=("exact_match,strict_match",),
        kind="chat",
        members=tuple(
            Member(c, f"llama3/instruct/mmlu_pro/mmlu_pro_{c}.yaml", _LOCAL, (("num_fewshot", 0),))
            for c in CATEGORIES
        ),
        hub="TIGER-Lab/MMLU-Pro",
        item_id=_item_id,
        recorded=("src",),
    )
