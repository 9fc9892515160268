"""Bounded worker pool: model and GP work runs in threads, never on the event loop.

At most `workers` jobs run and `queue_size` wait; a job beyond that is refused at once with
`PoolFull` (answered 503 + Retry-After) so overload never turns into an unbounded pile-up.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class PoolFull(RuntimeError):
    """Every worker is busy and the waiting queue is full."""


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
        """Run fn in a worker thread; raises PoolFull when over capacity."""
        if self.pending >= self.capacity:
            raise PoolFull(f"{self.pending} jobs running or queued (capacity {self.capacity})")
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
