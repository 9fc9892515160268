"""Where context sets (and later batch-job state) live: one async byte store, two backends.

`RedisStore` shares state between server processes and workers; `MemoryStore` is the embedded
fallback when no Redis URL is configured. Both expire entries after a TTL and raise
`StoreUnavailable` when the backend cannot be reached, so a request is refused at once instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from service.engine.errors import StoreUnavailable


class Store(ABC):
    """Async key -> bytes store with per-key TTL."""

    kind: str = "store"

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: int) -> None: ...

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """True when the key existed."""

    @abstractmethod
    async def ttl(self, key: str) -> int | None:
        """Seconds left before the key expires; None when it does not exist."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise StoreUnavailable when the backend is not reachable."""

    async def keys(self, prefix: str) -> list[str]:
        """Live keys starting with `prefix` (no glob characters), sorted."""
        raise NotImplementedError

    async def close(self) -> None:
        return None


class MemoryStore(Store):
    """In-process store: TTL checked on access, oldest entries evicted past `max_bytes`."""

    kind = "memory"

    def __init__(self, max_bytes: int = 1 << 30, clock: Callable[[], float] = time.monotonic) -> None:
        self._data: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._clock = clock
        self._lock = asyncio.Lock()

    def _live(self, key: str) -> tuple[bytes, float] | None:
        entry = self._data.get(key)
        if entry is not None and entry[1] <= self._clock():
            self._drop(key)
            return None
        return entry

    def _drop(self, key: str) -> bool:
        entry = self._data.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[0])
        return entry is not None

    async def get(self, key: str) -> bytes | None:
        entry = self._live(key)
        return None if entry is None else entry[0]

    async def set(self, key: str, value: bytes, ttl_s: int) -> None:
        async with self._lock:
            self._drop(key)
            self._data[key] = (bytes(value), self._clock() + ttl_s)
            self._bytes += len(value)
            while self._bytes > self._max_bytes and len(self._data) > 1:
                self._drop(next(iter(self._data)))

    async def delete(self, key: str) -> bool:
        return self._live(key) is not None and self._drop(key)

    async def ttl(self, key: str) -> int | None:
        entry = self._live(key)
        return None if entry is None else max(0, int(round(entry[1] - self._clock())))

    async def ping(self) -> None:
        return None

    async def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in list(self._data) if k.startswith(prefix) and self._live(k) is not None)


class RedisStore(Store):
    """Redis via redis.asyncio; every backend failure becomes StoreUnavailable."""

    kind = "redis"

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        self.client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1)
        )

    async def _call(self, name: str, *args: Any) -> Any:
        try:
            return await getattr(self.client, name)(*args)
        except (TimeoutError, RedisError, OSError) as exc:
            raise StoreUnavailable(f"redis {name} failed: {type(exc).__name__}") from exc

    async def get(self, key: str) -> bytes | None:
        return cast("bytes | None", await self._call("get", key))

    async def set(self, key: str, value: bytes, ttl_s: int) -> None:
        await self._call("set", key, value, ttl_s)

    async def delete(self, key: str) -> bool:
        return bool(await self._call("delete", key))

    async def ttl(self, key: str) -> int | None:
        left = await self._call("ttl", key)
        return None if left is None or left == -2 else max(0, int(left))

    async def ping(self) -> None:
        await self._call("ping")

    async def keys(self, prefix: str) -> list[str]:
        try:
            found = [k async for k in self.client.scan_iter(match=prefix + "*", count=1000)]
        except (TimeoutError, RedisError, OSError) as exc:
            raise StoreUnavailable(f"redis scan failed: {type(exc).__name__}") from exc
        return sorted(k.decode() if isinstance(k, bytes) else k for k in found)

    async def close(self) -> None:
        await self.client.aclose()


def open_store(redis_url: str | None, timeout_s: float = 1.0) -> Store:
    """Redis when a URL is configured, the embedded store otherwise."""
    return RedisStore(redis_url, timeout_s) if redis_url else MemoryStore()
