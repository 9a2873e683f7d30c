"""The HTTP client against a scripted test double (records what it was sent)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from email.message import Message

import pytest

from evalgate.engines.client import HttpClient, RequestFailed, RetryPolicy
from evalgate.errors import ServerDied
from tests.helpers.post_server import post_server


class Script:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.seen: list[dict[str, object]] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    """Answers each POST with the next scripted status (200 when none is left), recording it."""
    script = Script([])

    def answer(headers: Message, body: bytes) -> tuple[int, object]:
        script.seen.append({"auth": headers.get("Authorization"), "body": json.loads(body)})
        status = script.statuses.pop(0) if script.statuses else 200
        return status, {"ok": status == 200}

    with post_server(answer) as url:
        yield url, script


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
