"""GitHub Actions output for a rendered run: step summary, step outputs and annotations.

``evalgate compare`` and ``evalgate report`` call ``publish`` when ``GITHUB_ACTIONS=true`` (set on
every runner) or with ``--github``, so a plain ``run: evalgate compare ...`` step gates a workflow
without the composite action. Everything goes through the runner's files and workflow commands
(docs.github.com/actions/reference/workflow-commands-for-github-actions):

- ``$GITHUB_STEP_SUMMARY``: summary.md is appended (the verdict line, the suites table and, for a
  drift suite, its budget rows);
- ``$GITHUB_OUTPUT``: ``verdict=PASS|BLOCK|ERROR|INCONCLUSIVE``, ``report-dir=<absolute run
  folder>`` and ``blocked=true|false``, where ``blocked`` is true for anything but PASS (fail safe:
  an ERROR run, or an INCONCLUSIVE one under ``--require-power``, blocks a rollout too; read
  ``verdict`` to tell them apart);
- stdout: one ``::error`` annotation per blocking row of a BLOCK (accuracy, flip budget or drift
  budget), one ``::error`` for an ERROR or INCONCLUSIVE verdict, and a ``::warning`` per underpowered suite or
  drift row (a PASS that could not have seen a small change) and for an unreliable run (the A/A
  pair itself differs).

The runner reads annotations from the step's stdout line by line, so every value is escaped the
way the runner unescapes it: ``%``, CR and LF in messages, plus ``:`` and ``,`` in properties.
A reason can never end the command line early or start a second command, and a bidirectional
control in it (a server's error body) is shown as its escape, not obeyed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from evalgate.gate import Verdict
from evalgate.report._format import show_bidi

__all__ = ["annotations", "enabled", "escape_data", "escape_property", "outputs", "publish"]


def enabled(flag: bool = False, env: Mapping[str, str] = os.environ) -> bool:
    """Publish when asked (``--github``) or when running as a GitHub Actions step."""
    return bool(flag) or env.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF percent-encoded, as the runner decodes them."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=``): also ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={escape_property(title)}::{escape_data(show_bidi(message))}"


def annotations(verdict: Verdict) -> list[str]:
    """The workflow commands for a verdict, one line each, in the order of its rows.

    A BLOCK gets one ``::error`` per blocking row: a primary metric that changed significantly,
    or a suite whose answers flipped more than its budget (the agreement rows). A BLOCK with no
    blocking row (the candidate's kernels failed their numerics check before any server ran)
    gets one ``::error`` with the verdict's reason, so a BLOCK is never silent.
    """
    if verdict.verdict == "ERROR":
        return [_command("error", "evalgate ERROR", verdict.reason)]
    lines = []
    if verdict.verdict == "INCONCLUSIVE":  # --require-power: the underpowered rows follow as warnings
        lines.append(_command("error", "evalgate INCONCLUSIVE", verdict.reason))
    drift = [r for d in verdict.drift for r in d.rows if r.gated]
    if verdict.verdict == "BLOCK":
        blocking = [r for r in [*verdict.suites, *verdict.agreement] if r.status == "block"]
        lines += [_command("error", "evalgate BLOCK", f"{r.suite} {r.metric}: {r.reason}") for r in blocking]
        drifted = [r for r in drift if r.status == "block"]  # the reason names the suite and measure
        lines += [_command("error", "evalgate BLOCK", r.reason) for r in drifted]
        if not blocking and not drifted:
            lines.append(_command("error", "evalgate BLOCK", verdict.reason))
    lines += [
        _command("warning", "evalgate UNDERPOWERED", f"{r.suite} {r.metric}: {r.reason}")
        for r in verdict.suites
        if r.status == "underpowered"
    ]
    lines += [
        _command("warning", "evalgate UNDERPOWERED", r.reason) for r in drift if r.status == "underpowered"
    ]
    if not verdict.reliable:
        note = next((n for n in verdict.notes if n.startswith("UNRELIABLE")), "the A/A pair differs")
        lines.append(_command("warning", "evalgate UNRELIABLE", note))
    return lines


def outputs(run_dir: Path, verdict: Verdict) -> dict[str, str]:
    """The step outputs, by name."""
    return {
        "verdict": verdict.verdict,
        "report-dir": str(Path(run_dir).resolve()),
        "blocked": "false" if verdict.verdict == "PASS" else "true",
    }


def _output_lines(values: Mapping[str, str]) -> Iterator[str]:
    """``name=value``, or the heredoc form for a value with a line break in it."""
    for name, value in values.items():
        if "\n" not in value and "\r" not in value:
            yield f"{name}={value}\n"
            continue
        delimiter = "EVALGATE_EOF"
        while delimiter in value:
            delimiter += "_"
        yield f"{name}<<{delimiter}\n{value}\n{delimiter}\n"


def _summary(run_dir: Path, verdict: Verdict) -> str:
    path = Path(run_dir) / "summary.md"
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:  # publish is meant to follow render_run; still say something useful without it
        text = f"## evalgate {verdict.verdict}\n\n{verdict.reason}\n"
    return text if text.endswith("\n") else text + "\n"


def _append(path: str, text: str) -> None:
    """Append on a line of its own, whatever the file's last writer left."""
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                text = "\n" + text
        f.write(text.encode("utf-8"))


def publish(
    run_dir: Path,
    verdict: Verdict,
    *,
    env: Mapping[str, str] = os.environ,
    stream: TextIO | None = None,
) -> None:
    """Append summary.md and the step outputs to the runner's files (when set), print annotations.

    ``stream`` defaults to ``sys.stdout`` at call time, so a captured or redirected stdout works.
    """
    if env.get("GITHUB_STEP_SUMMARY"):
        _append(env["GITHUB_STEP_SUMMARY"], _summary(run_dir, verdict))
    if env.get("GITHUB_OUTPUT"):
        _append(env["GITHUB_OUTPUT"], "".join(_output_lines(outputs(run_dir, verdict))))
    out = stream if stream is not None else sys.stdout
    for line in annotations(verdict):
        out.write(line + "\n")
    out.flush()
