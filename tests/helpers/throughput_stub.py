"""A scripted streaming OpenAI-compatible test double on 127.0.0.1, for the load-generator tests.

It streams ``max_tokens`` chunks with fixed delays, records what it was sent and how many requests
it held at once, and can reject (429), hold requests before their first token (queueing), or
redirect. It runs in a background event loop, since the code under test runs its own
``asyncio.run``. Never a stand-in for llama-server in an end-to-end test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.helpers.background import serving

__all__ = ["Script", "Stub", "stub_servers"]


@dataclass
class Script:
    """How the stub behaves."""

    slots: int | None = 8
    ttft_s: float = 0.01
    itl_s: float = 0.002
    reject_above: int | None = None
    queue_above: int | None = None
    redirect: bool = False
    usage: bool = True
    server_info: dict[str, Any] | None = None


@dataclass
class Stub:
    script: Script
    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    finished: int = 0
    disconnects: int = 0

    def completions(self) -> list[dict[str, Any]]:
        return [s for s in self.seen if s["path"] == "/v1/completions"]


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def _app(stub: Stub) -> web.Application:
    sc = stub.script

    async def models(request: web.Request) -> web.Response:
        stub.seen.append({"path": request.path, "peer": request.remote})
        return web.json_response({"data": [{"id": "stub-model"}]})

    async def props(request: web.Request) -> web.Response:
        if sc.slots is None:
            raise web.HTTPNotFound()
        return web.json_response({"total_slots": sc.slots})

    async def server_info(request: web.Request) -> web.Response:
        if sc.server_info is None:
            raise web.HTTPNotFound()
        return web.json_response(sc.server_info)

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [100 + i for i in range(len(body["content"].split()))]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        stub.seen.append(
            {
                "path": request.path,
                "body": body,
                "auth": request.headers.get("Authorization"),
                "peer": request.remote,
            }
        )
        stub.active += 1
        stub.max_active = max(stub.max_active, stub.active)
        try:
            if sc.redirect:
                raise web.HTTPFound("http://203.0.113.9/v1/completions")
            if sc.reject_above is not None and stub.active > sc.reject_above:
                return web.json_response({"error": {"message": "server busy"}}, status=429)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if sc.queue_above is not None and stub.active > sc.queue_above:
                await asyncio.sleep(3600)
            await asyncio.sleep(sc.ttft_s)
            n = int(body["max_tokens"])
            for i in range(n):
                await resp.write(_sse({"choices": [{"index": 0, "text": f"w{i} ", "finish_reason": None}]}))
                if i < n - 1:
                    await asyncio.sleep(sc.itl_s)
            await resp.write(_sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
            if sc.usage:
                await resp.write(_sse({"choices": [], "usage": {"completion_tokens": n}}))
            await resp.write(b"data: [DONE]\n\n")
            stub.finished += 1
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            stub.disconnects += 1
            raise
        finally:
            stub.active -= 1

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/props", props)
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    return app


def stub_servers() -> Iterator[Callable[..., Stub]]:
    """Yield ``start(script) -> Stub``; every stub started is stopped when the generator closes.

    Stubs run in a background event loop, since the code under test runs its own asyncio.run."""

    def make(script: Script | None = None) -> Stub:
        return Stub(script or Script())

    with serving(make, _app, handler_cancellation=True) as start:
        yield start
