"""GSM8K (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems"), lm-eval ``gsm8k``.

5-shot from the train split; exact match after lm-eval's two filters: ``flexible-extract``
(the last number in the answer, primary) and ``strict-match`` (the ``#### N`` format).
"""

from __future__ import annotations

from evalgate.suites._chat import LmEvalChatSuite
from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member

__all__ = ["gsm8k", "gsm8k_chat"]

_LOCAL = LocalData((("train", "gsm8k/train.jsonl"), ("test", "gsm8k/test.jsonl")))


def gsm8k(name: str = "gsm8k") -> LmEvalSuite:
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("exact_match,flexible-extract", "exact_match,strict-match"),
        kind="generate",
        members=(Member("gsm8k", "gsm8k/gsm8k.yaml", _LOCAL),),
        hub="openai/gsm8k main",
    )


def gsm8k_chat(name: str = "gsm8k_chat") -> LmEvalChatSuite:
    """GSM8K as a chat: lm-eval's ``gsm8k_llama`` (``llama3/instruct/gsm8k/gsm8k.yaml``, the config
    lm-eval documents for instruct models with ``--apply_chat_template``), zero-shot.

    Chosen over ``gsm8k-cot-llama.yaml`` (the same instruction, but completion-style stops such as
    ``Q:`` and ``<|eot_id|>`` for one model's template) and ``gsm8k-cot-zeroshot.yaml`` (a
    ``Q: ... A: Let's think step by step.`` completion prompt): its instruction asks for "The final
    answer is N", which a chat model answers without examples, and it sends no stop strings, so the
    server's template ends the turn. Zero-shot (``--num_fewshot 0``; the config's 8 examples would
    be multiturn) because reasoning models are evaluated that way and each example costs ~100
    prompt tokens per item. Graded by its two filters: ``flexible_extract`` (the last number, primary,
    as for ``gsm8k``) and ``strict_match`` ("final answer is N"); up to 1,024 new tokens."""
    return LmEvalChatSuite(
        name=name,
        version=1,
        metrics=("exact_match,flexible_extract", "exact_match,strict_match"),
        kind="chat",
        members=(Member("gsm8k_chat", "llama3/instruct/gsm8k/gsm8k.yaml", _LOCAL, (("num_fewshot", 0),)),),
        hub="openai/gsm8k main",
    )
