"""Issue #17: a gate that never turns garbage into PASS, nor a crash into BLOCK.

`evalgate compare` in attach mode against hostile stubs of llama-server (tests/helpers/hostile_server.py)
that answer the preflight well and then misbehave item by item. Every mode must end in exit 3
naming the arm and the cause, or in a correct BLOCK; never PASS from invalid data, never exit 1
from a crash, never a traceback. The pure checks behind it (the scorers' validation, the
unanswered test) are pinned here too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines._scoring import LOGPROB_TOLERANCE, check_chat, completion_result
from evalgate.engines.llamacpp._scorer import read_forced_logprobs
from evalgate.errors import InvalidResponse
from evalgate.gate import GatePolicy, decide, unanswered
from evalgate.run.loop import ITEM_TRIES
from evalgate.store.records import Pair, Record, RecordStore
from tests.helpers.background import serving
from tests.helpers.exams import number_exam
from tests.helpers.hostile_server import SCRIPT, Hostile, hostile_app

REPO = Path(__file__).resolve().parents[2]
Stub = Callable[..., Hostile]


@pytest.fixture
def stub() -> Iterator[Stub]:
    """``stub(mode, **script) -> Hostile``, served on 127.0.0.1 from a background loop."""
    with serving(Hostile, hostile_app) as start:
        yield start


def exam(folder: Path, answer: str, n: int = 12) -> str:
    return number_exam(folder, answer, n)


def compare(base: Hostile, cand: Hostile, out: Path, capsys: Any, *flags: str) -> tuple[int, str]:
    """Exit code and everything printed; a crash (an exception out of main) fails the test."""
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
            "--baseline-url", base.url, "--candidate-url", cand.url, "--out", str(out), *flags]  # fmt: skip
    try:
        code = main(argv)
    except BaseException:  # a traceback is exactly what must not happen
        pytest.fail("evalgate crashed instead of exiting 3:\n" + traceback.format_exc())
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "Traceback" not in text and not list(out.glob("logs/traceback-*")), text  # no crash, caught or not
    assert "ERROR: " in text or "BLOCK: " in text or "PASS: " in text, text  # the verdict was printed
    return code, text


def verdict(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "verdict.json").read_text()))


def errored(out: Path, suite: str, arm: str) -> list[str]:
    return [r.error for r in RecordStore(out).load(suite, arm).values() if r.error]


# -- every misbehaviour after the preflight: exit 3, naming the arm and the cause ---------------

LOGLIK_MODES = {
    "nan": "logprob of nan",
    "inf": "logprob of inf",
    "neg_inf": "logprob of -inf",
    "positive": "logprob of 0.5",
    "null_logprob": "logprob of null",
    "missing_logprobs": "0 logprobs for",
    "short_logprobs": "logprobs for",
    "no_choices": "no choice",
    "invalid_json": "not JSON",
    "empty_body": "empty body",
    "http500": "HTTP 500",
}


@pytest.mark.parametrize("mode", list(LOGLIK_MODES))
def test_an_invalid_candidate_answer_is_an_item_error_never_a_score(
    mode: str, stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    base, cand = stub("good"), stub(mode)
    out = tmp_path / "run"
    flags = ("--suites", "arc_easy", "--limit", "5", "--data-dir", str(data_dir))
    code, printed = compare(base, cand, out, capsys, *flags)
    assert code == 3, printed
    v = verdict(out)
    assert v["verdict"] == "ERROR" and "\n" not in v["reason"] and v["suites"][0]["status"] == "error"
    assert "on the candidate" in v["reason"] and LOGLIK_MODES[mode] in v["reason"], v["reason"]
    assert f"the candidate ({cand.url}) server" in v["reason"] or mode == "http500"
    assert not errored(out, "arc_easy", "baseline") and errored(out, "arc_easy", "candidate")
    scored = [b for b in cand.sent("/v1/completions") if "grammar" in b]
    assert len(scored) > cand.grace  # the run got past the preflight: the items failed, not the probes
    if mode not in ("http500",):  # retried like a failed request before it was recorded
        assert len(scored) >= cand.grace + ITEM_TRIES * len(errored(out, "arc_easy", "candidate"))


def test_nan_on_both_arms_is_exit_3_even_with_errors_as_wrong(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    flags = ("--suites", "arc_easy", "--limit", "5", "--data-dir", str(data_dir))
    code, printed = compare(stub("nan"), stub("nan"), tmp_path / "strict", capsys, *flags)
    assert code == 3, printed
    reason = verdict(tmp_path / "strict")["reason"]
    assert "on the baseline" in reason and "on the candidate" in reason and "nan" in reason
    code, printed = compare(stub("nan"), stub("nan"), tmp_path / "wrong", capsys, *flags, "--errors-as-wrong")
    assert code == 3, printed  # both arms "wrong" on every item would pair as agreement: PASS
    v = verdict(tmp_path / "wrong")
    assert v["verdict"] == "ERROR" and "the baseline failed 5 of 5 items" in v["reason"]
    assert v["suites"][0]["status"] == "error"


def test_a_candidate_that_fails_where_a_weak_baseline_is_wrong_blocks_with_errors_as_wrong(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    flags = ("--suites", "arc_easy", "--limit", "10", "--data-dir", str(data_dir), "--errors-as-wrong")
    code, printed = compare(stub("good"), stub("nan"), tmp_path / "run", capsys, *flags)
    assert code == 1, printed
    row = verdict(tmp_path / "run")["agreement"][0]
    assert row["status"] == "block" and row["unanswered"]["n10"] == 10 and row["unanswered"]["significant"]


# -- generations: null text is an error; empty and cut-off answers are gated ---------------------


def test_null_text_is_an_error_not_the_string_none(
    stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "run"
    flags = ("--suites", "gsm8k", "--limit", "4", "--data-dir", str(data_dir))
    code, printed = compare(stub("good"), stub("null_text"), out, capsys, *flags)
    assert code == 3, printed
    assert "null as the text" in verdict(out)["reason"] and "on the candidate" in verdict(out)["reason"]


@pytest.mark.parametrize("mode", ["empty_text", "truncated", "huge_text"])
def test_a_candidate_that_goes_empty_or_cut_off_blocks_on_the_agreement_row(
    mode: str, stub: Stub, data_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    """The issue's case: the baseline answers (wrongly: low accuracy), the candidate gives nothing,
    so accuracy and flips agree; only the unanswered test sees it."""
    out = tmp_path / "run"
    flags = ("--suites", "gsm8k", "--limit", "8", "--data-dir", str(data_dir))
    code, printed = compare(stub("good"), stub(mode), out, capsys, *flags)
    assert code == 1, printed
    v = verdict(out)
    row, acc = v["agreement"][0], v["suites"][0]
    assert acc["status"] != "block" and row["flips"] == 0  # nothing else would have blocked
    assert row["status"] == "block" and row["unanswered"]["candidate_rate"] == 1.0
    assert row["unanswered"]["baseline_rate"] == 0.0 and "unanswered" in row["reason"]
    assert "the candidate left 8 item(s) unanswered" in v["reason"]
    kept = RecordStore(out).load("gsm8k", "candidate").values()
    assert all(unanswered(r) for r in kept)


def test_an_empty_chat_answer_blocks_a_private_exam_the_baseline_fails(
    stub: Stub, tmp_path: Path, capsys: Any
) -> None:
    suite = exam(tmp_path / "exam", answer="no")  # the baseline answers "yes": accuracy 0 on both arms
    base, cand = stub("good", answer="yes"), stub("empty_text", answer="yes")
    code, printed = compare(base, cand, tmp_path / "run", capsys, "--suites", suite)
    assert code == 1, printed
    v = verdict(tmp_path / "run")
    assert v["suites"][0]["n10"] == 0 and v["agreement"][0]["status"] == "block"
    assert cand.sent("/v1/chat/completions")[-1]["messages"][-1]["content"].startswith("Is ")


def test_script_and_bidi_answers_are_scored_as_text_and_escaped(
    stub: Stub, tmp_path: Path, capsys: Any
) -> None:
    suite = exam(tmp_path / "exam", answer="yes")
    base, cand = stub("good", answer="yes"), stub("script_text", answer="yes")
    out = tmp_path / "run"
    code, printed = compare(base, cand, out, capsys, "--suites", suite, "--reveal-private")
    assert code == 1, printed  # a wrong answer on every item: a correct BLOCK
    responses = [r.response for r in RecordStore(out).load("private:exam", "candidate").values()]
    assert responses and all(r == SCRIPT for r in responses)  # kept verbatim in the records
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<script>alert("x")</script>' not in html and "<img src=x" not in html
    assert "\u202e" not in html and "\\u202e\\u2066" in html  # shown escaped, never obeyed
    assert "\u202e" not in printed


# -- the real command line: exit 3 and no traceback --------------------------------------------


def test_the_cli_exits_3_without_a_traceback(stub: Stub, tmp_path: Path) -> None:
    base, cand = stub("good", answer="yes"), stub("invalid_json")
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
            "--baseline-url", base.url, "--candidate-url", cand.url, "--out", str(tmp_path / "run"),
            "--suites", exam(tmp_path / "exam", answer="yes", n=3)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "evalgate", *argv], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "not JSON" in proc.stdout + proc.stderr


# -- the checks themselves, on answers alone ------------------------------------------------------


def _forced(values: list[Any]) -> dict[str, Any]:
    content = [{"id": 10 + i, "logprob": v, "top_logprobs": [{"id": 10 + i}]} for i, v in enumerate(values)]
    return {"choices": [{"logprobs": {"content": content}}]}


def test_logprobs_must_be_finite_and_not_above_zero() -> None:
    total, greedy, n = read_forced_logprobs(_forced([-1.0, LOGPROB_TOLERANCE / 2]), [10, 11], "candidate")
    assert (n, greedy) == (2, True) and math.isclose(total, -1.0 + LOGPROB_TOLERANCE / 2)
    for bad in (float("nan"), float("inf"), float("-inf"), 0.01, None, "-1", True):
        with pytest.raises(InvalidResponse, match="the candidate server answered a logprob of"):
            read_forced_logprobs(_forced([-1.0, bad]), [10, 11], "candidate")
    with pytest.raises(InvalidResponse, match="1 logprobs for 2 forced tokens"):
        read_forced_logprobs(_forced([-1.0]), [10, 11], "candidate")
    with pytest.raises(InvalidResponse, match="unexpected shape"):
        read_forced_logprobs({"choices": [{"logprobs": {"content": ["x", "y"]}}]}, [10, 11], "candidate")


def test_completions_and_chat_answers_are_checked() -> None:
    ok = completion_result(
        {"choices": [{"text": "4\n\nQ:", "finish_reason": "length"}]}, ["\n\n"], "baseline"
    )
    assert (ok["text"], ok["finish_reason"], ok["prompt_tokens"]) == ("4", "stop", 0)  # cut: it stopped
    for data, why in (
        ({"choices": [{"text": None}]}, "null as the text"),
        ({"choices": [{"text": 7}]}, "7 as the text"),
        ({"choices": []}, r"no choice \(choices: \[\]\)"),
        ({"error": "x"}, "no choice"),
        ([1, 2], "no choice"),
    ):
        with pytest.raises(InvalidResponse, match=why):
            completion_result(data, [], "candidate")
    assert check_chat({"choices": [{"message": {"content": None, "tool_calls": [{"id": "1"}]}}]}, "c")
    for data in (
        {"choices": []},
        {"choices": [{"message": "hi"}]},
        {"choices": [{"message": {"content": 3}}]},
    ):
        with pytest.raises(InvalidResponse, match="the c server answered /v1/chat/completions"):
            check_chat(data, "c")


def _pair(i: int, base: dict[str, Any], cand: dict[str, Any]) -> Pair:
    def rec(arm: str, extra: dict[str, Any]) -> Record:
        return Record(
            run_id="r", arm=arm, variant=arm, suite="gen", suite_version=1, item_id=f"q{i}", repeat=0,
            prompt_hash="h", target="1", response="x", extracted=None, metrics={"em": 0.0}, extra=extra,
        )  # fmt: skip

    return Pair(f"q{i}", 0, rec("baseline", base), rec("candidate", cand))


def test_the_unanswered_test_is_one_sided_paired_and_in_the_holm_family() -> None:
    said = {"empty": False, "finish_reason": "stop"}
    empty, cut = {"empty": True, "finish_reason": "stop"}, {"empty": False, "finish_reason": "length"}
    pairs = [_pair(i, said, empty if i % 2 else cut) for i in range(10)] + [
        _pair(10 + i, said, said) for i in range(30)
    ]
    v = decide({"gen": (["em"], pairs)}, policy=GatePolicy())
    row = v.agreement[0]
    assert v.verdict == "BLOCK" and row.status == "block" and row.unanswered is not None
    assert (row.unanswered.n10, row.unanswered.n01, row.unanswered.candidate_rate) == (10, 0, 0.25)
    assert row.unanswered.p_adjusted is not None and row.unanswered.p_adjusted >= row.unanswered.p_value
    swapped = [Pair(p.item_id, 0, p.candidate, p.baseline) for p in pairs]  # the baseline worse: no block
    assert decide({"gen": (["em"], swapped)}, policy=GatePolicy()).verdict == "PASS"
    noise = [_pair(i, cut, said) for i in range(3)] + [_pair(3 + i, said, cut) for i in range(3)]
    assert decide({"gen": (["em"], noise + pairs[10:])}, policy=GatePolicy()).verdict == "PASS"
    old = [_pair(i, {}, {}) for i in range(5)]  # records written before the indicators: no test
    v = decide({"gen": (["em"], old)}, policy=GatePolicy())
    assert v.agreement[0].unanswered is None and "unanswered" not in v.to_json()
