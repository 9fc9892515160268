"""service.engine.executor.WorkerPool on its own: admission control, depth reports, errors, threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.engine.executor import QueueFull, WorkerPool


def test_at_most_workers_run_and_queue_size_wait_then_pool_full():
    async def scenario():
        depths: list[tuple[int, int]] = []
        pool = WorkerPool(workers=2, queue_size=1, on_depth=lambda r, w: depths.append((r, w)))
        gate, started, running, peak = threading.Event(), threading.Semaphore(0), [0], [0]
        lock = threading.Lock()

        def job(i: int) -> int:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            started.release()
            gate.wait(5)
            with lock:
                running[0] -= 1
            return i * 10

        try:
            jobs = [asyncio.create_task(pool.run(job, i)) for i in range(3)]
            await asyncio.sleep(0)
            assert pool.pending == 3 and depths[-1] == (2, 1)
            with pytest.raises(QueueFull, match="capacity 3"):
                await pool.run(job, 99)
            assert pool.pending == 3  # a refused job leaves no trace
            for _ in range(2):
                await asyncio.to_thread(started.acquire, True, 5)
            gate.set()
            assert await asyncio.gather(*jobs) == [0, 10, 20]
            assert peak[0] == 2 and pool.pending == 0 and depths[-1] == (0, 0)
            assert await pool.run(job, 4) == 40  # room again
        finally:
            gate.set()
            pool.shutdown()

    asyncio.run(scenario())


def test_jobs_run_off_the_event_loop_thread_with_keyword_arguments():
    async def scenario():
        pool = WorkerPool(workers=1, queue_size=0)
        try:
            name = await pool.run(lambda suffix="": threading.current_thread().name + suffix, suffix="!")
            assert name.startswith("gridpfn-worker") and name.endswith("!")
            assert name != threading.current_thread().name
        finally:
            pool.shutdown()

    asyncio.run(scenario())


def test_a_failing_job_raises_to_its_caller_and_frees_its_slot():
    async def scenario():
        pool = WorkerPool(workers=1, queue_size=0)

        def bad() -> None:
            raise ValueError("queries: not finite")

        try:
            with pytest.raises(ValueError, match="queries: not finite"):
                await pool.run(bad)
            assert pool.pending == 0
            assert await pool.run(int, "7") == 7
        finally:
            pool.shutdown()

    asyncio.run(scenario())


def test_a_cancelled_caller_frees_its_slot():
    async def scenario():
        pool = WorkerPool(workers=1, queue_size=0)
        gate = threading.Event()
        try:
            waiting = asyncio.create_task(pool.run(gate.wait, 5))
            await asyncio.sleep(0.05)
            with pytest.raises(QueueFull):
                await pool.run(int, "1")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert pool.pending == 0
        finally:
            gate.set()
            pool.shutdown()

    asyncio.run(scenario())
