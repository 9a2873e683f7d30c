"""`--aa both` (#44, the candidate's own noise) end to end on the fake engine: the candidate runs a
second time on the first --aa-items items, each arm's identical-output share is shown, and the
verdict says when the candidate is non-deterministic where the baseline is not."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalgate.arms import AA_PAD
from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.gate import load_run, verdict_for
from evalgate.request import CompareRequest
from evalgate.store.manifest import load_manifest
from tests.helpers.exams import yes_exam
from tests.helpers.guards import compare

N = 50  # the smoke preset's items
NOISY = "candidate non-deterministic where the baseline is not"


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items q0..q(N-1); the right answer to each is "yes"."""
    return yes_exam(tmp_path / "exam", N)


def noisy_on(arm: str, items: set[int]) -> Any:
    """Every arm answers "yes"; ``arm`` answers "Yes" on ``items``: the same grade (the exact grader
    folds case), a different text, as a kernel that is not batch-invariant would answer."""
    return lambda on, prompt: "Yes" if on == arm and int(prompt[1:]) in items else "yes"


def asked(engine: FakeEngine, arm: str) -> Counter[str]:
    return Counter(c.prompt for c in engine.calls if c.arm == arm and c.kind == "chat")


def verdict(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "verdict.json").read_text()))


def test_a_noisy_candidate_repeat_is_said_in_every_output(
    exam: Path, tmp_path: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = use(FakeEngine(noisy_on("aa_candidate", {i for i in range(N) if i % 3})))
    out = tmp_path / "run"
    flags = ("--aa", "both", "--aa-items", "15", "--reveal-private")
    assert compare(out, exam, *flags) == 0  # shown, not gated: the flip budget is the baseline's A/A
    assert engine.launched == [["baseline"], ["candidate"], ["aa"], ["aa_candidate"]]
    assert asked(engine, "aa") == Counter(f"q{i}" for i in range(N))  # the noise floor: every item
    ran = Counter(f"q{i}" for i in range(15 + AA_PAD))  # the first --aa-items, and AA_PAD more
    assert asked(engine, "aa_candidate") == ran  # so the compared 15 share their batches as the first time
    v = verdict(out)
    (row,) = v["repeatability"]
    assert (row["n"], row["baseline"], row["candidate"]) == (15, 1.0, 5 / 15)  # the first 15 only
    assert (row["only_baseline"], row["only_candidate"], row["compared"]) == (10, 0, "answer text")
    assert row["noisier"] and row["p_value"] == pytest.approx(0.5**10)
    assert any(NOISY in n for n in v["notes"])
    assert v["agreement"][0]["aa_flip_rate"] == 0.0  # the budget still comes from the baseline's A/A
    assert "the candidate's repeat's tokenizer" in " ".join(v["comparability"]["checked"])
    assert NOISY in capsys.readouterr().out
    summary = (out / "summary.md").read_text()
    html = (out / "report.html").read_text()
    assert "Each arm run twice" in summary and "NOISIER" in summary and NOISY in summary
    assert "Each arm run twice" in html and "NOISIER" in html


def test_a_candidate_as_repeatable_as_the_baseline_gets_no_note(exam: Path, tmp_path: Path, use: Any) -> None:
    use(FakeEngine(noisy_on("aa", {1})))  # the baseline's own repeat differs once: the candidate is not worse
    out = tmp_path / "run"
    assert compare(out, exam, "--aa", "both", "--reveal-private") == 0
    v = verdict(out)
    (row,) = v["repeatability"]
    assert row["n"] == N  # fewer items than the default --aa-items: all of them, compared
    assert (row["only_baseline"], row["only_candidate"]) == (0, 1)
    assert not row["noisier"] and row["p_value"] == 1.0
    assert not any(NOISY in n for n in v["notes"])


def test_private_responses_not_recorded_are_not_measured(exam: Path, tmp_path: Path, use: Any) -> None:
    use(FakeEngine(noisy_on("aa_candidate", set(range(N)))))
    out = tmp_path / "run"
    assert compare(out, exam, "--aa", "both") == 0
    (row,) = verdict(out)["repeatability"]
    assert row["n"] == 0 and not row["noisier"] and "--reveal-private" in row["reason"]


def test_repeats_run_together_on_a_machine_with_gpus_for_each_arm(
    exam: Path, tmp_path: Path, use: Any
) -> None:
    engine = use(FakeEngine(concurrent=True))
    assert compare(tmp_path / "run", exam, "--aa", "both", "--aa-items", "5") == 0
    assert engine.launched == [["baseline", "candidate"], ["aa", "aa_candidate"]]
    assert sum(asked(engine, "aa_candidate").values()) == 5 + AA_PAD


@pytest.mark.parametrize(
    ("aa", "arm", "label"), [("baseline", "aa", "baseline"), ("both", "aa_candidate", "candidate")]
)
def test_a_repeat_arm_with_another_tokenizer_is_not_comparable(
    exam: Path, tmp_path: Path, use: Any, aa: str, arm: str, label: str
) -> None:
    use(FakeEngine())
    out = tmp_path / "run"
    assert compare(out, exam, "--aa", aa, "--reveal-private") == 0
    path = out / "manifest.json"
    m = json.loads(path.read_text())
    m["arms"][arm]["tokenizer_fingerprint"] = "0000aaaa1111bbbb"
    path.write_text(json.dumps(m))
    v = verdict_for(load_run(out))
    assert v.comparability is not None and v.comparability.status == "not comparable"
    assert f"different tokenizer on the {label}'s repeat: {label}" in v.reason and v.verdict == "ERROR"


def test_aa_items_needs_aa_both_and_a_bare_aa_is_the_baseline(
    exam: Path, tmp_path: Path, use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = use(FakeEngine())
    assert compare(tmp_path / "dry", exam, "--aa", "both", "--aa-items", "7", "--dry-run") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "aa_candidate" in out and "the candidate a second time on the first 7 items of each suite" in out
    assert compare(tmp_path / "a", exam, "--aa-items", "5") == 2
    assert compare(tmp_path / "b", exam, "--aa", "baseline", "--aa-items", "5") == 2
    with pytest.raises(SystemExit) as bad:  # argparse: --aa takes baseline or both
        main(["compare", "--aa", "twice", "--suites", f"private:{exam}"])
    assert bad.value.code == 2
    assert compare(tmp_path / "c", exam, "--aa") == 0
    assert engine.launched == [["baseline"], ["candidate"], ["aa"]]
    assert load_manifest(tmp_path / "c").request.aa == "baseline"
    assert "repeatability" not in verdict(tmp_path / "c")  # --aa alone: written as before


def test_old_requests_with_a_boolean_aa_still_load(tmp_path: Path) -> None:
    assert CompareRequest.model_validate({"aa": True}).aa == "baseline"
    assert CompareRequest.model_validate({"aa": False}).aa is None
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "schema1_run_bf16_vs_fp8kv" / "manifest.json"
    doc = json.loads(fixture.read_text())
    doc["request"]["aa"] = True
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    assert load_manifest(tmp_path).request.aa == "baseline"
