"""ARC (Clark et al. 2018, "Think you have Solved Question Answering?"), lm-eval ``arc_easy``
and ``arc_challenge``: 0-shot multiple choice scored by log-likelihood, acc and acc_norm; and
their chat variants ``arc_easy_chat`` and ``arc_challenge_chat`` (``arc_chat``).
"""

from __future__ import annotations

from typing import Any

from evalgate.suites._chat import LmEvalChatSuite
from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member

__all__ = ["arc", "arc_chat"]

_SPLITS = ("train", "validation", "test")
_SUBSET = {"arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge"}


def _item_id(doc: dict[str, Any], index: int) -> str:
    return str(doc["id"])


def _local(subset: str) -> LocalData:
    return LocalData(tuple((s, f"arc/{subset}-{s}.jsonl") for s in _SPLITS))


def arc(name: str) -> LmEvalSuite:
    subset = _SUBSET[name]
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("acc", "acc_norm"),
        kind="loglikelihood",
        members=(Member(name, f"arc/{name}.yaml", _local(subset)),),
        hub=f"allenai/ai2_arc {subset}",
        item_id=_item_id,
    )


def arc_chat(name: str) -> LmEvalChatSuite:
    """ARC as a chat, ``arc_challenge_chat`` or ``arc_easy_chat``: lm-eval's ``arc_challenge_chat``
    (``arc/arc_challenge_chat.yaml``), zero-shot; ``arc_easy_chat`` is the same config on ARC-Easy.

    The question and lettered choices ask for "The best answer is [letter]", and the assistant turn
    is prefilled with "The best answer is" (the config's ``gen_prefix``: a final assistant message
    the server continues), so the model answers with a letter and stops at "." or a blank line
    within 100 tokens; graded by exact match, case and punctuation ignored, after trimming
    whitespace. Chosen over ``llama3/instruct/arc_challenge`` (the same prompt, but it drops every
    question without exactly four choices and sends no stop strings). The prefill leaves no room
    for a thinking phase: a reasoning model answers directly here. As in lm-eval, a question with a
    fifth choice shows four (its template lists A-D), so an item whose answer is E cannot be
    answered right on either arm; and the config's prompt is a single-quoted YAML string, so its
    line breaks reach the model as the two characters backslash and n, exactly as lm-eval sends
    them (``test_messages_are_lm_evals_own``)."""
    base = name.removesuffix("_chat")
    subset = _SUBSET[base]
    overrides = (("task", name), ("dataset_name", subset))
    return LmEvalChatSuite(
        name=name,
        version=1,
        metrics=("exact_match,remove_whitespace",),
        kind="chat",
        members=(Member(name, "arc/arc_challenge_chat.yaml", _local(subset), overrides),),
        hub=f"allenai/ai2_arc {subset}",
        item_id=_item_id,
    )
