"""`evalgate compare` against servers that misbehave over HTTP: one that echoes the request and
its Authorization header in a 500 (no key or private text may reach any file or the terminal),
and one that accepts and never answers (exit 3 within the request's tries or the run's deadline).
First through the fake engine with an HTTP chat, then in attach mode in front of
tests/helpers/hostile_server.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.cli import main
from evalgate.engines._launcher import ServerHandle
from evalgate.engines.api import Scorer
from evalgate.engines.client import HttpClient, RetryPolicy
from evalgate.engines.fake import FakeEngine, FakeScorer
from evalgate.store.records import RecordStore
from tests.helpers.background import background_apps
from tests.helpers.guards import KEYS, MARKERS, Capture, N, compare, exam
from tests.helpers.hostile_server import Hostile, hostile_app
from tests.helpers.post_server import post_server

__all__ = ["exam"]  # fixtures


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

    def answer(headers: Message, body: bytes) -> tuple[int, object]:
        return 500, {"error": "boom", "auth": headers.get("Authorization"), "request": body.decode()}

    with post_server(answer) as url:
        yield url


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


def assert_no_secret(captured: pytest.CaptureResult[str], out: Path, expected: set[str]) -> None:
    """The run folder holds at least the ``expected`` files, and no key or marker stands in any file
    under it nor in what was printed."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert expected <= {p.name for p in files}
    for secret in (*KEYS.values(), *MARKERS):
        assert secret not in captured.out + captured.err, secret
        for path in files:
            assert secret not in path.read_text(errors="replace"), (secret, path)


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
    assert_no_secret(captured, out, {"manifest.json", "report.html", "junit.xml", "verdict.json"})


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


# -- attach mode against tests/helpers/hostile_server.py, with a stall or an echo in front of its chat -----
@pytest.fixture
def attached() -> Iterator[Callable[..., str]]:
    """``attached(middleware=None) -> URL`` of a well-behaved llama-server stub; ``middleware``
    stands in front of it (a stall, an echo)."""
    apps = background_apps(handler_cancellation=True)
    serve = next(apps)

    def start(middleware: Any = None) -> str:
        app = hostile_app(Hostile("good", answer="yes"))
        if middleware is not None:
            app.middlewares.append(middleware)
        return serve(app)

    try:
        yield start
    finally:
        apps.close()


def attach(base: str, cand: str, out: Path, exam: Path, *flags: str) -> int:
    argv = ["compare", "--baseline", "bf16", "--candidate", "fp8kv", "--skip-kernel-check",
            "--baseline-url", base, "--candidate-url", cand, "--suites", f"private:{exam}", "--out", str(out)]  # fmt: skip
    return main([*argv, *flags])


@web.middleware
async def _stall_chat(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.path == "/v1/chat/completions":
        await asyncio.sleep(3600)
    return await handler(request)


@web.middleware
async def _echo_chat(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.path == "/v1/chat/completions":
        echoed = {
            "error": "boom",
            "auth": request.headers.get("Authorization"),
            "request": await request.text(),
        }
        return web.Response(status=500, text=json.dumps(echoed))
    return await handler(request)


def test_an_attached_server_that_stops_answering_is_named(
    exam: Path, tmp_path: Path, attached: Any, capsys: Capture
) -> None:
    base, cand = attached(), attached(_stall_chat)
    t0 = time.monotonic()
    assert attach(base, cand, tmp_path / "run", exam, "--request-timeout", "0.5") == 3
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert f"the server at {cand} stopped answering" in err and "timed out 2 time(s) after 0.5 s" in err


def test_an_attached_server_echoing_secrets_leaks_none(
    exam: Path, tmp_path: Path, attached: Any, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, key in KEYS.items():
        monkeypatch.setenv(name, key)
    out = tmp_path / "run"
    assert attach(attached(), attached(_echo_chat), out, exam) == 3  # every candidate item errored
    captured = capsys.readouterr()
    errors = [r.error for r in RecordStore(out).load("private:exam", "candidate").values()]
    assert len(errors) == N and all(e and "HTTP 500" in e and "Bearer ***" in e for e in errors)
    assert_no_secret(captured, out, {"manifest.json", "report.html", "junit.xml", "baseline.log"})
