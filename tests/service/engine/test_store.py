"""Both store backends honour one contract; context sets round-trip through their byte format."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.engine.context_sets import ContextSet, ContextSets, context_id
from service.engine.store import MemoryStore, RedisStore, StoreUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    if request.param == "memory":
        return MemoryStore
    url = request.getfixturevalue("redis_url")
    return lambda: RedisStore(url)


def test_set_get_ttl_delete(make_store):
    async def scenario():
        store = make_store()
        await store.set("gridpfn:test:a", b"\x00\x01payload", 100)
        assert await store.get("gridpfn:test:a") == b"\x00\x01payload"
        assert 98 <= await store.ttl("gridpfn:test:a") <= 100
        assert await store.delete("gridpfn:test:a") is True
        assert await store.delete("gridpfn:test:a") is False
        assert await store.get("gridpfn:test:a") is None and await store.ttl("gridpfn:test:a") is None
        await store.ping()
        await store.close()

    run(scenario())


def test_memory_store_expires_and_evicts():
    async def scenario():
        clock = Clock()
        store = MemoryStore(max_bytes=10, clock=clock)
        await store.set("a", b"12345", 10)
        clock.now += 9.5
        assert await store.get("a") == b"12345"
        clock.now += 1
        assert await store.get("a") is None  # expired
        await store.set("b", b"123456", 10)
        await store.set("c", b"123456", 10)  # over 10 bytes: the oldest goes
        assert await store.get("b") is None and await store.get("c") == b"123456"

    run(scenario())


def test_redis_store_down_raises_store_unavailable():
    from tests.service.conftest import free_port

    async def scenario():
        store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)  # nothing listens there
        for call in (store.ping(), store.get("k"), store.set("k", b"v", 1), store.delete("k")):
            with pytest.raises(StoreUnavailable):
                await call
        await store.close()

    run(scenario())


def test_context_id_is_canonical():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 64)), rng.normal(size=(5, 32))
    assert context_id(x, y) == context_id(x.astype(">f8"), np.asfortranarray(y))  # byte order, layout
    assert context_id(x, y) == context_id(x.tolist(), y.tolist())
    assert context_id(x, y) != context_id(x[:4], y[:4])
    assert context_id(x, y) != context_id(x.reshape(10, 32), y)  # same bytes, other shape
    assert context_id(x, y) == context_id(x, y, "ieee33") != context_id(x, y, "kerber_landnetz_kabel_1")  # network
    assert len(context_id(x, y)) == 64


def test_context_set_round_trip(make_store):
    async def scenario():
        rng = np.random.default_rng(1)
        ctx = ContextSet.build(
            rng.normal(size=(7, 16)), rng.normal(size=(7, 17)), {"kind": "uploaded"}, network="kerber_landnetz_kabel_1"
        )
        sets = ContextSets(make_store(), ttl_s=60)
        await sets.put(ctx)
        back = await sets.get(ctx.id)
        np.testing.assert_array_equal(back.x, ctx.x)
        np.testing.assert_array_equal(back.y, ctx.y)
        assert back.source == {"kind": "uploaded", "network": "kerber_landnetz_kabel_1"} and back.x.flags.writeable
        assert back.network == "kerber_landnetz_kabel_1"
        assert 0 < await sets.ttl(ctx.id) <= 60
        assert await sets.delete(ctx.id) and await sets.get(ctx.id) is None
        await sets.store.close()

    run(scenario())


def test_entries_expire_after_their_ttl(make_store):
    async def scenario():
        store = make_store()
        await store.set("gridpfn:test:short", b"v", 1)
        assert await store.get("gridpfn:test:short") == b"v"
        await asyncio.sleep(1.1)
        assert await store.get("gridpfn:test:short") is None
        await store.close()

    run(scenario())
