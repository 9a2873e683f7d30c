"""GSM8K (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems"), lm-eval ``gsm8k``.

5-shot from the train split; exact match after lm-eval's two filters: ``flexible-extract``
(the last number in the answer, primary) and ``strict-match`` (the ``#### N`` format).
"""

from __future__ import annotations

from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member

__all__ = ["gsm8k"]


def gsm8k(name: str = "gsm8k") -> LmEvalSuite:
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("exact_match,flexible-extract", "exact_match,strict-match"),
        kind="generate",
        members=(
            Member(
                "gsm8k",
                "gsm8k/gsm8k.yaml",
                LocalData((("train", "gsm8k/train.jsonl"), ("test", "gsm8k/test.jsonl"))),
            ),
        ),
        hub="openai/gsm8k main",
    )
