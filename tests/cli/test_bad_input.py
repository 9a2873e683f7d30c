"""Issue #32, user input: every value a user can type or write is checked before anything starts,
and a bad one is exit 2 with the rule it broke, never the catch-all (exit 3 and a traceback file).
Each case goes through ``evalgate.cli.main``, as a user would run it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from tests.helpers.guards import Capture, compare, exam

__all__ = ["exam"]  # fixtures


def _refused(capsys: Capture, *words: str) -> str:
    """stderr of a refusal: the words, the fix, and no traceback file."""
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    assert "fix:" in err and "traceback" not in err, err
    return err


# -- flags: finite and in range, checked before a server starts ----------------------------------
@pytest.mark.parametrize("lengths", ["²k", "٣k", "1k,²", "9" * 5000])
def test_context_lengths_take_ascii_digits_only(
    tmp_path: Path, use: Any, capsys: Capture, lengths: str
) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises; ``int("٣")`` is 3: neither is a length."""
    engine = use(FakeEngine())
    argv = ["compare", "--engine", "fake", "--suites", "long_context", "--context-lengths", lengths,
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, "is not a length in tokens")
    assert engine.launched == []


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/\nx", "http://127.0.0.1:9\n/v1", "http://127.0.0.1: 9", "http://127.0.0.1:9\t/"],
)
def test_a_url_with_a_space_or_line_break_is_refused(
    exam: Path, tmp_path: Path, capsys: Capture, url: str
) -> None:
    argv = ["compare", "--suites", f"private:{exam}", "--baseline-url", url,
            "--candidate-url", "http://127.0.0.1:8", "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, "--baseline-url", "line break")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e400"])
@pytest.mark.parametrize(
    "section, key", [("client", "timeout_s"), ("client", "deadline_s"), ("llamacpp", "ready_timeout_s")]
)
def test_an_infinite_or_negative_client_setting_is_refused(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture, section: str, key: str, value: str
) -> None:
    """TOML has inf and nan; ``timeout_s = inf`` was an OverflowError (exit 3) in the event loop."""
    engine = use(FakeEngine())
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text(f"[{section}]\n{key} = {value}\n")
    assert compare(tmp_path / "r", exam, "--config", str(cfg)) == 2
    _refused(capsys, f"{section}.{key}")
    assert engine.launched == [] and not (tmp_path / "r").exists()


def test_temperature_nan_says_it_must_be_a_finite_number(tmp_path: Path, capsys: Capture) -> None:
    argv = ["compare", "--repeats", "2", "--temperature", "nan", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = _refused(capsys, "--temperature nan is not a finite number", "at least 0")
    assert "greedy decoding" not in err


def test_repeats_above_the_maximum_is_refused_before_planning(
    tmp_path: Path, use: Any, capsys: Capture
) -> None:
    """(arc_easy does not sample, which the run refuses too, but only once the suites are settled.)"""
    use(FakeEngine())
    argv = ["compare", "--engine", "fake", "--repeats", "100000000", "--temperature", "0.7",
            "--suites", "arc_easy", "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, "--repeats 100000000 must be at least 1 and at most 100")


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--request-timeout", "inf"], "--request-timeout inf is not a finite number"),
        (["--request-timeout", "1e400"], "--request-timeout inf is not a finite number"),
        (["--deadline", "inf"], "--deadline inf is not a finite number"),
        (["--deadline", "1e12"], "--deadline 1e+12 must be more than 0 and at most 2,592,000"),
        (["--tries", "1000"], "--tries 1000 must be at least 1 and at most 20"),
        (["--top-k", "99999999999"], "--top-k 99999999999 must be at least 1"),
        (["--seed", "-1"], "--seed -1 must be at least 0"),
        (["--max-gen-tokens", "99999999999"], "--max-gen-tokens 99999999999 must be at least 1"),
        (["--alpha", "1e-300"], "--alpha 1e-300 is below 1e-06"),
        (["--flip-budget", "5"], "--flip-budget 5 is not a rate between 0 and 1"),
        (["--max-gen-tokens", "-5"], "--max-gen-tokens -5 must be at least 1"),
        (["--request-timeout", "0"], "--request-timeout 0 must be more than 0"),
        (["--tries", "0"], "--tries 0 must be at least 1"),
        (["--deadline", "-1"], "--deadline -1 must be more than 0"),
    ],
)
def test_every_numeric_flag_is_finite_and_in_range(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture, flags: list[str], words: str
) -> None:
    engine = use(FakeEngine())
    assert compare(tmp_path / "r", exam, *flags) == 2
    _refused(capsys, words)
    assert engine.launched == [] and not (tmp_path / "r").exists()


