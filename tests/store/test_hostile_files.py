"""A run folder someone else has written into (issue 32): a link planted where evalgate writes its
lock or a temporary file is never followed; a FIFO, socket, device, link or folder where one of
its files belongs is refused with exit 2 naming it, never a hang or a traceback; reads are
bounded; any text a server sends (a lone UTF-16 surrogate too) is written and read back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.engines.fake import FakeEngine
from evalgate.errors import ConfigError
from evalgate.store import files
from evalgate.store.lock import RunLock
from evalgate.store.manifest import load_manifest, write_manifest
from evalgate.store.records import Record, RecordStore
from evalgate.store.throughput import write_throughput
from tests.helpers.guards import compare
from tests.helpers.runs import SynthSuite, build_run

SUITE = "gsm8k"


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """A call that blocks (the old open of a FIFO) fails the test instead of hanging the suite."""

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return build_run(tmp_path / "run", [SynthSuite(SUITE, (6, 1, 1, 4))])


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the run folder that a planted link points to; it must stay as it is."""
    path = tmp_path / "outside.txt"
    path.write_text("precious\n")
    return path


def report(run: Path) -> int:
    with deadline(20):
        return main(["report", str(run)])


# -- 1. lock and temporary files never follow a link ------------------------------------------------
def test_a_link_at_the_lock_is_not_followed(run: Path, victim: Path) -> None:
    (run / ".lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="is a symbolic link") as err:
        RunLock(run).acquire()
    assert str(run / ".lock") in str(err.value)
    assert victim.read_text() == "precious\n"  # the old lock truncated it and wrote its pid there


def test_a_dangling_link_at_the_lock_creates_nothing(run: Path, tmp_path: Path) -> None:
    target = tmp_path / "created-through-the-link"
    (run / ".lock").symlink_to(target)
    with pytest.raises(ConfigError, match=r"\.lock is a symbolic link"):
        RunLock(run).acquire()
    assert not target.exists()


@pytest.mark.parametrize("name", ["report.html", "verdict.json", "summary.md", "junit.xml"])
def test_a_link_at_a_report_temporary_file_is_not_followed(
    name: str, run: Path, victim: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp = run / f"{name}.tmp"
    tmp.symlink_to(victim)
    assert report(run) == 2
    assert f"{tmp} is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    assert tmp.is_symlink()  # refused, not used


def test_a_link_at_the_manifest_temporary_file_is_not_followed(run: Path, victim: Path) -> None:
    tmp = run / "manifest.json.tmp"
    tmp.symlink_to(victim)
    with pytest.raises(ConfigError, match=r"manifest\.json\.tmp is a symbolic link"):
        write_manifest(run, load_manifest(run))
    assert victim.read_text() == "precious\n"


def test_a_link_at_the_throughput_temporary_file_is_not_followed(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "throughput.json.tmp").symlink_to(victim)
    with pytest.raises(ConfigError, match=r"throughput\.json\.tmp is a symbolic link"):
        write_throughput(tmp_path, {"schema": 1, "settings": {}, "arms": {}, "levels": [], "capacity": {}})
    assert victim.read_text() == "precious\n"


def test_a_stale_temporary_file_is_replaced(run: Path) -> None:
    (run / "report.html.tmp").write_text("half a report from a killed run")
    assert report(run) in (0, 1)
    assert not list(run.glob("*.tmp"))
    assert (run / "report.html").read_text().startswith("<!")


# -- 2. special files are refused, reads are bounded ------------------------------------------------
def _plant(path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        monkeypatch.chdir(path.parent)  # a socket's path is limited to 108 bytes
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_text("x")


KINDS = ("fifo", "socket", "link to /dev/zero", "directory")
WHERE: dict[str, Callable[[Path], Path]] = {
    "items file": lambda run: RecordStore(run).path(SUITE, "candidate"),
    "manifest": lambda run: run / "manifest.json",
    "prompts file": lambda run: run / "prompts" / f"{SUITE}.jsonl",
}


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_in_the_run_folder_is_refused_naming_it(
    kind: str, where: str, run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = WHERE[where](run)
    _plant(path, kind, monkeypatch)
    assert report(run) == 2  # the old code hung on a FIFO, read /dev/zero forever, or raised
    err = capsys.readouterr().err
    assert f"{path} is a" in err and "not a regular file" in err, err
    assert "traceback" not in err


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_a_special_file_at_the_lock_is_refused_naming_it(
    kind: str, run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plant(run / ".lock", kind, monkeypatch)
    with deadline(20), pytest.raises(ConfigError, match="not a regular file") as err:
        RunLock(run).acquire()
    assert str(run / ".lock") in str(err.value)


def test_a_folder_where_a_temporary_file_belongs_is_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run / "verdict.json.tmp").mkdir()
    assert report(run) == 2
    assert "verdict.json.tmp is a directory" in capsys.readouterr().err


def test_a_folder_where_a_report_belongs_is_refused(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "report.html").mkdir()
    assert report(run) == 2
    assert f"{run / 'report.html'} is a directory" in capsys.readouterr().err
    assert not (run / "report.html.tmp").exists()


def test_reads_of_a_run_folder_are_bounded(
    run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(files, "MAX_DOCUMENT_BYTES", 1000)
    assert report(run) == 2
    assert "manifest.json is larger than 1000 bytes" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(files, "MAX_RECORDS_BYTES", 1000)
    assert report(run) == 2
    assert "gsm8k.baseline.jsonl is larger than 1000 bytes" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 100)
    assert report(run) == 2
    assert "gsm8k.baseline.jsonl:1 is longer than 100 bytes" in capsys.readouterr().err


def test_a_torn_tail_longer_than_a_record_is_refused_not_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "items" / "s.baseline.jsonl"
    path.parent.mkdir()
    path.write_bytes(b'{"a":1}\n' + b"x" * 5000)
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1000)
    with pytest.raises(ConfigError, match="last line is longer than 1000 bytes"):
        files.truncate_torn_tail(path)
    monkeypatch.undo()
    files.truncate_torn_tail(path)
    assert path.read_bytes() == b'{"a":1}\n'


# -- 3. any text a server sends is written and read back ------------------------------------------
def _record(item: str, response: Any, **extra: Any) -> Record:
    return Record(
        run_id="r", arm="baseline", variant="bf16", suite="s", suite_version=1, item_id=item, repeat=0,
        prompt_hash="h", target="yes", response=response, extracted=response, metrics={"acc": 0.0},
        extra=extra,
    )  # fmt: skip


def test_a_lone_surrogate_is_stored_escaped_and_reads_back_exactly(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    record = _record("q\ud800", "yes \udc80", reasoning_content="\udfff think")
    store.append(record)  # the old write raised UnicodeEncodeError, and so did every resume
    raw = store.path("s", "baseline").read_bytes()
    assert raw.isascii() and raw.count(b"\n") == 1
    assert b"\\ud800" in raw and b"\\udc80" in raw
    back = store.load("s", "baseline")[("s", "q\ud800", 0)]
    assert back.item_id == "q\ud800" and back.response == "yes \udc80"
    assert back.extra.reasoning_content == "\udfff think"
    assert back.extra.surrogates == ["item_id", "response", "extracted", "extra.reasoning_content"]
    plain = _record("q1", "yes \u00e9")
    store.append(plain)  # a line without one stays UTF-8, without escapes or a note
    last = store.path("s", "baseline").read_bytes().splitlines()[-1]
    assert "yes \u00e9".encode() in last and b"surrogates" not in last


@pytest.mark.parametrize("flags", [(), ("--reveal-private",)])
def test_a_run_with_surrogates_in_exam_ids_and_answers_finishes_and_resumes(
    flags: tuple[str, ...], tmp_path: Path, use: Any
) -> None:
    exam = tmp_path / "exam"
    exam.mkdir()
    rows = [{"id": f"q{i}" + ("\ud800" if i % 3 == 0 else ""), "prompt": f"q{i}", "answer": "yes",
             "grader": "exact"} for i in range(9)]  # fmt: skip
    (exam / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # \ud800 escaped

    def reply(arm: str, prompt: str) -> str:
        return "yes \udc80" if prompt == "q4" else "yes"  # the same odd answer on both arms

    use(FakeEngine(reply))
    out = tmp_path / "run"
    assert compare(out, exam, *flags) == 0
    lines = [line for p in sorted((out / "items").glob("*.jsonl")) for line in p.read_bytes().splitlines()]
    parsed = [json.loads(line.decode("utf-8")) for line in lines]
    assert {r["item_id"] for r in parsed} == {r["id"] for r in rows}
    assert any("surrogates" in r["extra"] for r in parsed)
    verdict = (out / "verdict.json").read_bytes()
    assert main(["compare", "--resume", str(out)]) == 0
    assert (out / "verdict.json").read_bytes() == verdict
    assert main(["report", str(out)]) == 0
