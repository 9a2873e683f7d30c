from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from evalgate.engines import Scorer
from evalgate.engines.api import Generation
from evalgate.errors import ConfigError
from evalgate.suites import SuiteOptions, default_registry
from evalgate.suites._base import select_indices
from evalgate.suites._lmeval import score


def test_registry_did_you_mean() -> None:
    with pytest.raises(ConfigError) as err:
        default_registry().get("arc_eazy")
    assert "did you mean arc_easy" in err.value.fix


def test_selection_is_seeded_sorted_and_stable() -> None:
    a = select_indices(1000, 50, seed=1, suite="gsm8k")
    assert a == select_indices(1000, 50, seed=1, suite="gsm8k") and a == sorted(a) and len(set(a)) == 50
    assert a != select_indices(1000, 50, seed=2, suite="gsm8k")
    assert a != select_indices(1000, 50, seed=1, suite="arc_easy")  # per-suite stream
    assert select_indices(10, None, seed=1, suite="x") == list(range(10))


def test_stratified_selection_covers_every_stratum() -> None:
    strata = ["a"] * 900 + ["b"] * 90 + ["c"] * 10
    chosen = select_indices(1000, 100, seed=3, suite="mmlu", strata=strata)
    counts = {s: sum(strata[i] == s for i in chosen) for s in "abc"}
    assert counts == {"a": 90, "b": 9, "c": 1}


@pytest.mark.parametrize("name", ["arc_easy", "arc_challenge", "gsm8k", "mmlu", "mmlu_pro"])
def test_prompts_are_lm_evals_own(name: str, data_dir: Path) -> None:
    """Our per-item request equals, byte for byte, what lm-eval's build_all_requests makes for
    that document with the same few-shot seed (MMLU: the subject's task, first_n few-shot)."""
    suite = default_registry().get(name)
    options = SuiteOptions(data_dir=data_dir, seed=7)
    items = suite.load(options, 3)
    for item in items:
        task, doc, _, args = item.payload
        index = next(i for i, d in enumerate(task.eval_docs) if d == doc)
        from evalgate.suites._base import stable_seed

        task.set_fewshot_seed(stable_seed(7, name, item.item_id))  # lm-eval's own seeding hook
        task.build_all_requests(samples=[index])
        theirs = [inst.arguments for inst in task.instances]
        assert [a[0] for a in theirs] == [a[0] for a in args]  # the prompt text, byte for byte
        if name.startswith(("arc", "mmlu")) and name != "mmlu_pro":
            assert [a[1] for a in theirs] == [a[1] for a in args]  # the continuations
        else:
            assert theirs[0][1].get("until") == args[0][1]["until"]


def test_gsm8k_prompt_shape(data_dir: Path) -> None:
    item = default_registry().get("gsm8k").load(SuiteOptions(data_dir=data_dir), 1)[0]
    ctx, gen = item.payload[3][0]
    assert ctx.count("Question:") == 6 and ctx.endswith("\nAnswer:")
    assert gen["until"] == ["Question:", "</s>", "<|im_end|>"] and gen["max_gen_toks"] == 256


def test_generation_cap_changes_the_prompt_hash(data_dir: Path) -> None:
    suite = default_registry().get("gsm8k")
    a = suite.load(SuiteOptions(data_dir=data_dir), 1)[0]
    b = suite.load(SuiteOptions(data_dir=data_dir, max_gen_tokens=64), 1)[0]
    assert a.item_id == b.item_id and a.prompt_hash != b.prompt_hash


@pytest.mark.parametrize(
    ("response", "strict", "flexible"),
    [
        ("She sold 5 + 3 = 8 apples.\n#### 8", 1.0, 1.0),
        ("The answer is 8.", 0.0, 1.0),
        ("#### 9", 0.0, 0.0),
        ("I do not know", 0.0, 0.0),
    ],
)
def test_gsm8k_scoring_uses_lm_eval_filters(
    response: str, strict: float, flexible: float, data_dir: Path
) -> None:
    suite = default_registry().get("gsm8k")
    item = suite.load(SuiteOptions(data_dir=data_dir), 1)[0]
    task, doc, instances, _ = item.payload
    doc = {**doc, "answer": "steps...\n#### 8"}
    metrics, extracted = score(task, doc, instances, [response])
    assert metrics == {"exact_match,strict-match": strict, "exact_match,flexible-extract": flexible}
    assert set(extracted) == {"strict-match", "flexible-extract"}


class FixedScorer(Scorer):
    """Scripted log-likelihoods: choice i gets -lls[i] (for a multiple-choice scoring check)."""

    def __init__(self, lls: list[float]) -> None:
        self.lls = lls
        self.seen: list[tuple[str, str]] = []

    async def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool, int]:
        self.seen.append((context, continuation))
        return self.lls[len(self.seen) - 1], False, 3

    async def generate(self, prompt: str, gen: Generation) -> dict[str, Any]:
        raise AssertionError("not a generation suite")

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not a chat suite")


def test_arc_acc_and_acc_norm(data_dir: Path) -> None:
    suite = default_registry().get("arc_easy")
    options = SuiteOptions(data_dir=data_dir)
    item = next(i for i in suite.load(options, 20) if len(i.payload[3]) == 4)
    gold = item.target
    lls = [-10.0, -10.0, -10.0, -10.0]
    lls[gold] = -1.0
    res = asyncio.run(suite.run(item, FixedScorer(lls), options))
    assert res.metrics["acc"] == 1.0 and res.extracted["pred"] == gold
    wrong = [-1.0 if i == (gold + 1) % 4 else -10.0 for i in range(4)]
    assert asyncio.run(suite.run(item, FixedScorer(wrong), options)).metrics["acc"] == 0.0


def test_mmlu_prompt_has_subject_description_and_five_dev_shots(data_dir: Path) -> None:
    item = default_registry().get("mmlu").load(SuiteOptions(data_dir=data_dir), 57)[0]
    prompt = item.display["prompt"]
    subject = item.extra.subject
    assert prompt.startswith(
        f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}."
    )
    assert prompt.count("\nAnswer:") == 6 and item.display["choices"] == [" A", " B", " C", " D"]


def test_quick_preset_is_stratified_across_all_57_subjects(data_dir: Path) -> None:
    items = default_registry().get("mmlu").load(SuiteOptions(data_dir=data_dir), 500)
    assert len(items) == 500 and len({i.extra.subject for i in items}) == 57