# -- plan-power: junk --from files and values the plan cannot hold ---------------------------------
@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"suites": [{"primary": true}]}', "without 'suite' and a numeric 'flips'"),
        ('{"suites": [{"suite": "arc_easy", "primary": true, "flips": "x"}]}', "numeric 'flips'"),
        ('{"suites": [{"suite": "arc_easy", "primary": true, "flips": NaN}]}', "not a rate in [0, 1]"),
        ('{"aa": [{"suite": "arc_easy", "primary": true, "flips": 7}]}', "not a rate in [0, 1]"),
        ('{"suites": {"arc_easy": 0.1}}', "is not a list of rows"),
        ('{"suites": [3]}', "is not a list of rows"),
    ],
)
def test_plan_power_refuses_a_junk_verdict_and_writes_nothing_there(
    tmp_path: Path, capsys: Capture, text: str, words: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "verdict.json").write_text(text)
    assert main(["plan-power", "--suites", "arc_easy", "--mde", "2pt", "--from", str(run)]) == 2
    _refused(capsys, "--from", words)
    assert sorted(p.name for p in run.rglob("*")) == ["verdict.json"]  # no logs/traceback-*.txt


@pytest.mark.parametrize(
    "flags",
    [
        ["--mde", "1e-300"],
        ["--mde", "2pt", "--alpha", "1e-300"],
        ["--mde", "2pt", "--power", "nan"],
        ["--mde", "2pt", "--alpha", "nan"],
    ],
)
def test_plan_power_values_the_plan_cannot_hold_are_refused(capsys: Capture, flags: list[str]) -> None:
    assert main(["plan-power", "--suites", "arc_easy", *flags]) == 2
    _refused(capsys, flags[-2])


# -- [suites.<name>] tables under --chat --------------------------------------------------------------
def test_a_chat_variants_table_applies_under_chat(tmp_path: Path, data_dir: Path, use: Any) -> None:
    """``--suites gsm8k --chat`` runs gsm8k_chat, so ``[suites.gsm8k_chat]`` is its table."""
    engine = use(FakeEngine(lambda arm, prompt: "The final answer is 3"))
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text("[suites.gsm8k_chat]\nmax_tokens = 8192\n\n[suites.tool_calls]\nprefill = false\n")
    argv = ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--limit", "2",
            "--data-dir", str(data_dir), "--out", str(tmp_path / "r"), "--config", str(cfg),
            "--suites", "gsm8k", "--chat"]  # fmt: skip
    assert main(argv) == 0
    assert {p["max_tokens"] for _, p in engine.chats} == {8192}
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["request"]["suite_options"] == {"gsm8k_chat": {"max_tokens": 8192}}  # tool_calls not run


def test_the_plain_suites_table_under_chat_is_refused(tmp_path: Path, use: Any, capsys: Capture) -> None:
    use(FakeEngine())
    cfg = tmp_path / "evalgate.toml"
    cfg.write_text("[suites.gsm8k]\nmax_tokens = 8192\n")
    argv = ["compare", "--engine", "fake", "--config", str(cfg), "--suites", "gsm8k", "--chat",
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, "[suites.gsm8k] in evalgate.toml: --chat runs gsm8k_chat", "[suites.gsm8k_chat]")


# -- a path that is there but is not a regular file says what it is --------------------------------
def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_a_config_that_is_a_folder_or_a_pipe_says_so(tmp_path: Path, capsys: Capture) -> None:
    out = ["--out", str(tmp_path / "r")]
    assert main(["compare", "--config", str(tmp_path), *out]) == 2
    _refused(capsys, f"config file {tmp_path} is not a file: it is a directory")
    assert main(["compare", "--config", str(_fifo(tmp_path / "evalgate.toml")), *out]) == 2
    _refused(capsys, "is not a file: it is a FIFO (named pipe)")


