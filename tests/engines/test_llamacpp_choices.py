"""LlamaCppScorer.loglikelihood_many sends a question's choices one after another while the
prompt cache is on (llama-server then puts each on the slot that holds the context; the real
server's side is tests/e2e/test_e2e_distributions.py), and all at once when it is off. Against a
llama-server test double: the client's order of requests only, no model."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from evalgate.engines import ServerHandle
from evalgate.engines.llamacpp import LlamaCppScorer
from tests.helpers.background import background_apps


class Seen:
    """What the double saw: the most requests of one prompt in flight at once, and the order."""

    def __init__(self) -> None:
        self.in_flight: Counter[tuple[int, ...]] = Counter()
        self.most: Counter[tuple[int, ...]] = Counter()
        self.forced: list[list[int]] = []


def _app(seen: Seen) -> web.Application:
    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [ord(c) for c in body["content"]]})

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = tuple(body["prompt"])
        forced = [int(t) for t in re.findall(r"<\[(\d+)\]>", body["grammar"])]
        seen.in_flight[prompt] += 1
        seen.most[prompt] = max(seen.most[prompt], seen.in_flight[prompt])
        await asyncio.sleep(0.02)  # long enough for a concurrent sibling to arrive
        seen.in_flight[prompt] -= 1
        seen.forced.append(forced)
        content = [{"id": t, "logprob": -0.5, "top_logprobs": [{"id": t, "logprob": -0.5}]} for t in forced]
        return web.json_response({"choices": [{"text": "", "logprobs": {"content": content}}]})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    return app


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ServerHandle, Seen]]:
    seen = Seen()
    apps = background_apps()
    url = next(apps)(_app(seen))
    yield ServerHandle("double", url, "key", ["llama-server"], tmp_path / "log"), seen
    apps.close()


CHOICES = [" a", " bb", " ccc", " dddd"]


def score(handle: ServerHandle, *, cache: bool) -> list[Any]:
    async def go() -> list[Any]:
        scorer = LlamaCppScorer(handle, concurrency=4, cache_prompt=cache)
        try:
            return await scorer.loglikelihood_many("Q:", CHOICES)
        finally:
            await scorer.aclose()

    return asyncio.run(go())


def test_with_the_prompt_cache_the_choices_go_one_at_a_time_in_their_order(server: Any) -> None:
    handle, seen = server
    out = score(handle, cache=True)
    assert seen.most == {tuple(map(ord, "Q:")): 1}
    assert seen.forced == [[ord(c) for c in choice] for choice in CHOICES]
    assert out == [(-0.5 * len(c), True, len(c)) for c in CHOICES]


def test_without_it_they_go_together(server: Any) -> None:
    handle, seen = server
    out = score(handle, cache=False)
    assert seen.most[tuple(map(ord, "Q:"))] > 1
    assert out == [(-0.5 * len(c), True, len(c)) for c in CHOICES]
