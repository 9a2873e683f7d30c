"""Kill and resume at every point of a run: exactly one record per item per arm afterwards, and
the verdict of the run that was never killed.

A kill is a KeyboardInterrupt (what Ctrl-C and CI's SIGTERM become) raised from inside the loop on
the fake engine: after k answers (mid-baseline, the first candidate item, mid-candidate, mid-A/A,
mid-look of a sequential run), at the candidate's launch (between the arms), half-way through
writing a record (a torn line, as SIGKILL leaves), while saving the manifest, and while writing
the reports after verdict.json. The real SIGKILL of evalgate and of a server are tested too: the
end-to-end tests with llama.cpp, and here against tests/helpers/hostile_server.py run as a process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.api import LaunchSlot
from evalgate.engines.fake import FakeEngine
from evalgate.store.records import Record, RecordStore
from tests.helpers.exams import yes_exam
from tests.helpers.guards import compare

REPO = Path(__file__).resolve().parents[2]
N = 24
WRONG = {"candidate": {3, 8, 15, 16, 21}, "aa": {8}}
"""Items each arm answers wrongly: enough flips that the verdict is not a trivial PASS."""


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items q0..q(N-1); the right answer to each is "yes"."""
    return yes_exam(tmp_path / "exam", N)


class Kill:
    """Where the first run is stopped: ``kind`` and ``at`` (see KILLS); fires once."""

    def __init__(self, kind: str, at: Any) -> None:
        self.kind, self.at, self.fired, self.count = kind, at, False, 0

    def now(self, kind: str, at: Any = None) -> bool:
        if self.fired or kind != self.kind:
            return False
        self.count += 1
        hit = self.count == self.at if isinstance(self.at, int) else at == self.at
        self.fired = hit
        return hit


def answer(kill: Kill) -> Callable[[str, str], str]:
    def reply(arm: str, prompt: str) -> str:
        if kill.now("answer"):
            raise KeyboardInterrupt
        return "no" if int(prompt[1:]) in WRONG.get(arm, set()) else "yes"

    return reply


