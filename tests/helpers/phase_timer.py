"""How long CI spends where: a pytest plugin that totals each test tier's time, and the table
.ci/run prints at its end (install, setup, each test tier, lint).

.ci/run loads the plugin with ``PYTEST_PLUGINS=tests.helpers.phase_timer`` and names the output
file in ``EVALGATE_PHASE_TIMES``, so the README's pytest command runs as written; the plugin
prints nothing (pytest's summary stays its last line) and does nothing without that variable.
The table ends with the counts as one plain line (``tests: N passed, N failed, N skipped``), so
the closing line of CI's output still says how many tests ran.
A test's tier is ``sglang_cpu`` if it has that marker, else ``e2e``, else ``fast``; its time is
its setup, call and teardown (module fixtures count to the module's first test). The ten
slowest tests follow, so a CI log says where its minutes went.

Each pytest session appends one JSON line, so a command with two pytest runs (the fast tests
spread over the cores by pytest-xdist, then the server tests one at a time) gets one block of
tiers under each run's step. Under xdist only the controller records: it reads a test's markers
from its report's keywords (it collects nothing itself), and a tier's seconds are then the sum
over the workers, more than the step's wall time.

Without pytest importable (.ci/run prints the table even when the install failed):
``python3 -m tests.helpers.phase_timer PHASES_TSV [PYTEST_JSON]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

ENV = "EVALGATE_PHASE_TIMES"
TIERS = ("fast", "e2e", "sglang_cpu")
SLOWEST = 10


class PhaseTimer:
    """Per-tier totals of one session, written as JSON when it ends."""

    def __init__(self, out: Path, workers: int = 0) -> None:
        self.out = out
        self.workers = workers
        self.start = time.monotonic()
        self.collect_s = 0.0
        self.per_test: dict[str, float] = {}
        self.tiers: dict[str, dict[str, Any]] = {
            t: {"tests": 0, "seconds": 0.0, "passed": 0, "failed": 0, "skipped": 0} for t in TIERS
        }

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.collect_s:  # collection, and under xdist the workers' start, until the first report
            self.collect_s = time.monotonic() - self.start
        row = self.tiers[next((t for t in reversed(TIERS) if t in report.keywords), "fast")]
        row["seconds"] += report.duration
        self.per_test[report.nodeid] = self.per_test.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            row[report.outcome] += 1
            row["tests"] += 1
        elif report.when == "teardown" and report.failed:
            row["failed"] += 1

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        doc = {
            "exit": int(exitstatus),
            "wall_s": round(time.monotonic() - self.start, 1),
            "collect_s": round(self.collect_s, 1),
            "workers": self.workers,
            "tiers": {t: {**r, "seconds": round(r["seconds"], 1)} for t, r in self.tiers.items()},
            "slowest": [
                [nodeid, round(s, 1)]
                for nodeid, s in sorted(self.per_test.items(), key=lambda kv: -kv[1])[:SLOWEST]
            ],
        }
        with self.out.open("a") as f:
            f.write(json.dumps(doc) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    # taken out of the environment so that a pytest a test starts neither loads this nor overwrites the file
    out = os.environ.pop(ENV, "")
    os.environ.pop("PYTEST_PLUGINS", None)
    if out and not hasattr(config, "workerinput"):
        workers = config.getoption("numprocesses", None) or 0  # pytest-xdist's -n, where it is loaded
        config.pluginmanager.register(PhaseTimer(Path(out), int(workers)), "evalgate-phase-timer")


def sessions(path: Path | None) -> list[dict[str, Any]]:
    """The pytest sessions' records, in the order they ran."""
    if path is None or not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tier_rows(doc: dict[str, Any] | None) -> list[tuple[str, str, float | None]]:
    if doc is None:
        return []
    rows: list[tuple[str, str, float | None]] = [("", "  collection", doc["collect_s"])]
    over = f", test seconds over {doc['workers']} workers" if doc.get("workers", 0) > 1 else ""
    for tier, r in doc["tiers"].items():
        if r["tests"]:
            what = f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped{over}"
            rows.append(("", f"  {tier} tests ({what})", r["seconds"]))
    return rows


def _slowest(docs: list[dict[str, Any]]) -> list[str]:
    slowest = sorted((row for d in docs for row in d.get("slowest") or []), key=lambda row: -row[1])[:SLOWEST]
    if not slowest:
        return []
    return ["", f"slowest {len(slowest)} tests (setup + call + teardown, seconds)"] + [
        f"{seconds:>8.0f}  {nodeid}" for nodeid, seconds in slowest
    ]


def phase_of(step: str) -> str:
    """The phase a step of .ci/run belongs to, from its command."""
    if "pytest" in step:
        return "tests"
    if "evalgate setup" in step:
        return "setup"
    if step.startswith(("ruff", "actionlint")):
        return "lint"
    return "install"


def table(phases: Path, pytest_json: Path | None = None) -> str:
    """One line per step (tab-separated: command, start, end, exit), each pytest step's tiers
    under it (the k-th pytest step's from the k-th session), then each phase's total."""
    docs = sessions(pytest_json)
    rows: list[tuple[str, str, float | None]] = []
    totals: dict[str, float] = {}
    lines = phases.read_text().splitlines() if phases.is_file() else []
    runs = 0
    for line in lines:
        step, start, end, code = line.split("\t")
        seconds = float(end) - float(start)
        phase = phase_of(step)
        totals[phase] = totals.get(phase, 0.0) + seconds
        rows.append((phase, step if code == "0" else f"{step}  [exit {code}]", seconds))
        if phase == "tests":
            rows += _tier_rows(docs[runs] if runs < len(docs) else None)
            runs += 1
    rows += [("", "", None)] + [(p, "total", s) for p, s in totals.items()]
    rows.append(("all", "total", sum(totals.values())))
    width = max(len(step) for _, step, _ in rows)
    out = ["", "CI phases (wall seconds)", f"{'phase':<8} {'step':<{width}} {'seconds':>8}"]
    for phase, step, seconds in rows:
        out.append(f"{phase:<8} {step:<{width}} {seconds:>8.0f}" if seconds is not None else "")
    out += _slowest(docs)
    if docs:  # the closing line CI reads for the counts
        tiers = [r for d in docs for r in d["tiers"].values()]
        n = {k: sum(r[k] for r in tiers) for k in ("passed", "failed", "skipped")}
        out += ["", f"tests: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"]
    return "\n".join(out)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None))
