"""The composite action's probe step (``probe: cache,warm-cold``) against a stand-in evalgate: the
candidate's server is probed after compare, each probe's files land in the run folder, its
summary.md is appended to the step summary, and a probe that does not pass fails the gate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.test_github import ACTION, REPO, _load, _outputs

FAKE = """#!/usr/bin/env bash
printf '%s\\n' "$@" >> "$FAKE_ARGS"; echo "--" >> "$FAKE_ARGS"
out=""; prev=""
for a in "$@"; do if [ "$prev" = --out ]; then out="$a"; fi; prev="$a"; done
mkdir -p "$out"
case "$FAKE_MODE:$2" in
  crash:*) echo "error: no server" >&2; exit 3 ;;
  block:warm-cold) v=BLOCK; rc=1 ;;
  *) v=PASS; rc=0 ;;
esac
printf '{"verdict": "%s"}\\n' "$v" > "$out/probe.json"
printf '## evalgate probe: %s %s\\n' "$2" "$v" > "$out/summary.md"
exit "$rc"
"""


def _step(name: str) -> str:
    return next(s["run"] for s in _load(ACTION)["runs"]["steps"] if s["name"] == name)


def _run(tmp_path: Path, mode: str, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found")
    fake = tmp_path / "evalgate"
    fake.write_text(FAKE, encoding="utf-8")
    fake.chmod(0o755)
    (tmp_path / "run").mkdir()
    for f in ("summary.md", "output"):
        (tmp_path / f).write_text("", encoding="utf-8")
    env = {
        "PATH": "/usr/bin:/bin",
        "EVALGATE": str(fake),
        "EVALGATE_PYTHON": sys.executable,
        "FAKE_MODE": mode,
        "FAKE_ARGS": str(tmp_path / "args"),
        "RUNNER_TEMP": str(tmp_path),
        "REPORT_DIR": str(tmp_path / "run"),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        **{
            f"IN_{k.upper()}": inputs.get(k, "")
            for k in ("probe", "probe_args", "candidate", "engine", "config")
        },
    }
    proc = subprocess.run(
        [bash, "-c", _step("evalgate probe")], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    return proc, _outputs(env["GITHUB_OUTPUT"])


def _calls(tmp_path: Path) -> list[list[str]]:
    text = (tmp_path / "args").read_text(encoding="utf-8")
    return [c.strip("\n").splitlines() for c in text.split("--\n") if c.strip()]


def test_the_action_has_the_probe_inputs_and_outputs() -> None:
    action = _load(ACTION)
    assert {"probe", "probe-args"} <= set(action["inputs"]) and action["inputs"]["probe"]["default"] == ""
    assert {"probe-verdict", "probe-exit-code"} <= set(action["outputs"])
    names = [s["name"] for s in action["runs"]["steps"]]
    assert (
        names.index("evalgate compare") < names.index("evalgate probe") < names.index("Upload the run folder")
    )
    gate = _load(REPO / ".github" / "workflows" / "gate.yml")
    step = next(s for s in gate["jobs"]["gate"]["steps"] if s.get("uses") == "./.github/actions/evalgate")
    assert step["with"]["probe"] == "${{ inputs.probe }}"


def test_the_probes_run_on_the_candidate_and_publish_their_summaries(tmp_path: Path) -> None:
    proc, out = _run(tmp_path, "pass", probe="cache, warm-cold", candidate="int4", engine="sglang",
                     probe_args="--probes 30", config="eg.toml")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = str(tmp_path / "run")
    assert _calls(tmp_path) == [
        ["probe", "cache", "--engine", "sglang", "--variant", "int4", "--config", "eg.toml",
         "--out", f"{run}/probe-cache", "--probes", "30"],
        ["probe", "warm-cold", "--engine", "sglang", "--variant", "int4", "--config", "eg.toml",
         "--out", f"{run}/probe-warm-cold", "--probes", "30"],
    ]  # fmt: skip
    assert out == {"probe-verdict": "cache=PASS warm-cold=PASS", "probe-exit-code": "0"}
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "probe: cache PASS" in summary and "probe: warm-cold PASS" in summary


def test_a_url_in_probe_args_attaches_instead_of_launching(tmp_path: Path) -> None:
    proc, _ = _run(tmp_path, "pass", probe="cache", probe_args="--url http://10.0.0.5:30000")
    assert proc.returncode == 0, proc.stderr
    (call,) = _calls(tmp_path)
    assert "--engine" not in call and call[-2:] == ["--url", "http://10.0.0.5:30000"]


def test_defaults_are_compares_llamacpp_and_fp8kv(tmp_path: Path) -> None:
    _run(tmp_path, "pass", probe="warm-cold")
    (call,) = _calls(tmp_path)
    assert call[2:6] == ["--engine", "llamacpp", "--variant", "fp8kv"]


def test_a_blocking_probe_is_reported_and_its_exit_code_kept(tmp_path: Path) -> None:
    proc, out = _run(tmp_path, "block", probe="cache,warm-cold")
    assert proc.returncode == 0, proc.stderr  # the gate step fails the job, after the upload
    assert out == {"probe-verdict": "cache=PASS warm-cold=BLOCK", "probe-exit-code": "1"}
    assert "::error title=evalgate probe warm-cold::BLOCK (exit code 1)" in proc.stdout


def test_a_probe_that_crashes_is_an_error_with_a_summary_line(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "crash", probe="cache")
    assert out == {"probe-verdict": "cache=ERROR", "probe-exit-code": "3"}
    assert "exited with code 3 before a report" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_an_unknown_probe_is_refused_without_running(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "pass", probe="cache,../x")
    assert out["probe-exit-code"] == "2" and "unknown=ERROR" in out["probe-verdict"]
    assert len(_calls(tmp_path)) == 1


@pytest.mark.parametrize(
    ("verdict", "rc", "probe_rc", "expected"),
    [
        ("PASS", "0", "0", 0),
        ("PASS", "0", "1", 1),
        ("PASS", "0", "2", 2),
        ("PASS", "0", "", 0),
        ("BLOCK", "1", "0", 1),
    ],
)
def test_the_gate_fails_unless_compare_and_every_probe_pass(
    tmp_path: Path, verdict: str, rc: str, probe_rc: str, expected: int
) -> None:
    bash = shutil.which("bash") or pytest.skip("bash not found")
    env = {
        "PATH": "/usr/bin:/bin",
        "VERDICT": verdict,
        "RC": rc,
        "PROBE_RC": probe_rc,
        "PROBE_VERDICT": "cache=X",
    }
    proc = subprocess.run([bash, "-c", _step("Gate on the verdict")], env=env, capture_output=True, text=True)
    assert proc.returncode == expected, proc.stdout + proc.stderr
