"""MMLU (Hendrycks et al. 2021, "Measuring Massive Multitask Language Understanding"), lm-eval
``mmlu``: 57 subject tasks, 5-shot from each subject's dev split (first 5, as ``lm_eval
--num_fewshot 5`` does), acc by log-likelihood.

Reported as one suite; each record keeps its subject (``extra.subject``), and subsets are
stratified by subject so a small run still covers all 57.
"""

from __future__ import annotations

from functools import cache

from evalgate.suites._lmeval import LmEvalSuite, LocalData, Member, lm_eval_task_dir

__all__ = ["mmlu"]


@cache
def subjects() -> tuple[str, ...]:
    """The subjects lm-eval defines (its ``mmlu/default/mmlu_<subject>.yaml`` files)."""
    folder = lm_eval_task_dir() / "mmlu" / "default"
    return tuple(sorted(p.stem.removeprefix("mmlu_") for p in folder.glob("mmlu_*.yaml")))


def mmlu(name: str = "mmlu") -> LmEvalSuite:
    members = tuple(
        Member(
            subject,
            f"mmlu/default/mmlu_{subject}.yaml",
            LocalData(
                (("dev", "mmlu/dev.jsonl"), ("test", "mmlu/test.jsonl")), row_filter=("subject", subject)
            ),
            overrides=(("num_fewshot", 5),),  # lm-eval's MMLU default is 0-shot; the standard is 5-shot
        )
        for subject in subjects()
    )
    return LmEvalSuite(
        name=name,
        version=1,
        metrics=("acc",),
        kind="loglikelihood",
        members=members,
        hub="cais/mmlu (one config per subject)",
    )
