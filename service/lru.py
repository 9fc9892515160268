"""Bounded in-process LRU with single-flight async fill.

Encoded contexts (torch tensors) and fitted GPs are too big and too process-specific for Redis;
they live here, keyed per (model, context id). Concurrent misses on one key share one computation.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Hashable


class AsyncLRU:
    """At most `size` values; `get_or_compute` returns (value, hit)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Future] = {}

    def __len__(self) -> int:
        return len(self._values)

    def peek(self, key: Hashable) -> Any | None:
        return self._values.get(key)

    def discard(self, key: Hashable) -> None:
        self._values.pop(key, None)

    def discard_where(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._values if predicate(k)]:
            del self._values[key]

    async def get_or_compute(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> tuple[Any, bool]:
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key], True
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key]), True
        future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await compute()
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(value)
        self._values[key] = value
        while len(self._values) > self.size:
            self._values.popitem(last=False)
        return value, False
