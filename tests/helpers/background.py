"""aiohttp test doubles served from a background event loop, for code under test that runs its
own ``asyncio.run`` (and sync httpx), so the doubles cannot share its loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from aiohttp import web

__all__ = ["background_apps", "serving"]


def background_apps(*, handler_cancellation: bool = False) -> Iterator[Callable[[web.Application], str]]:
    """Yield ``start(app) -> base URL`` on 127.0.0.1; every app started is stopped when the
    generator closes."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    def start(app: web.Application) -> str:
        async def up() -> str:
            runner = web.AppRunner(app, handler_cancellation=handler_cancellation)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
            return f"http://127.0.0.1:{runner.addresses[0][1]}"

        return asyncio.run_coroutine_threadsafe(up(), loop).result(10)

    try:
        yield start
    finally:
        for runner in runners:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


class _Double(Protocol):
    url: str


D = TypeVar("D", bound=_Double)


@contextmanager
def serving(
    make: Callable[..., D], app_of: Callable[[D], web.Application], *, handler_cancellation: bool = False
) -> Iterator[Callable[..., D]]:
    """``start(*args, **script) -> double``: a double built by ``make``, served as ``app_of(double)``
    with its ``url`` set; all of them stop when the block ends (the body of a ``stub`` fixture)."""
    apps = background_apps(handler_cancellation=handler_cancellation)
    serve = next(apps)

    def start(*args: Any, **script: Any) -> D:
        double = make(*args, **script)
        double.url = serve(app_of(double))
        return double

    try:
        yield start
    finally:
        apps.close()
