"""Issue #43 (part 3), lm-eval imports: values no model logs are refused (exit 2) naming the
arm, the file and its row, before anything is gated: implausible perplexity counts and
log-likelihoods, an arm whose every loglik is 0, a count that differs between the arms, choice
log-likelihoods that are NaN or positive, a document without the field its suite keys items by,
a metric logged as a string, and a graded value of +-1e308."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from tests.helpers.samples import edited_samples

LMEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "lmeval"
ROLLING = LMEVAL / "rolling"
Change = Callable[[dict[str, Any]], Any]


def _compare(tmp_path: Path, base: Path, cand: Path, *flags: str) -> int:
    out = tmp_path / "run"
    return main(["compare", "--baseline-samples", str(base), "--candidate-samples", str(cand),
                 "--out", str(out), *flags])  # fmt: skip


def _refused(code: int, err: str, arm: str, *says: str) -> None:
    assert code == 2, err
    assert "unexpected" not in err and f"{arm}: " in err and ".jsonl line " in err, err
    for s in says:
        assert s in err, err


def _all_ll(value: float) -> Change:
    def change(r: dict[str, Any]) -> None:
        for m in r["metrics"]:
            r[m][0] = value

    return change


def _count(metric: str, value: float) -> Change:
    return lambda r: r[metric].__setitem__(1, value)


TASK = "rolling_gsm8k"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_count("word_perplexity", 1e300), "counts 1e+300 words"),
        (lambda r: [r[m].__setitem__(1, 1e308) for m in r["metrics"]], "counts 1e+308"),
    ],
    ids=["1e300-words", "1e308-counts"],
)
def test_a_document_counting_implausibly_many_words_on_both_arms_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Change, says: str
) -> None:
    """The real F16/Q4_0 pair BLOCKs; one document said to count 1e300 words on both arms diluted
    the per-word ratio to a PASS."""
    base = edited_samples(tmp_path, ROLLING / "bf16", TASK, change)
    cand = edited_samples(tmp_path, ROLLING / "int4", TASK, change)
    code = _compare(tmp_path, base, cand)
    _refused(code, capsys.readouterr().err, "baseline", f"{TASK} doc_id 5", says)


def test_a_loglik_no_model_can_give_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = edited_samples(tmp_path, ROLLING / "int4", TASK, _all_ll(-1e300))
    code = _compare(tmp_path, ROLLING / "bf16", cand)
    _refused(code, capsys.readouterr().err, "candidate", f"{TASK} doc_id 5", "-1e+300")


def test_every_loglik_zero_on_both_arms_is_refused_not_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = edited_samples(tmp_path, ROLLING / "bf16", TASK, _all_ll(0.0), doc_id=None)
    cand = edited_samples(tmp_path, ROLLING / "int4", TASK, _all_ll(0.0), doc_id=None)
    code = _compare(tmp_path, base, cand)
    err = capsys.readouterr().err
    assert code == 2 and "every document's loglik is 0" in err and ".jsonl" in err, err


def test_a_positive_loglik_is_refused_naming_the_file_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = edited_samples(tmp_path, ROLLING / "int4", TASK, _all_ll(5.0))
    code = _compare(tmp_path, ROLLING / "bf16", cand)
    _refused(code, capsys.readouterr().err, "candidate", "line 6", "positive loglik")


def test_a_word_count_that_differs_between_the_arms_names_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = edited_samples(
        tmp_path, ROLLING / "int4", TASK, lambda r: r["word_perplexity"].__setitem__(1, 126)
    )
    code = _compare(tmp_path, ROLLING / "bf16", cand)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "doc_id 5 counts 125 words on the baseline" in err and "126 on the candidate" in err
    assert err.count(".jsonl line 6") == 2, err


def _choices(value: str) -> Change:
    def change(r: dict[str, Any]) -> None:
        for x in r["resps"]:
            x[0][0] = value
        for x in r["filtered_resps"]:
            x[0] = value

    return change


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_choices("nan"), "log-likelihood of nan"),
        (_choices("5.0"), "log-likelihood of 5.0"),
        (lambda r: r["doc"].pop("id"), "no usable 'id' field"),
        (lambda r: r.__setitem__("acc", "1"), "acc = '1' is a string, not a number"),
    ],
    ids=["nan-choice", "positive-choice", "doc-without-id", "acc-string"],
)
def test_a_bad_multiple_choice_sample_is_refused_naming_the_file_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Change, says: str
) -> None:
    cand = edited_samples(tmp_path, LMEVAL / "int4", "arc_easy", change)
    code = _compare(tmp_path, LMEVAL / "bf16", cand, "--suites", "arc_easy")
    _refused(code, capsys.readouterr().err, "candidate", "arc_easy doc_id 5", "line 6", says)


def _graded(root: Path, name: str, values: list[float]) -> Path:
    folder = root / name / "model"
    folder.mkdir(parents=True)
    rows = [
        {"doc_id": d, "doc": {"q": d}, "target": "1", "filter": "none", "metrics": ["score"], "score": v,
         "doc_hash": f"h{d}", "prompt_hash": f"p{d}", "resps": [["x"]], "filtered_resps": ["x"]}
        for d, v in enumerate(values)
    ]  # fmt: skip
    (folder / "samples_mytask_2026-12-01T10-00-00.000001.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    return root / name


@pytest.mark.parametrize("big", [1e308, -1e308])
def test_a_graded_value_of_1e308_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], big: float
) -> None:
    base = _graded(tmp_path, "b", [0.5 + 0.01 * i for i in range(30)])
    cand = _graded(tmp_path, "c", [0.5 + 0.01 * i if i != 5 else big for i in range(30)])
    code = _compare(tmp_path, base, cand)
    _refused(code, capsys.readouterr().err, "candidate", "mytask doc_id 5", "no per-document score")
