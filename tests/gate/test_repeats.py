"""--repeats k with sampling (#20): common random numbers per (item, repeat), the per-item mean
tested as a graded outcome, pass@1 / pass@k in the verdict, and the refusals.

GSM8K's real items (lm-eval's prompts) on the fake engine, whose sampled answer is a function of
(arm, prompt, seed) only: what a server with a fixed sampler would do.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine

N, K = 12, 4


def _sampler(wrong_rate: dict[str, float]) -> Callable[[str, str, int], str]:
    """Right ("#### <answer>") unless a seeded draw for (prompt, seed) falls under the arm's rate."""

    def sample(arm: str, prompt: str, seed: int) -> str:
        draw = zlib.crc32(f"{prompt}|{seed}".encode()) / 2**32  # the same on both arms: CRN
        answer = _answers[prompt] if prompt in _answers else "0"
        return f"The answer is {answer}.\n#### {answer if draw >= wrong_rate.get(arm, 0.0) else -1}"

    return sample


_answers: dict[str, str] = {}


@pytest.fixture
def gsm8k_answers(data_dir: Path) -> None:
    """The fake answers every GSM8K question right unless told otherwise: it looks up the answer."""
    from evalgate.suites import SuiteOptions, default_registry

    suite = default_registry().get("gsm8k")
    for it in suite.load(SuiteOptions(data_dir=data_dir), N):
        _answers[it.payload[3][0][0]] = re.sub(r"[^0-9.-]", "", str(it.target).split("####")[-1])


def _run(tmp_path: Path, data_dir: Path, use, engine: FakeEngine, *flags: str) -> tuple[int, Path]:  # type: ignore[no-untyped-def]
    use(engine)
    out = tmp_path / "run"
    args = ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites", "gsm8k",
            "--limit", str(N), "--data-dir", str(data_dir), "--out", str(out), *flags]  # fmt: skip
    return main(args), out


def test_each_repeat_carries_one_seed_on_both_arms(
    tmp_path: Path, data_dir: Path, use, gsm8k_answers
) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(sampled=_sampler({}))
    code, out = _run(
        tmp_path, data_dir, use, engine, "--repeats", str(K), "--temperature", "0.7", "--top-p", "0.95"
    )
    assert code == 0
    seeds: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for c in engine.calls:
        if c.kind == "generate" and c.temperature:
            seeds[c.arm][c.prompt].append(c.seed)
    assert set(seeds) == {"baseline", "candidate"}
    assert len(seeds["baseline"]) == N
    for prompt, base in seeds["baseline"].items():
        assert sorted(base) == sorted(seeds["candidate"][prompt])  # the same seed per repeat
        assert len(set(base)) == K  # and a different one for each repeat
    recs = [json.loads(x) for x in (out / "items" / "gsm8k.baseline.jsonl").read_text().splitlines()]
    assert sorted({r["repeat"] for r in recs}) == list(range(K)) and len(recs) == N * K
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["suites"]["gsm8k"]["n"] == N and manifest["request"]["repeats"] == K
    assert manifest["request"]["top_p"] == 0.95


def test_the_gate_tests_per_item_means_and_reports_pass_at_k(
    tmp_path: Path, data_dir: Path, use, gsm8k_answers
) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(sampled=_sampler({"candidate": 0.75}))  # the candidate is wrong 3 times in 4
    code, out = _run(tmp_path, data_dir, use, engine, "--repeats", str(K), "--temperature", "0.7")
    verdict = json.loads((out / "verdict.json").read_text())
    row = next(r for r in verdict["suites"] if r["primary"])
    assert row["n"] == N  # one outcome per item: its mean over the repeats
    assert row["test"].startswith("sign-flip") or "sign" in row["test"]
    assert row["baseline"] == pytest.approx(1.0) and row["candidate"] < 0.5
    assert code == 1 and verdict["verdict"] == "BLOCK"
    note = next(n for n in verdict["notes"] if "pass@1" in n)
    assert f"pass@{K}" in note and "avg of 4" in note


