"""The HTTP client against a scripted test double (records what it was sent)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalgate.engines.client import HttpClient, RequestFailed, RetryPolicy
from evalgate.errors import ServerDied


class Script:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.seen: list[dict[str, object]] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.seen.append({"auth": self.headers.get("Authorization"), "body": body})
            status = script.statuses.pop(0) if script.statuses else 200
            payload = json.dumps({"ok": status == 200}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", script
    httpd.shutdown()


FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02, timeout_s=5)


def call(url: str, **kw: object) -> object:
    async def go() -> object:
        async with HttpClient(url, api_key="k", concurrency=2, retry=FAST, **kw) as c:
            return await c.post("/x", {"a": 1})

    return asyncio.run(go())


def test_retries_5xx_then_succeeds(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [500, 503]
    assert call(url) == {"ok": True}
    assert len(script.seen) == 3
    assert script.seen[0]["auth"] == "Bearer k" and script.seen[0]["body"] == {"a": 1}


def test_gives_up_after_attempts_with_cause(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [500, 500, 500]
    with pytest.raises(RequestFailed, match="failed 3 times: HTTP 500"):
        call(url)


def test_4xx_is_not_retried(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [400]
    with pytest.raises(RequestFailed, match="rejected a request"):
        call(url)
    assert len(script.seen) == 1


def test_dead_server_is_reported_not_retried() -> None:
    with pytest.raises(ServerDied, match="gone"):
        call("http://127.0.0.1:9", alive=lambda: False, on_dead=lambda: ServerDied("gone", fix=""))
