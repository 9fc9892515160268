"""Where model work runs: a bounded worker pool, and the micro-batcher that shares its forward passes.

Pool: model and GP work runs in threads, never on the event loop. At most `workers` jobs run and
`queue_size` wait; a job beyond that is refused at once with `QueueFull` so overload never turns
into an unbounded pile-up.

Micro-batching: concurrent small predicts on one (model, context) share one forward pass.
Requests are collected for `window_s` or until `max_rows` query rows, sent to the worker pool as
one `method.summarize` call (and one extrapolation measure over the context's geometry: the batch's
key names one context), and each caller gets its own rows back. While a forward pass for the
same key runs, the next batch keeps collecting until it finishes (or the batch fills up), so under
load batches grow with the arrival rate instead of queueing many one-row passes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from models.errors import InputValidationError
from models.off_context import ContextGeometry
from service.engine.answers import Answer, AnswerSpec, OffContext, Statistics, placed_answer
from service.engine.errors import InputRejected, QueueFull

T = TypeVar("T")

log = logging.getLogger(__name__)


class WorkerPool:
    """Thread pool with admission control; `pending` counts running + waiting jobs."""

    def __init__(self, workers: int, queue_size: int, on_depth: Callable[[int, int], None] | None = None) -> None:
        self.workers, self.capacity = workers, workers + queue_size
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gridpfn-worker")
        self.pending = 0
        self._on_depth = on_depth or (lambda running, waiting: None)

    def _report(self) -> None:
        self._on_depth(min(self.pending, self.workers), max(0, self.pending - self.workers))

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn in a worker thread; raises QueueFull when over capacity."""
        if self.pending >= self.capacity:
            raise QueueFull(self.pending, self.capacity)
        self.pending += 1
        self._report()
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        finally:
            self.pending -= 1
            self._report()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class BatchResult:
    """One caller's rows of a shared forward pass; `statistics`: those rows in their wire dtypes (converted
    once per pass, in the worker), None when the pass's answer is not finite (the caller refuses it)."""

    answer: Answer
    off_context: OffContext
    predict_s: float
    batch_rows: int
    batch_requests: int
    statistics: Statistics | None = None


@dataclass(frozen=True)
class Encoded:
    """What every request on one micro-batch key shares: the method, its encoding of the context, and the
    context's load geometry (each query's extrapolation measure is read from it)."""

    method: Any
    value: Any
    geometry: ContextGeometry


@dataclass
class _Batch:
    encoded: Encoded
    items: list[tuple[np.ndarray, AnswerSpec, asyncio.Future[BatchResult]]] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None
    due: bool = False  # the window has passed; waiting only for the key's running pass


def _compute(encoded: Encoded, items: list[tuple[np.ndarray, AnswerSpec, Any]]) -> list[BatchResult]:
    """Worker-thread side: one pass over the rows of each distinct spec (usually one for all)."""
    t0 = time.perf_counter()
    groups: dict[AnswerSpec, list[int]] = {}
    for i, (_, spec, _) in enumerate(items):
        groups.setdefault(spec, []).append(i)
    results: list[BatchResult | None] = [None] * len(items)
    batch_rows = sum(qx.shape[0] for qx, _, _ in items)
    for spec, members in groups.items():
        queries = np.concatenate([items[i][0] for i in members], axis=0)
        shared, placed = placed_answer(encoded.method, encoded.value, encoded.geometry, queries, spec)
        # here, once per pass, not per caller on the event loop: the finiteness check and the wire dtypes
        statistics = Statistics.of(shared, spec.quantiles) if shared.all_finite() else None
        start = 0
        for i in members:
            stop = start + items[i][0].shape[0]
            results[i] = BatchResult(
                shared.rows(start, stop),
                placed.rows(start, stop),
                0.0,
                batch_rows,
                len(items),
                None if statistics is None else statistics.rows(start, stop),
            )
            start = stop
    elapsed = time.perf_counter() - t0
    done = cast("list[BatchResult]", results)  # every item is in one group: every slot is filled
    for result in done:
        result.predict_s = elapsed
    return done


