"""A hot stored context is rechecked in the store by one request per period, not by every request in flight."""

from __future__ import annotations

import asyncio

import numpy as np

from service.engine.context_sets import ContextSet, ContextSets
from service.engine.errors import NotFound
from service.engine.store import MemoryStore


class CountingStore(MemoryStore):
    """The embedded store, with a slow TTL lookup that counts its calls (a Redis round trip stands in)."""

    def __init__(self) -> None:
        super().__init__()
        self.ttl_calls = 0

    async def ttl(self, key: str) -> int | None:
        self.ttl_calls += 1
        await asyncio.sleep(0.05)
        return await super().ttl(key)


def test_one_recheck_per_period_while_the_others_use_the_copy():
    async def scenario():
        store = CountingStore()
        contexts = ContextSets(store, ttl_s=3600, recheck_s=0.1)
        ctx = ContextSet.build(np.ones((4, 64)), np.ones((4, 32)))
        await contexts.put(ctx)
        assert (await contexts.stored(ctx.id)).id == ctx.id and store.ttl_calls == 0
        await asyncio.sleep(0.12)
        got = await asyncio.gather(*(contexts.stored(ctx.id) for _ in range(32)))
        assert all(g.id == ctx.id for g in got) and store.ttl_calls == 1
        await contexts.delete(ctx.id)  # deleted elsewhere: gone here once the next recheck runs
        await asyncio.sleep(0.12)
        outcomes = await asyncio.gather(*(contexts.stored(ctx.id) for _ in range(8)), return_exceptions=True)
        assert store.ttl_calls == 2 and any(isinstance(o, NotFound) for o in outcomes)
        (last,) = await asyncio.gather(contexts.stored(ctx.id), return_exceptions=True)
        assert isinstance(last, NotFound)

    asyncio.run(scenario())