def test_an_exam_whose_items_are_a_folder_or_a_pipe_says_so(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    use(FakeEngine())
    (exam / "items.jsonl").unlink()
    (exam / "items.jsonl").mkdir()
    assert compare(tmp_path / "r", exam) == 2
    err = _refused(capsys, "items.jsonl is not a file: it is a directory")
    assert "does not exist" not in err
    (exam / "items.jsonl").rmdir()
    _fifo(exam / "items.jsonl")
    assert compare(tmp_path / "r", exam) == 2
    _refused(capsys, "items.jsonl is not a file: it is a FIFO")
    (exam / "items.jsonl").unlink()
    (exam / "items.jsonl").write_text("")
    _fifo(tmp_path / "pipe.toml")
    (exam / "exam.toml").unlink()
    (exam / "exam.toml").symlink_to(tmp_path / "pipe.toml")  # read, it would block for ever
    assert compare(tmp_path / "r", exam) == 2
    _refused(capsys, "exam.toml is not a file: it is a FIFO")
    assert compare(tmp_path / "r", exam / "items.jsonl") == 2  # a file where the folder belongs
    _refused(capsys, f"private exam folder {exam / 'items.jsonl'} is a regular file, not a folder")


def test_samples_and_verdict_paths_that_are_no_files_say_what_they_are(
    tmp_path: Path, capsys: Capture
) -> None:
    pipe = _fifo(tmp_path / "samples_arc_easy_2025-01-01T00-00-00.jsonl")
    argv = ["compare", "--baseline-samples", str(pipe), "--candidate-samples", str(tmp_path),
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, f"--baseline-samples {pipe} is a FIFO (named pipe)")
    run = tmp_path / "run"
    (run / "verdict.json").mkdir(parents=True)
    assert main(["plan-power", "--suites", "arc_easy", "--mde", "2pt", "--from", str(run)]) == 2
    _refused(capsys, "verdict.json is not a file: it is a directory")


# -- private exams: one suite per name; a regex that cannot compile is refused at load ---------------
def test_two_exams_with_one_name_are_refused_naming_both(tmp_path: Path, use: Any, capsys: Capture) -> None:
    engine = use(FakeEngine())
    row = {"id": "q1", "prompt": "say yes", "answer": "yes", "grader": "exact"}
    for version in ("v1", "v2"):
        (tmp_path / version / "myexam").mkdir(parents=True)
        (tmp_path / version / "myexam" / "items.jsonl").write_text(json.dumps(row) + "\n")
    specs = f"private:{tmp_path / 'v1' / 'myexam'},private:{tmp_path / 'v2' / 'myexam'}"
    argv = ["compare", "--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites", specs,
            "--out", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    _refused(capsys, str(tmp_path / "v1" / "myexam"), str(tmp_path / "v2" / "myexam"), "private:myexam")
    assert engine.launched == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("(" * 5000 + ")" * 5000, "nested too deeply"),  # RecursionError in the regex parser: was exit 3
        ("(?:(?:(?:a{60000}){60000}){60000})", "within 1 s and 512 MiB"),  # expands to 2e14 a's
        ("[a-", "is not a valid regular expression (unterminated character set"),
    ],
)
def test_an_exam_regex_that_cannot_compile_is_refused_at_load_naming_the_item(
    tmp_path: Path, use: Any, capsys: Capture, pattern: str, why: str
) -> None:
    engine = use(FakeEngine())
    folder = tmp_path / "exam"
    folder.mkdir()
    rows = [
        {"id": "fine", "prompt": "say yes", "answer": "^yes$", "grader": "regex"},
        {"id": "bomb", "prompt": "say yes", "answer": pattern, "grader": "regex"},
    ]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert compare(tmp_path / "r", folder) == 2
    err = _refused(capsys, "items.jsonl:2: item 'bomb' has an 'answer' that", why)
    assert pattern[:20] not in err  # an answer is private: never quoted
    assert engine.launched == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize("line", ["temperature = inf", "temperature = nan", "max_tokens = 99999999999"])
def test_exam_toml_numbers_are_finite_and_in_range(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture, line: str
) -> None:
    engine = use(FakeEngine())
    (exam / "exam.toml").write_text(line + "\n")
    assert compare(tmp_path / "r", exam) == 2
    _refused(capsys, f"{line.split()[0]} must be")
    assert engine.launched == []
