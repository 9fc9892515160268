"""Everything one running service holds: settings, registry, store, pool, batcher, caches.

Built once by the app lifespan and reached from the routers through `request.app.state.runtime`;
the resolution steps here (model by name, context by id or inline, encoded context, fitted GP)
turn every failure into the matching problem (404, 413, 422, 503).
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.batcher import MicroBatcher
from service.context_sets import ContextSet, ContextSets
from service.errors import ProblemError, invalid, not_found, too_large, unavailable
from service.lru import AsyncLRU
from service.metrics import Metrics
from service.pool import PoolFull, WorkerPool
from service.settings import Settings
from service.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

N_FEATURES, N_OUTPUTS = 64, 32  # IEEE 33-bus: P and Q at 32 load buses -> |V| at buses 2..33
OUTPUT_NAMES = [f"vm_pu_bus{bus}" for bus in range(2, 34)]


@dataclass
class Cached:
    """A fitted state with the seconds its computation took (reported even on cache hits)."""

    value: Any
    seconds: float


@dataclass
class Runtime:
    settings: Settings
    registry: Any
    store: Store
    gp_method: Any
    metrics: Metrics = field(default_factory=Metrics)
    ready: bool = False

    def __post_init__(self) -> None:
        s = self.settings
        self.contexts = ContextSets(self.store, s.context_ttl_s)
        self.pool = WorkerPool(s.workers, s.queue_size, self.metrics.depth)
        self.batcher = MicroBatcher(self.pool, s.batch_window_ms / 1000.0, s.batch_max_queries, self.metrics.batch)
        self.encoded_cache = AsyncLRU(s.encoded_cache_size)
        self.gp_cache = AsyncLRU(s.gp_cache_size)
        self.recent_contexts: OrderedDict[str, tuple[ContextSet, float]] = OrderedDict()  # id -> (set, checked at)
        self._rechecking: set[str] = set()  # context ids whose existence one request is asking the store now

    # --- work off the event loop -------------------------------------------------------------
    async def run(self, fn, *args):
        """Run fn in the worker pool; a full pool is a 503 with Retry-After."""
        try:
            return await self.pool.run(fn, *args)
        except PoolFull as exc:
            raise self.overloaded(exc) from exc
        except ValueError as exc:  # the project's convention: bad input -> ValueError naming the field
            raise self.rejected(exc) from exc

    @staticmethod
    def rejected(exc: ValueError) -> ProblemError:
        return ProblemError(422, "input-rejected", "Input rejected by the model", str(exc),
                            [{"location": "body", "field": str(exc).split(":")[0], "message": str(exc),
                              "expected": "inputs within the model's supported range"}])

    def overloaded(self, exc: Exception) -> ProblemError:
        self.metrics.rejected.labels("queue_full").inc()
        return unavailable("overloaded", "Server busy", f"worker queue full: {exc}; retry shortly", 1)

    # --- resolution ----------------------------------------------------------------------------
    def model(self, name: str, field: str = "model") -> Any:
        loaded = self.registry.models.get(name)
        if loaded is None:
            location = "path" if field == "name" else "body"
            problem = not_found("model", name, field, location)
            refused = [why for key, why in self.registry.errors.items() if key.split("/")[0] == name]
            if refused:
                problem.detail += f" (checkpoint refused: {refused[0]})"
            raise problem
        return loaded

    def check_queries(self, queries: list[list[float]], width: int, field: str = "queries") -> np.ndarray:
        """(m, width) float64 array; 413 over the limit, 422 for a row of the wrong length."""
        limit = self.settings.max_queries
        if len(queries) > limit:
            raise too_large(field, f"{len(queries)} rows is over the limit", f"at most {limit} rows")
        return self.as_matrix(queries, width, field)

    def inline_context(self, x: list[list[float]], y: list[list[float]], field: str = "context") -> ContextSet:
        """Validate an uploaded or inline context's shape and build its content-addressed set."""
        if len(x) > self.settings.max_context_rows:
            raise too_large(f"{field}.x", f"{len(x)} context rows is over the limit",
                            f"at most {self.settings.max_context_rows} rows (GRIDPFN_MAX_CONTEXT_ROWS)")
        if len(x) != len(y):
            raise invalid(f"{field}.y", f"has {len(y)} rows but x has {len(x)}", f"{len(x)} rows, one per x row")
        xa = self.as_matrix(x, N_FEATURES, f"{field}.x")
        ya = self.as_matrix(y, N_OUTPUTS, f"{field}.y")
        return ContextSet.build(xa, ya)

    @staticmethod
    def as_matrix(rows: list[list[float]], width: int, field: str) -> np.ndarray:
        """(len(rows), width) float64 array; 422 naming the first row of another length."""
        if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.shape[1] == width:  # an Arrow body's, checked
            return np.asarray(rows, dtype=np.float64)
        for i, row in enumerate(rows):
            if len(row) != width:
                raise invalid(f"{field}[{i}]", f"has {len(row)} values", f"{width} finite numbers")
        return np.asarray(rows, dtype=np.float64)

    async def stored_context(self, cid: str, location: str = "body") -> ContextSet:
        """The stored set; recently used ones come from memory, so a hot context is not re-read and
        re-decoded from the store on every request. Whether it still exists in the store (TTL) is
        asked again once its copy is older than GRIDPFN_CONTEXT_RECHECK_S, by one request at a time:
        the others keep using the copy meanwhile, so a hot context costs one store round trip per
        period, not one per request in flight when the period ends (a burst of up to a connection each)."""
        now = time.monotonic()
        try:
            ctx, checked = self.recent_contexts.get(cid, (None, now))
            if ctx is not None and now - checked >= self.settings.context_recheck_s and cid not in self._rechecking:
                self._rechecking.add(cid)
                try:
                    if await self.contexts.ttl(cid) is None:
                        self.recent_contexts.pop(cid, None)  # deleted or expired in the store: gone here too
                        ctx = None
                finally:
                    self._rechecking.discard(cid)
                checked = now
            if ctx is None:
                ctx = await self.contexts.get(cid)
        except StoreUnavailable as exc:
            raise unavailable("store-unavailable", "Context store unavailable",
                              f"{exc}; send the context inline instead, or retry", 5) from exc
        if ctx is None:
            raise not_found("context set", cid, "context_id", location)
        self.recent_contexts[cid] = (ctx, checked)
        self.recent_contexts.move_to_end(cid)
        while len(self.recent_contexts) > self.settings.encoded_cache_size:
            self.recent_contexts.popitem(last=False)
        return ctx

    async def context_of(self, request: Any) -> ContextSet:
        """The request's context: inline (no store needed) or by id."""
        if request.context is not None:
            return self.inline_context(request.context.x, request.context.y)
        return await self.stored_context(request.context_id)

    def check_context_size(self, loaded: Any, ctx: ContextSet) -> None:
        sizes = loaded.card.get("context_size") or {}
        low, high = int(sizes.get("min", 1)), int(sizes.get("max", self.settings.max_context_rows))
        if not low <= ctx.rows <= high:
            raise invalid("context", f"{ctx.rows} context rows is outside what {loaded.name} supports",
                          f"between {low} and {high} rows (model card context_size)")

    # --- caches --------------------------------------------------------------------------------
    async def encoded(self, loaded: Any, ctx: ContextSet) -> tuple[Cached, bool]:
        """The model's encoding of ctx, from the in-process LRU or computed now in the pool."""

        async def compute() -> Cached:
            t0 = time.perf_counter()
            value = await self.run(loaded.method.fit, ctx.x, ctx.y)
            seconds = time.perf_counter() - t0
            self.metrics.encodes.labels(loaded.name).inc()
            self.metrics.inference.labels(loaded.name, "encode").observe(seconds)
            return Cached(value, seconds)

        cached, hit = await self.encoded_cache.get_or_compute((loaded.name, loaded.version, ctx.id), compute)
        self.metrics.cache.labels("encoded_context", "hit" if hit else "miss").inc()
        return cached, hit

    def check_gp_context(self, ctx: ContextSet) -> None:
        """422 pointing to batch jobs when the context is over the on-demand GP's configured size."""
        limit = self.settings.gp_max_context
        if ctx.rows > limit:
            raise ProblemError(
                422, "gp-too-large", "Context too large for the on-demand GP",
                f"the exact GP is limited to {limit} context rows here ({ctx.rows} given); "
                "submit the study as a batch job (POST /v1/batch-jobs) or use a smaller context",
                [{"location": "body", "field": "context", "message": f"{ctx.rows} rows",
                  "expected": f"at most {limit} rows (GRIDPFN_GP_MAX_CONTEXT); larger: POST /v1/batch-jobs"}])

    async def gp_fitted(self, ctx: ContextSet) -> tuple[Cached, bool]:
        """The exact GP fitted on ctx (LRU per context id)."""
        self.check_gp_context(ctx)

        async def compute() -> Cached:
            t0 = time.perf_counter()
            value = await self.run(self.gp_method.fit, ctx.x, ctx.y)
            seconds = time.perf_counter() - t0
            self.metrics.gp_fits.inc()
            self.metrics.gp.labels("fit").observe(seconds)
            return Cached(value, seconds)

        cached, hit = await self.gp_cache.get_or_compute(ctx.id, compute)
        self.metrics.cache.labels("gp_fit", "hit" if hit else "miss").inc()
        return cached, hit

    async def close(self) -> None:
        self.pool.shutdown()
        await self.store.close()