class MicroBatcher:
    """Collects small requests per key; see module docstring."""

    def __init__(
        self, pool: WorkerPool, window_s: float, max_rows: int, on_batch: Callable[[int, int], None] | None = None
    ) -> None:
        self.pool, self.window_s, self.max_rows = pool, window_s, max_rows
        self._pending: dict[Hashable, _Batch] = {}
        self._on_batch = on_batch or (lambda rows, requests: None)
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[Hashable, int] = {}
        # One pass per key at a time: the next batch collects while it runs. Two passes of a few rows
        # side by side mostly fight over the GIL with the event loop (fewer single-query requests/s on a
        # small CPU: bench/results/service-notes.md); other keys' and big requests still use every worker.
        self.max_running = 1

    async def predict(self, key: Hashable, encoded: Encoded, queries: np.ndarray, spec: AnswerSpec) -> BatchResult:
        """`queries`' rows of a shared pass (every request on one key shares one `encoded`)."""
        loop = asyncio.get_running_loop()
        batch = self._pending.get(key)
        if batch is None:
            batch = self._pending[key] = _Batch(encoded)
            batch.timer = loop.call_later(self.window_s, self._window_passed, key, batch)
        future: asyncio.Future[BatchResult] = loop.create_future()
        batch.items.append((queries, spec, future))
        batch.rows += queries.shape[0]
        if batch.rows >= self.max_rows:
            self._flush(key, batch)
        return await future

    def _window_passed(self, key: Hashable, batch: _Batch) -> None:
        batch.due = True
        if self._running.get(key, 0) < self.max_running:
            self._flush(key, batch)

    def _flush(self, key: Hashable, batch: _Batch) -> None:
        if self._pending.get(key) is not batch:
            return  # already flushed by the row limit
        del self._pending[key]
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._run(key, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Hashable, batch: _Batch) -> None:
        futures = [future for _, _, future in batch.items]
        self._running[key] = self._running.get(key, 0) + 1
        try:
            try:
                results: list[BatchResult | InputValidationError] = list(
                    await self.pool.run(_compute, batch.encoded, batch.items)
                )
            except InputValidationError:
                if len(batch.items) == 1:
                    raise
                results = await self._each_alone(batch)  # one request's bad rows are not its neighbours' fault
        except Exception as exc:  # every waiter sees the same failure (QueueFull, model error)
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._running[key] -= 1
            if not self._running[key]:
                del self._running[key]
            waiting = self._pending.get(key)
            if waiting is not None and waiting.due:
                self._flush(key, waiting)
        self._on_batch(batch.rows, len(futures))
        for future, result in zip(futures, results):
            if future.done():
                continue
            if isinstance(result, InputValidationError):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _each_alone(self, batch: _Batch) -> list[BatchResult | InputValidationError]:
        """A shared pass refused some input: each request again on its own, so only the one whose rows
        the model refused is refused (its row numbers its own)."""
        out: list[BatchResult | InputValidationError] = []
        for item in batch.items:
            try:
                out.extend(await self.pool.run(_compute, batch.encoded, [item]))
            except InputValidationError as exc:
                out.append(exc)
        return out


class Executor:
    """The worker pool and the micro-batcher of one service; a full queue is counted and raised as
    QueueFull, a model's InputValidationError (bad input, naming the field) as InputRejected. Any other
    exception, a ValueError included, is a fault of the service and goes up as it is (a 500)."""

    def __init__(self, workers: int, queue_size: int, window_s: float, max_rows: int, metrics: Any) -> None:
        self.metrics = metrics
        self.pool = WorkerPool(workers, queue_size, metrics.depth)
        self.batcher = MicroBatcher(self.pool, window_s, max_rows, metrics.batch)
        self._ahead_tasks: set[asyncio.Task[None]] = set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) in a worker thread."""
        return await self._refusals(self.pool.run(fn, *args))

    def ahead(self, fn: Callable[..., Any], *args: Any) -> None:
        """fn(*args) in a worker thread that is idle now, else never: work ahead of need, which its caller does
        itself when it needs it (so it neither waits in the queue nor is refused, and its errors are met again
        there). A caller whose own job it goes beside hands that job to `run` first: its worker is then taken."""
        task = asyncio.get_running_loop().create_task(self._ahead(fn, *args))
        self._ahead_tasks.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._ahead_done)

    async def _ahead(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.pool.pending < self.pool.workers:  # after the caller's job took its worker (tasks start in order)
            await self.pool.run(fn, *args)

    def _ahead_done(self, task: asyncio.Task[None]) -> None:
        self._ahead_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("work ahead of need failed (its caller meets it again): %r", task.exception())

    async def batched(self, key: Hashable, encoded: Encoded, queries: np.ndarray, spec: AnswerSpec) -> BatchResult:
        """A few query rows answered in a forward pass shared with other requests on the same key."""
        return await self._refusals(self.batcher.predict(key, encoded, queries, spec))

    async def _refusals(self, work: Awaitable[T]) -> T:
        try:
            return await work
        except QueueFull:
            self.metrics.rejected.labels("queue_full").inc()
            raise
        except InputValidationError as exc:
            raise InputRejected(exc) from exc

    def shutdown(self) -> None:
        self.pool.shutdown()
