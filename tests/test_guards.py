"""`evalgate compare` never turns a crash into BLOCK, garbage into a run, or a secret into an
artifact: whole compares on the fake engine, with small stub servers where HTTP matters (one that
echoes the request and the Authorization header in a 500, one that accepts and never answers).

Exit 1 is BLOCK and nothing else: an unexpected exception is exit 3 with its traceback saved; a
bad value is exit 2 before any server starts; one run folder has one writer and one run's records.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalgate.cli import main
from evalgate.client import HttpClient, RetryPolicy
from evalgate.engines._launcher import ServerHandle
from evalgate.engines.api import Scorer
from evalgate.engines.fake import FakeEngine, FakeScorer
from evalgate.records import RecordStore

N = 12
KEYS = {
    "EVALGATE_BASELINE_API_KEY": "sk-base-SECRETKEY-4f1c",
    "EVALGATE_CANDIDATE_API_KEY": "sk-cand-SECRETKEY-9e2a",
}
MARKERS = ("PROMPT-MARKER-q7x", "ANSWER-MARKER-k2z", "SYSTEM-MARKER-m5w")
EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "example"
Capture = pytest.CaptureFixture[str]


@pytest.fixture
def exam(tmp_path: Path) -> Path:
    """N items whose prompt, answer and system prompt carry private markers; the answer is "yes"
    for the fake servers (exact grader), so a clean run passes."""
    folder = tmp_path / "exam"
    folder.mkdir()
    rows = [
        {"id": f"q{i}", "prompt": f"q{i} {MARKERS[0]} tell me", "answer": "yes", "grader": "exact"}
        for i in range(N)
    ]
    rows[0]["answer"] = f"yes {MARKERS[1]}"  # one private answer to keep out of every file
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "exam.toml").write_text(f'name = "exam"\nsystem_prompt = "{MARKERS[2]} be brief"\n')
    return folder


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeEngine], FakeEngine]:
    def install(engine: FakeEngine) -> FakeEngine:
        monkeypatch.setattr("evalgate.plan.get_engine", lambda name, cfg: engine)
        return engine

    return install


def compare(out: Path, exam: Path, *flags: str) -> int:
    base = ["--engine", "fake", "--baseline", "bf16", "--candidate", "fp8", "--suites", f"private:{exam}"]
    return main(["compare", *base, "--out", str(out), *flags])


# -- exit 1 is BLOCK only; values are checked before any server starts -----------------------------
def test_an_unexpected_exception_is_exit_3_with_its_traceback_saved(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    def broken(arm: str, prompt: str) -> str:
        raise ZeroDivisionError("a bug deep in a scorer")

    use(FakeEngine(broken))
    out = tmp_path / "run"
    assert compare(out, exam) == 3
    err = capsys.readouterr().err
    assert "error: unexpected ZeroDivisionError: a bug deep in a scorer" in err and "fix:" in err
    assert "Traceback (most recent call last)" not in err  # saved, not dumped
    (saved,) = (out / "logs").glob("traceback-*.txt")
    assert f"traceback: {saved}" in err and "ZeroDivisionError" in saved.read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--flip-budget", "5"], "--flip-budget 5 is not a rate between 0 and 1"),
        (["--max-gen-tokens", "-5"], "--max-gen-tokens -5 must be at least 1"),
        (["--request-timeout", "0"], "--request-timeout 0 must be more than 0"),
        (["--tries", "0"], "--tries 0 must be at least 1"),
        (["--deadline", "-1"], "--deadline -1 must be more than 0"),
    ],
)
def test_bad_values_exit_2_before_any_server(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture, flags: list[str], message: str
) -> None:
    engine = use(FakeEngine())
    assert compare(tmp_path / "run", exam, *flags) == 2
    assert message in capsys.readouterr().err
    assert engine.launched == [] and not (tmp_path / "run").exists()


def test_bad_paths_and_files_exit_2(exam: Path, tmp_path: Path, use: Any, capsys: Capture) -> None:
    engine = use(FakeEngine())
    assert compare(tmp_path / "run", exam, "--config", str(tmp_path)) == 2
    assert "is not a file" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert compare(tmp_path / "file", exam) == 2
    assert "--out" in capsys.readouterr().err
    cfg = tmp_path / "cfg" / "evalgate.toml"
    cfg.parent.mkdir()
    cfg.write_bytes(b"[client]\ntries = 2\n# na\xefve\n")
    assert compare(tmp_path / "run", exam, "--config", str(cfg)) == 2
    assert "evalgate.toml:3: not UTF-8 text" in capsys.readouterr().err
    cfg.write_text("[client]\ntimeout_s = 0\n")
    assert compare(tmp_path / "run", exam, "--config", str(cfg)) == 2
    assert "client.timeout_s" in capsys.readouterr().err
    with open(exam / "items.jsonl", "ab") as f:
        f.write(b'{"id": "bad", "prompt": "caf\xe9", "answer": "x", "grader": "exact"}\n')
    assert compare(tmp_path / "run", exam) == 2
    assert f"items.jsonl:{N + 1}: is not UTF-8 text" in capsys.readouterr().err
    assert engine.launched == []


# -- same server, no pair ------------------------------------------------------------------------
def test_one_server_on_both_arms_is_refused(tmp_path: Path, capsys: Capture) -> None:
    urls = ["--baseline-url", "http://LOCALHOST:9/", "--candidate-url", "http://127.0.0.1:9/v1"]
    assert main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls]) == 2
    err = capsys.readouterr().err
    assert "are the same server" in err and "--same-server-ok" in err
    assert (
        main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls, "--same-server-ok"])
        == 3
    )
    assert "cannot connect" in capsys.readouterr().err  # allowed: on to the (absent) server


def test_url_credentials_never_reach_the_terminal(tmp_path: Path, capsys: Capture) -> None:
    urls = [
        "--baseline-url",
        "http://ann:hunter2@127.0.0.1:9",
        "--candidate-url",
        "http://ann:hunter2@127.0.0.1:10",
    ]
    assert main(["compare", "--suites", "arc_easy", "--out", str(tmp_path / "r"), *urls]) == 3
    captured = capsys.readouterr()
    assert "hunter2" not in captured.err + captured.out and "***@127.0.0.1" in captured.err


def test_url_credentials_are_not_recorded_and_a_resume_takes_them_again(tmp_path: Path) -> None:
    from evalgate.cli.compare import request_from_args
    from evalgate.errors import ConfigError
    from evalgate.manifest import load_manifest, write_manifest

    run = tmp_path / "run"
    m = load_manifest(EXAMPLE)
    urls = {"baseline_url": ("http://ann:hunter2@10.0.0.1:8000",), "candidate_url": ("http://10.0.0.2:8000",)}
    write_manifest(run, m.model_copy(update={"request": m.request.model_copy(update=urls)}))
    text = (run / "manifest.json").read_text()
    assert "hunter2" not in text and "http://***@10.0.0.1:8000" in text

    def resume(*flags: str) -> Any:
        return request_from_args(_compare_parser().parse_args(["--resume", str(run), *flags]))

    with pytest.raises(ConfigError, match="held credentials, which are not recorded"):
        resume()
    req = resume("--baseline-url", urls["baseline_url"][0], "--deadline", "60")
    assert req.baseline_url == urls["baseline_url"] and req.deadline_s == 60
    with pytest.raises(ConfigError) as err:
        resume("--baseline-url", "http://ann:other@10.0.0.9:8000")
    assert (
        "--baseline-url http://***@10.0.0.9:8000 (the run used http://***@10.0.0.1:8000)" in err.value.cause
    )


def _compare_parser() -> Any:
    from evalgate.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["compare"]  # type: ignore[attr-defined]


# -- one run, one folder, one writer -------------------------------------------------------------
def test_records_of_another_run_are_refused(exam: Path, tmp_path: Path, use: Any, capsys: Capture) -> None:
    use(FakeEngine())
    first, second = tmp_path / "first", tmp_path / "second"
    assert compare(first, exam) == 0
    shutil.copytree(first / "items", second / "items")  # no manifest: a stray items/ folder
    engine = use(FakeEngine())
    assert compare(second, exam) == 2
    assert "items/ of another run but no manifest.json" in capsys.readouterr().err
    assert engine.calls == []
    shutil.rmtree(second)
    assert compare(second, exam, "--limit", str(N)) == 0
    theirs = RecordStore(first).path("private:exam", "candidate")
    shutil.copy(theirs, RecordStore(second).path("private:exam", "candidate"))  # another run's records
    assert main(["compare", "--resume", str(second)]) == 2
    assert "holds records of run" in capsys.readouterr().err


def test_old_records_without_a_run_id_still_render(tmp_path: Path) -> None:
    run = tmp_path / "example"
    shutil.copytree(EXAMPLE, run)
    for path in (run / "items").glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k != "run_id"}) + "\n" for r in rows)
        )
    expected = json.loads((EXAMPLE / "verdict.json").read_text())["verdict"]
    assert main(["report", str(run)]) == {"PASS": 0, "BLOCK": 1}[expected]


def test_a_second_resume_of_one_run_fails_at_once(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    out = tmp_path / "run"
    stop = {"after": 5}

    def killed(arm: str, prompt: str) -> str:
        if arm == "candidate" and stop["after"] is not None:
            stop["after"] -= 1
            if stop["after"] < 0:
                raise KeyboardInterrupt
        return "yes"

    use(FakeEngine(killed))
    assert compare(out, exam) == 3  # the candidate has 5 of N records
    stop["after"] = None
    inside, second_done = threading.Event(), threading.Event()

    def held(arm: str, prompt: str) -> str:  # the first resume waits inside its run for the second
        inside.set()
        second_done.wait(10)
        return "yes"

    engine = use(FakeEngine(held))
    codes: list[int] = []
    resume = ["compare", "--resume", str(out), "--tries", "3"]  # how long to wait may change on resume
    first = threading.Thread(target=lambda: codes.append(main(resume)))
    first.start()
    assert inside.wait(10)
    t0 = time.monotonic()
    assert main(["compare", "--resume", str(out)]) == 2
    assert time.monotonic() - t0 < 5
    second_done.set()
    first.join(30)
    assert codes == [0]
    assert "in use by pid" in capsys.readouterr().err
    lines = RecordStore(out).path("private:exam", "candidate").read_text().splitlines()
    ids = [json.loads(line)["item_id"] for line in lines]
    assert len(ids) == len(set(ids)) == N  # every item once: nothing sent or recorded twice
    assert sum(1 for c in engine.calls if c.kind == "chat") == N - 5


# -- HTTP stubs: an echo of secrets in a 500, and a server that never answers ----------------------
@dataclass
class HttpScorer(FakeScorer):
    """A fake server whose chat goes over HTTP to ``target`` (a stub), with the arm's API key and
    the run's retry policy, as an attached server's scorer would."""

    target: str = ""
    retry: RetryPolicy | None = None

    async def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = KEYS[f"EVALGATE_{self.arm.upper()}_API_KEY"]
        async with HttpClient(self.target, api_key=key, concurrency=4, retry=self.retry) as http:
            return dict(await http.post("/v1/chat/completions", payload))


@dataclass
class HttpEngine(FakeEngine):
    target: str = ""

    def scorer(self, handle: ServerHandle, *, seed: int = 0) -> Scorer:
        return HttpScorer(self, handle.name, handle.name, target=self.target, retry=handle.retry)


@pytest.fixture
def echo() -> Iterator[str]:
    """Answers every POST with a 500 whose body is the request and its Authorization header."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            echoed = json.dumps(
                {"error": "boom", "auth": self.headers.get("Authorization"), "request": body.decode()}
            )
            data = echoed.encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.fixture
