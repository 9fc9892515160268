"""service.engine.caches.AsyncLRU: single-flight fill, eviction, failures, and cancellation of one caller."""

from __future__ import annotations

import asyncio

import pytest

from service.engine.caches import AsyncLRU


class Computation:
    """A fill that waits until released, counting how often it ran."""

    def __init__(self, value: object = "value", error: Exception | None = None) -> None:
        self.value, self.error, self.calls = value, error, 0
        self.release = asyncio.Event()

    async def __call__(self) -> object:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.value


def run(scenario) -> None:
    """A scenario that hangs (a waiter never woken) fails in seconds, not at the suite's timeout."""
    asyncio.run(asyncio.wait_for(scenario(), timeout=10))


def test_concurrent_misses_share_one_computation_and_the_value_is_cached():
    async def scenario():
        lru, fill = AsyncLRU(4), Computation()
        callers = [asyncio.create_task(lru.get_or_compute("k", fill)) for _ in range(5)]
        await asyncio.sleep(0)
        fill.release.set()
        results = await asyncio.gather(*callers)
        assert fill.calls == 1
        assert [value for value, _ in results] == ["value"] * 5
        assert [shared for _, shared in results] == [False, True, True, True, True]
        assert await lru.get_or_compute("k", Computation("other")) == ("value", True)

    run(scenario)


def test_the_first_callers_cancellation_leaves_the_computation_to_the_others():
    async def scenario():
        lru, fill = AsyncLRU(4), Computation()
        first = asyncio.create_task(lru.get_or_compute("k", fill))
        await asyncio.sleep(0)
        second = asyncio.create_task(lru.get_or_compute("k", fill))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        fill.release.set()
        assert await second == ("value", True)
        assert fill.calls == 1 and lru.peek("k") == "value"

    run(scenario)


def test_a_fill_whose_callers_all_left_still_lands_in_the_cache():
    async def scenario():
        lru, fill = AsyncLRU(4), Computation()
        only = asyncio.create_task(lru.get_or_compute("k", fill))
        await asyncio.sleep(0)
        only.cancel()
        with pytest.raises(asyncio.CancelledError):
            await only
        fill.release.set()
        for _ in range(3):
            await asyncio.sleep(0)
        assert await lru.get_or_compute("k", Computation("other")) == ("value", True)
        assert fill.calls == 1

    run(scenario)


def test_a_failure_reaches_every_waiter_and_is_not_cached():
    async def scenario():
        lru, fill = AsyncLRU(4), Computation(error=ValueError("context: bad"))
        callers = [asyncio.create_task(lru.get_or_compute("k", fill)) for _ in range(3)]
        await asyncio.sleep(0)
        fill.release.set()
        results = await asyncio.gather(*callers, return_exceptions=True)
        assert all(isinstance(r, ValueError) and str(r) == "context: bad" for r in results)
        assert lru.peek("k") is None and len(lru) == 0
        retry = Computation("fixed")
        retry.release.set()
        assert await lru.get_or_compute("k", retry) == ("fixed", False)

    run(scenario)


def test_least_recently_used_entries_leave_first():
    async def scenario():
        lru = AsyncLRU(2)

        async def const(v):
            return v

        for key in ("a", "b"):
            await lru.get_or_compute(key, lambda key=key: const(key))
        await lru.get_or_compute("a", lambda: const("unused"))  # a is now the most recent
        await lru.get_or_compute("c", lambda: const("c"))
        assert lru.peek("b") is None and lru.peek("a") == "a" and lru.peek("c") == "c"
        lru.discard_where(lambda key: key == "a")
        assert len(lru) == 1

    run(scenario)