def test_identical_sampled_arms_pass(tmp_path: Path, data_dir: Path, use, gsm8k_answers) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(sampled=_sampler({"baseline": 0.3, "candidate": 0.3}))  # noise shared by seed
    code, out = _run(tmp_path, data_dir, use, engine, "--repeats", str(K), "--temperature", "0.7")
    verdict = json.loads((out / "verdict.json").read_text())
    assert code == 0, verdict["reason"]
    assert any("identical responses 100%" in n for n in verdict["notes"])


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--repeats", "4"], "greedy decoding"),
        (["--repeats", "4", "--temperature", "0.7", "--suites", "arc_easy"], "do(es) not sample"),
        (["--repeats", "0"], "at least 1"),
        (["--top-p", "1.5"], "--top-p"),
    ],
)
def test_repeats_that_cannot_sample_are_refused(
    tmp_path: Path, data_dir: Path, use, flags: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    code, _ = _run(tmp_path, data_dir, use, FakeEngine(), *flags)
    assert code == 2
    assert words in capsys.readouterr().err


def _unshared(wrong_rate: float) -> Callable[[str, str, int], str]:
    """Every arm draws its own noise (an engine that does not share seeds): right unless a draw
    for (arm, prompt, seed) falls under ``wrong_rate``, the same rate on every arm (an A/A)."""

    def sample(arm: str, prompt: str, seed: int) -> str:
        draw = zlib.crc32(f"{arm}|{prompt}|{seed}".encode()) / 2**32
        answer = _answers[prompt] if prompt in _answers else "0"
        return f"The answer is {answer}.\n#### {answer if draw >= wrong_rate else -1}"

    return sample


def test_sampling_without_repeats_takes_the_aa_arms_flips_as_the_reference(
    tmp_path: Path, data_dir: Path, use, gsm8k_answers, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """``--temperature 0.7`` at k = 1 on an A/A whose arms share no draws: far more than 5 % of the
    answers flip by chance. With --aa the agreement row is the paired excess over the A/A arm's
    flips and the A/A passes; without it the run is refused before launch, the fix named."""
    engine = FakeEngine(sampled=_unshared(0.3))
    code, out = _run(tmp_path, data_dir, use, engine, "--temperature", "0.7", "--aa")
    verdict = json.loads((out / "verdict.json").read_text())
    row = verdict["agreement"][0]
    assert code == 0, verdict["reason"]
    assert row["test"].startswith("paired excess over A/A") and row["status"] == "pass"
    assert row["flip_rate"] > 0.05 and row["aa_flip_rate"] > 0.05  # the fixed budget would have blocked
    assert {c.arm for c in engine.calls if c.kind == "generate" and c.temperature} == {
        "baseline",
        "candidate",
        "aa",
    }
    capsys.readouterr()
    code, out = _run(
        tmp_path / "no-aa", data_dir, use, FakeEngine(sampled=_unshared(0.3)), "--temperature", "0.7"
    )
    err = capsys.readouterr().err
    assert code == 2 and "without --repeats" in err and "--repeats 2 or more" in err and "--aa" in err
    assert not (out / "manifest.json").exists()


def test_pass_at_k_and_majority_on_known_records() -> None:
    """Two items, 3 repeats. Item a: baseline right 1 of 3 with the majority answer wrong; the
    candidate right 2 of 3. Item b: both arms wrong every time."""
    from evalgate.gate._repeats import item_means, repeat_summary
    from evalgate.store.records import Pair, Record

    def rec(arm: str, item: str, r: int, answer: str, right: float) -> Record:
        return Record(run_id="x", arm=arm, variant=arm, suite="s", suite_version=1, item_id=item, repeat=r,
                      prompt_hash="h", target="7", response=answer, extracted={"flex": answer},
                      metrics={"em": right})  # fmt: skip

    base = {("a", 0): ("7", 1.0), ("a", 1): ("3", 0.0), ("a", 2): ("3", 0.0)}
    cand = {("a", 0): ("7", 1.0), ("a", 1): ("7", 1.0), ("a", 2): ("3", 0.0)}
    pairs = [
        Pair(i, r, rec("baseline", i, r, *base[i, r]), rec("candidate", i, r, *cand[i, r])) for i, r in base
    ]
    pairs += [
        Pair("b", r, rec("baseline", "b", r, "1", 0.0), rec("candidate", "b", r, "2", 0.0)) for r in range(3)
    ]
    s = repeat_summary(pairs, "em", 3)
    assert s.items == 2
    assert s.pass1 == pytest.approx((1 / 6, 2 / 6))
    assert s.passk == (0.5, 0.5)
    assert s.majority == (0.0, 0.5)  # baseline's majority answer on a is "3": wrong
    assert s.identical == pytest.approx(2 / 6)
    means = {
        p.item_id: (p.baseline.metrics["em"], p.candidate.metrics["em"]) for p in item_means(pairs, ["em"])
    }
    assert means["a"] == pytest.approx((1 / 3, 2 / 3)) and means["b"] == (0.0, 0.0)
    assert "pass@1 (avg of 3) 0.167 -> 0.333" in s.note("s", "em")


def test_the_progress_bar_shows_each_arms_running_accuracy(
    tmp_path: Path, data_dir: Path, use, gsm8k_answers, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """sgl-eval's live accuracy: the baseline right every time, the candidate 1 in 4 (its draws)."""
    from evalgate.run.progress import LiveAccuracy
    from evalgate.store.records import Record

    engine = FakeEngine(sampled=_sampler({"candidate": 0.75}))
    code, out = _run(tmp_path, data_dir, use, engine, "--repeats", str(K), "--temperature", "0.7")
    printed = capsys.readouterr().out
    recs = [json.loads(x) for x in (out / "items" / "gsm8k.candidate.jsonl").read_text().splitlines()]
    metric = next(iter(recs[0]["metrics"]))
    cand = sum(r["metrics"][metric] for r in recs) / len(recs)
    assert code == 1 and f"{metric.split(',')[0]} 1.000" in printed
    assert f"{metric.split(',')[0]} {cand:.3f}" in printed and cand < 0.5
    live = LiveAccuracy("em")
    failed = Record(run_id="x", arm="a", variant="a", suite="s", suite_version=1, item_id="i", repeat=0,
                    prompt_hash="h", target=None, response=None, extracted=None, metrics={}, error="boom")  # fmt: skip
    assert live.add(failed) == "" and live.n == 0  # a failed item is not a wrong one here