def stalled() -> Iterator[str]:
    """Accepts connections and reads, never answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not done.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    done.set()
    for conn in held:
        conn.close()
    sock.close()


def test_an_echoing_server_leaks_no_key_or_private_text(
    exam: Path, tmp_path: Path, use: Any, echo: str, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, key in KEYS.items():
        monkeypatch.setenv(name, key)
    use(HttpEngine(target=echo))
    out = tmp_path / "run"
    assert compare(out, exam, "--request-timeout", "5", "--tries", "1") == 3  # every item errored
    captured = capsys.readouterr()
    records = RecordStore(out).load("private:exam", "baseline")
    assert len(records) == N and all(r.error and "HTTP 500" in r.error for r in records.values())
    assert all(len(r.error or "") < 400 for r in records.values())  # an excerpt, not the body
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"manifest.json", "report.html", "junit.xml", "verdict.json"} <= {p.name for p in files}
    for secret in (*KEYS.values(), *MARKERS):
        assert secret not in captured.out + captured.err, secret
        for path in files:
            assert secret not in path.read_text(errors="replace"), (secret, path)


def test_a_stalled_server_fails_the_run_within_its_tries(
    exam: Path, tmp_path: Path, use: Any, stalled: str, capsys: Capture
) -> None:
    use(HttpEngine(target=stalled))
    t0 = time.monotonic()
    assert compare(tmp_path / "run", exam, "--request-timeout", "0.3", "--tries", "2") == 3
    assert time.monotonic() - t0 < 6
    err = capsys.readouterr().err
    assert "stopped answering" in err and "timed out 2 time(s) after 0.3 s" in err and "--resume" in err


def test_the_run_deadline_ends_a_stalled_run(
    exam: Path, tmp_path: Path, use: Any, stalled: str, capsys: Capture
) -> None:
    use(HttpEngine(target=stalled))
    t0 = time.monotonic()
    assert compare(tmp_path / "run", exam, "--deadline", "1") == 3  # the request timeout is 60 s
    assert time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert "reached its deadline of 1 s" in err and f"--resume {tmp_path / 'run'}" in err


def test_a_backtracking_regex_answer_is_an_exam_error(
    exam: Path, tmp_path: Path, use: Any, capsys: Capture
) -> None:
    with open(exam / "items.jsonl", "a") as f:
        f.write(json.dumps({"id": "slow", "prompt": "say a", "answer": "(a+)+$", "grader": "regex"}) + "\n")
    use(FakeEngine(lambda arm, prompt: "a" * 5000 + "!" if prompt == "say a" else "yes"))
    t0 = time.monotonic()
    assert compare(tmp_path / "run", exam) == 2
    assert time.monotonic() - t0 < 6
    err = capsys.readouterr().err
    assert "private exam item 'slow'" in err and "more than 1 s" in err