def install_kill(kill: Kill, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill points outside the answers: a launch, a record's write, a manifest save, a report."""
    launch = engine.launch

    def launching(spec: Any, slot: LaunchSlot) -> Any:
        if kill.now("launch", slot.name):
            raise KeyboardInterrupt
        return launch(spec, slot)

    engine.launch = launching  # type: ignore[method-assign]
    append = RecordStore.append

    def appending(self: RecordStore, record: Record) -> None:
        if kill.now("append"):  # SIGKILL mid-write: half a line on disk, no newline
            with open(self.path(record.suite, record.arm), "a", encoding="utf-8") as f:
                f.write(record.to_json()[:37])
            raise KeyboardInterrupt
        append(self, record)

    monkeypatch.setattr(RecordStore, "append", appending)
    import evalgate.report
    import evalgate.run.plan

    save = evalgate.run.plan.RunPlan.save

    def saving(self: Any) -> None:
        if kill.now("save"):
            (self.run_dir / "manifest.json.tmp").write_text('{"schema": 2, "run_id": "')  # torn temp file
            raise KeyboardInterrupt
        save(self)

    monkeypatch.setattr(evalgate.run.plan.RunPlan, "save", saving)
    write = evalgate.report._write

    def writing(path: Path, text: str) -> None:
        if kill.now("render", path.name):
            path.with_name(path.name + ".tmp").write_text(text[: len(text) // 2])
            raise KeyboardInterrupt
        write(path, text)

    monkeypatch.setattr(evalgate.report, "_write", writing)


KILLS = {
    "mid-baseline": ("answer", 7, ()),
    "first candidate item": ("answer", N + 1, ()),
    "between the arms": ("launch", "candidate", ()),
    "mid-candidate": ("answer", N + 13, ()),
    "a torn record mid-candidate": ("append", N + 5, ()),
    "a manifest save": ("save", 3, ()),
    "mid-A/A": ("answer", 2 * N + 9, ("--aa",)),
    "writing the reports": ("render", "report.html", ()),
    "mid-look, sequential": ("answer", 12, ("--sequential", "--chunk", "8")),
}


def lines(out: Path, arm: str, *, whole: bool = False) -> list[dict[str, Any]]:
    """Every line of the arm's record file, parsed: a torn line left behind fails here (``whole``:
    the complete lines only, as a kill left them, without repairing the file)."""
    path = RecordStore(out).path("private:exam", arm)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    rows = text.split("\n")[:-1] if whole else text.splitlines()
    return [json.loads(line) for line in rows]


def decision(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "verdict.json").read_text()))


@pytest.mark.parametrize("point", list(KILLS))
def test_a_run_killed_anywhere_resumes_to_one_record_per_item_and_the_same_verdict(
    point: str, exam: Path, tmp_path: Path, use: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, at, flags = KILLS[point]

    whole = tmp_path / "whole"
    use(FakeEngine(answer(Kill("none", None))))
    expected = compare(whole, exam, *flags)
    assert expected in (0, 1)

    kill = Kill(kind, at)
    engine = use(FakeEngine(answer(kill)))
    install_kill(kill, engine, monkeypatch)
    cut = tmp_path / "cut"
    assert compare(cut, exam, *flags) == 3 and kill.fired  # interrupted: records kept, never BLOCK
    assert not (cut / "verdict.json").exists() or kind == "render"
    arms = ["baseline", "candidate", *(["aa"] if "--aa" in flags else [])]
    kept = {arm: {r["item_id"] for r in lines(cut, arm, whole=True)} for arm in arms}

    engine.calls.clear()
    assert main(["compare", "--resume", str(cut)]) == expected
    for arm in arms:
        ids = [r["item_id"] for r in lines(cut, arm)]
        want = [r["item_id"] for r in lines(whole, arm)]
        assert sorted(ids) == sorted(set(ids)) == sorted(want), (arm, Counter(ids).most_common(2))
    asked_after = Counter((c.arm, c.prompt) for c in engine.calls if c.kind == "chat")
    assert set(asked_after.values()) <= {1}  # a resume asks each missing item once, no more
    assert not {(a, p) for a in arms for p in kept[a]} & set(asked_after)  # and no kept item again
    assert decision(cut) == decision(whole)
    assert (cut / "verdict.json").read_bytes() == (whole / "verdict.json").read_bytes()
    assert not list(cut.glob("*.tmp"))  # the torn temp files were replaced by the resumed run's


# -- the real kill of the evalgate process, against stub servers that are processes too ------------
def _stub(mode: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "helpers" / "hostile_server.py"), mode, *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


@pytest.fixture
def stubs() -> Iterator[Callable[..., str]]:
    procs: list[subprocess.Popen[str]] = []

    def start(mode: str = "good", *flags: str) -> str:
        proc, url = _stub(mode, *flags)
        procs.append(proc)
        return url

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def _evalgate(*argv: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALGATE_") or k == "EVALGATE_CACHE"}
    return subprocess.Popen(
        [sys.executable, "-m", "evalgate", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
    )


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text(encoding="utf-8").count("\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {n} records: {proc.communicate(timeout=30)}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_evalgate_killed_mid_candidate_then_resumed(
    sig: signal.Signals,
    stubs: Callable[..., str],
    exam: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """evalgate itself killed while the candidate's records are written, then resumed: one record
    per item per arm, the verdict of a whole run. SIGKILL: no cleanup code runs, the lock goes with
    the process. SIGTERM (a CI cancel): exit 3 saying how to resume, and nothing else on stderr."""
    for arm in ("BASELINE", "CANDIDATE"):
        monkeypatch.delenv(f"EVALGATE_{arm}_API_KEY", raising=False)
    base, cand = stubs("good", "--delay", "0.1", "--answer", "yes"), stubs("good", "--delay", "0.1")
    flags = ["--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check", "--suites", f"private:{exam}",
             "--baseline-url", base, "--candidate-url", cand]  # fmt: skip
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    expected = main(["compare", *flags, "--out", str(whole)])
    assert expected in (0, 1)
    proc = _evalgate("compare", *flags, "--out", str(cut))
    _wait_for_lines(cut / "items" / "private_exam.candidate.jsonl", 5, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert not (cut / "verdict.json").exists()
    if sig == signal.SIGTERM:
        assert proc.returncode == 3 and f"--resume {cut}" in err, err
        for noise in ("Traceback", "never retrieved", "never awaited", "Unclosed"):
            assert noise not in err, err
    assert main(["compare", "--resume", str(cut)]) == expected
    for arm in ("baseline", "candidate"):
        assert sorted(r["item_id"] for r in lines(cut, arm)) == sorted(f"q{i}" for i in range(N))
    assert (cut / "verdict.json").read_bytes() == (whole / "verdict.json").read_bytes()
    assert decision(cut)["verdict"] == "BLOCK"  # the candidate answers "The answer is 7." to "yes"


def test_a_server_killed_mid_run_is_named_and_leaves_no_unclosed_session(
    stubs: Callable[..., str], data_dir: Path, tmp_path: Path
) -> None:
    """The candidate's server dies while arc_easy's log-likelihoods (and their /tokenize requests)
    are in flight: exit 3 naming it, and nothing else on stderr (no "Unclosed client session",
    no "Task exception was never retrieved")."""
    base = stubs("good", "--delay", "0.01")
    cand_proc, cand = _stub("good", "--delay", "0.05")
    try:
        out = tmp_path / "run"
        proc = _evalgate("compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
                         "--suites", "arc_easy", "--limit", "60", "--data-dir", str(data_dir),
                         "--baseline-url", base, "--candidate-url", cand, "--out", str(out))  # fmt: skip
        _wait_for_lines(out / "items" / "arc_easy.candidate.jsonl", 3, proc)
        cand_proc.kill()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        cand_proc.kill()
        cand_proc.wait(10)
    assert proc.returncode == 3, stdout + stderr
    assert f"the candidate ({cand}) server died" in stderr and "--resume" in stderr, stderr
    for noise in ("Unclosed client session", "Unclosed connector", "never retrieved", "Traceback"):
        assert noise not in stderr, stderr
