"""Bounded in-process LRU with single-flight async fill.

Encoded contexts (torch tensors) and fitted GPs are too big and too process-specific for Redis;
they live here, keyed per (model, context id). Concurrent misses on one key share one computation,
which one caller's cancellation does not stop.
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
        self._inflight: dict[Hashable, asyncio.Task] = {}

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
        """The cached value, or one computation shared by every concurrent caller of the key.

        The computation runs as its own task and each caller awaits it through `asyncio.shield`,
        so a caller that is cancelled (a client that hung up) leaves it running for the others;
        its result is cached even when every caller has gone.
        """
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key], True
        task = self._inflight.get(key)
        shared = task is not None
        if task is None:
            task = self._inflight[key] = asyncio.get_running_loop().create_task(self._fill(key, compute))
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task), shared

    async def _fill(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        try:
            value = await compute()
        finally:
            self._inflight.pop(key, None)
        self._values[key] = value
        while len(self._values) > self.size:
            self._values.popitem(last=False)
        return value


def _retrieve(task: asyncio.Task) -> None:
    """Mark a failed fill's exception retrieved: its callers re-raise it, or nobody was left to."""
    if not task.cancelled():
        task.exception()
