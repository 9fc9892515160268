"""Fitted states kept in process: each model's encoding of a context, and each context's load geometry.

Encoded contexts (torch tensors) are too big and too process-specific for Redis; they live in a
bounded LRU with single-flight async fill, keyed per (model, version, network, context id). The
geometry every answer's extrapolation measure is read from (models.off_context: a d x d matrix, the
same whichever model answers) is kept the same way, per context id.
Concurrent misses on one key share one computation, which one caller's cancellation does not stop.
A guarded method's fit for a request's queries has the parts that read the network model built beside it, on a
worker it leaves idle (`Fits._fit`). (Fitted exact GPs live in the GP's own worker processes: service.engine.gp_pool.)
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from models.off_context import ContextGeometry, ContextWork, OffContextGuard
from service.engine import sparse
from service.engine.context_sets import ContextSet
from service.metrics import Metrics


class AsyncLRU:
    """At most `size` values; `get_or_compute` returns (value, hit)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Task[Any]] = {}

    def __len__(self) -> int:
        return len(self._values)

    def peek(self, key: Hashable) -> Any | None:
        return self._values.get(key)

    def touch(self, key: Hashable) -> None:
        """Mark a value read (the least recently read one goes first)."""
        self._values.move_to_end(key)

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


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a failed fill's exception retrieved: its callers re-raise it, or nobody was left to."""
    if not task.cancelled():
        task.exception()


@dataclass
class Cached:
    """A fitted state with the seconds its computation took (reported even on cache hits)."""

    value: Any
    seconds: float


class Fits:
    """The encoded-context and context-geometry caches; `run` computes a missing entry off the event loop, `ahead`
    (service.engine.executor.Executor.ahead; None: nothing ahead) does work ahead of need on an idle worker."""

    def __init__(
        self,
        run: Callable[..., Awaitable[Any]],
        metrics: Metrics,
        encoded_size: int,
        ahead: Callable[..., None] | None = None,
    ) -> None:
        self.run, self.metrics, self.ahead = run, metrics, ahead
        self.encoded_cache = AsyncLRU(encoded_size)
        self.geometry_cache = AsyncLRU(encoded_size)
        # every request counts a hit or a miss of each: the labelled counters looked up once
        self._counted = {
            (cache, outcome): metrics.cache.labels(cache, outcome)
            for cache in ("context_geometry", "encoded_context")
            for outcome in ("hit", "miss")
        }

    async def prepared(
        self, loaded: Any, ctx: ContextSet, network: Any, queries: np.ndarray | None = None
    ) -> tuple[Cached, bool, ContextGeometry]:
        """`encoded` and `geometry` of ctx (its never-metered loads placed as the fit found them:
        sparse.fitted_geometry). One after the other: a request holds at most one pool slot at a
        time (the pool's admission counts them; work ahead of need takes only an idle one), and the geometry is a
        small part of a new context's cost. Both cached (every request on a context after its first): read without
        awaiting. `network`: the context's (its base loads stand in for typical ones it did not give); `queries`: the
        rows the request answers next (`_fit`)."""
        key = self._key(loaded, ctx)
        geometry, cached = self.geometry_cache.peek(ctx.id), self.encoded_cache.peek(key)
        if geometry is not None and cached is not None:
            self.encoded_cache.touch(key)
            self.geometry_cache.touch(ctx.id)
            self._counted[("context_geometry", "hit")].inc()
            self._counted[("encoded_context", "hit")].inc()
            return cached, True, sparse.fitted_geometry(geometry, cached.value)
        geometry = await self.geometry(ctx, network)
        cached, hit = await self.encoded(loaded, ctx, network, None if queries is None else (geometry, queries))
        return cached, hit, sparse.fitted_geometry(geometry, cached.value)

    @staticmethod
    def _key(loaded: Any, ctx: ContextSet) -> tuple[Any, ...]:
        return (loaded.name, loaded.version, ctx.network, ctx.id)

    async def geometry(self, ctx: ContextSet, network: Any) -> ContextGeometry:
        """The context's load geometry (models.off_context), from the in-process LRU or computed now in the pool
        (a context's id covers its network and typical loads)."""

        async def compute() -> ContextGeometry:
            geometry: ContextGeometry = await self.run(sparse.context_geometry, ctx.x, ctx.typical_loads, network)
            return geometry

        geometry, hit = await self.geometry_cache.get_or_compute(ctx.id, compute)
        self._counted[("context_geometry", "hit" if hit else "miss")].inc()
        return cast(ContextGeometry, geometry)

    async def encoded(
        self, loaded: Any, ctx: ContextSet, network: Any, answering: tuple[ContextGeometry, np.ndarray] | None = None
    ) -> tuple[Cached, bool]:
        """The model's encoding of ctx on its `network`, from the in-process LRU or computed now in the pool
        (`answering`: `_fit`)."""

        async def compute() -> Cached:
            t0 = time.perf_counter()
            value = await self._fit(loaded.method, ctx, network, answering)
            seconds = time.perf_counter() - t0
            self.metrics.encodes.labels(loaded.name).inc()
            self.metrics.inference_time(loaded.name, "encode").observe(seconds)
            return Cached(value, seconds)

        cached, hit = await self.encoded_cache.get_or_compute(self._key(loaded, ctx), compute)
        self._counted[("encoded_context", "hit" if hit else "miss")].inc()
        return cached, hit

    async def _fit(
        self, method: Any, ctx: ContextSet, network: Any, answering: tuple[ContextGeometry, np.ndarray] | None
    ) -> Any:
        """sparse.fit in the pool. A guarded method (models.off_context.OffContextGuard) fitted for queries it answers
        next (`answering`: the context's geometry and the queries) has the parts of its fit that read the network
        model built beside it, where those queries need them, on a worker the fit leaves idle (`Executor.ahead`).
        Else the answer builds them after its forward pass, on one core: a checkpoint's exact probe (a second
        encoding of the context, 30-40 ms on the 2-core VM) in bench/cold_path.py's 0.3 s request."""
        if answering is None or self.ahead is None or not isinstance(method, OffContextGuard):
            return await self.run(sparse.fit, method, ctx.x, ctx.y, ctx.typical_loads, network)
        work = method.context_work(ctx.x, ctx.y)
        fitting = asyncio.ensure_future(self.run(sparse.fit, method, ctx.x, ctx.y, ctx.typical_loads, network, work))
        self.ahead(_build_ahead, method, work, *answering)  # after the fit's job: it takes the first free worker
        return await fitting

    def forget(self, context_id: str) -> None:
        """Drop every encoding and the geometry of a deleted context."""
        self.encoded_cache.discard_where(lambda key: cast("tuple[Any, ...]", key)[-1] == context_id)
        self.geometry_cache.discard(context_id)


def _build_ahead(method: OffContextGuard, work: ContextWork, geometry: ContextGeometry, queries: np.ndarray) -> None:
    method.build_ahead(work, geometry.extrapolation(queries))
