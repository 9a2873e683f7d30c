"""ARC (Clark et al. 2018, "Think you have Solved Question Answering?"), lm-eval ``arc_easy``
and ``arc_challenge``: 0-shot multiple choice scored by log-likelihood, acc and acc_norm.
"""

from __future__ import annotations

from typing import Any

from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member

__all__ = ["arc"]

_SPLITS = ("train", "validation", "test")
_SUBSET = {"arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge"}


def _item_id(doc: dict[str, Any], index: int) -> str:
    return str(doc["id"])


def arc(name: str) -> LmEvalSuite:
    subset = _SUBSET[name]
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("acc", "acc_norm"),
        kind="loglikelihood",
        members=(
            Member(
                name, f"arc/{name}.yaml", LocalData(tuple((s, f"arc/{subset}-{s}.jsonl") for s in _SPLITS))
            ),
        ),
        hub=f"allenai/ai2_arc {subset}",
        item_id=_item_id,
    )
