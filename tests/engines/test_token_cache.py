"""TokenCache: one request per text in flight, failures not kept, finished entries bounded."""

from __future__ import annotations

import asyncio

import pytest

from evalgate.engines._scoring import TokenCache


class Tokenizer:
    """Counts the requests; ``gate`` holds them until the test lets them go."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: set[str] = set()

    async def __call__(self, text: str) -> list[int]:
        self.calls.append(text)
        await self.gate.wait()
        if text in self.fail:
            raise RuntimeError(f"tokenize {text!r} failed")
        return list(range(len(text.split())))


def test_concurrent_requests_for_one_text_share_one_fetch() -> None:
    async def main() -> None:
        tok = Tokenizer()
        tok.gate.clear()
        cache = TokenCache(tok)
        waiters = [asyncio.ensure_future(cache.get("a b c")) for _ in range(4)]
        await asyncio.sleep(0)
        tok.gate.set()
        assert await asyncio.gather(*waiters) == [[0, 1, 2]] * 4
        assert tok.calls == ["a b c"]

    asyncio.run(main())


def test_a_failure_is_not_kept() -> None:
    async def main() -> None:
        tok = Tokenizer()
        tok.fail.add("x")
        cache = TokenCache(tok)
        with pytest.raises(RuntimeError):
            await cache.get("x")
        tok.fail.clear()
        assert await cache.get("x") == [0]
        assert tok.calls == ["x", "x"]

    asyncio.run(main())


def test_finished_entries_are_bounded_by_count_least_recently_used_first() -> None:
    async def main() -> None:
        tok = Tokenizer()
        cache = TokenCache(tok, max_entries=2)
        await cache.get("a")
        await cache.get("b")
        await cache.get("a")  # a is now the most recent
        await cache.get("c")  # evicts b
        assert len(cache) == 2
        await cache.get("a")
        await cache.get("b")
        assert tok.calls == ["a", "b", "c", "b"]

    asyncio.run(main())


def test_finished_entries_are_bounded_by_tokens_held() -> None:
    async def main() -> None:
        tok = Tokenizer()
        cache = TokenCache(tok, max_tokens=10)
        long = " ".join(["w"] * 8)
        await cache.get(long)
        await cache.get("one two three")  # 8 + 3 > 10: the long one goes
        assert len(cache) == 1
        await cache.get("one two three")
        await cache.get(long)
        assert tok.calls == [long, "one two three", long]

    asyncio.run(main())


def test_a_request_in_flight_is_never_evicted() -> None:
    async def main() -> None:
        tok = Tokenizer()
        cache = TokenCache(tok, max_entries=1)
        tok.gate.clear()
        slow = asyncio.ensure_future(cache.get("slow one"))
        await asyncio.sleep(0)
        tok.gate.set()
        assert await cache.get("fast") == [0]
        assert await slow == [0, 1]
        assert tok.calls == ["slow one", "fast"]

    asyncio.run(main())


def test_aclose_cancels_what_is_in_flight() -> None:
    async def main() -> None:
        tok = Tokenizer()
        tok.gate.clear()
        cache = TokenCache(tok)
        waiter = asyncio.ensure_future(cache.get("never"))
        await asyncio.sleep(0)
        await cache.aclose()
        assert len(cache) == 0
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
