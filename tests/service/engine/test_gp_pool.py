"""service.engine.gp_pool with real worker processes: shared fits, forgetting, and a worker that dies.

(Admission, the time limit and the HTTP answers are tested through a real server in
tests/security/test_gp_pool.py.)
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from models.gp import ExactGP
from service.engine.answers import AnswerSpec
from service.engine.errors import GPWorkerLost, InputRejected
from service.engine.gp_pool import GPPool
from service.metrics import Metrics


def pool(workers: int, max_iter: int = 5) -> GPPool:
    return GPPool(
        ExactGP(max_iter=max_iter),
        workers=workers,
        queue_size=4,
        timeout_s=120,
        cache_size=4,
        torch_threads=1,
        nice=0,
        metrics=Metrics(),
    )


def run(scenario, gp: GPPool) -> None:
    async def bounded():
        try:
            await asyncio.wait_for(scenario(), timeout=240)
        finally:
            await asyncio.to_thread(gp.shutdown)

    asyncio.run(bounded())


def test_concurrent_requests_on_one_context_share_one_fit_and_forget_drops_it(scenarios):
    x, y = scenarios
    gp = pool(workers=2)

    async def scenario():
        both = await asyncio.gather(
            *(gp.answer("ctx", x[:40], y[:40], x[:2], AnswerSpec(), "context_id") for _ in range(2))
        )
        assert sorted(timing["fit_cached"] for _, timing in both) == [False, True]  # one fit, in one worker
        assert both[0][0].mean.tolist() == both[1][0].mean.tolist()
        _, again = await gp.answer("ctx", x[:40], y[:40], x[:2], AnswerSpec(), "context_id")
        assert again["fit_cached"] is True
        _, other_data = await gp.answer("ctx", x[40:80], y[40:80], x[:2], AnswerSpec(), "context_id")
        assert other_data["fit_cached"] is False  # the same id with other data never gets the stale fit
        gp.forget("ctx")
        _, after = await gp.answer("ctx", x[:40], y[:40], x[:2], AnswerSpec(), "context_id")
        assert after["fit_cached"] is False

    run(scenario, gp)


def test_a_worker_killed_while_answering_is_reported_and_replaced(scenarios):
    x, y = scenarios
    gp = pool(workers=1, max_iter=200)

    async def scenario():
        await gp.answer("small", x[:10], y[:10], x[:1], AnswerSpec(), "context_id")  # the worker is up
        (worker,) = gp._workers
        first_pid = worker.proc.pid
        slow = asyncio.ensure_future(gp.answer("slow", x, y, x[:1], AnswerSpec(), "context_id"))
        while worker.busy_with != "slow":
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(GPWorkerLost) as lost:
            await slow
        assert "SIGKILL" in lost.value.detail and lost.value.entries[0]["field"] == "context_id"
        _, timing = await gp.answer("small", x[:10], y[:10], x[:1], AnswerSpec(), "context_id")
        assert timing["fit_cached"] is False and worker.proc.pid != first_pid  # a fresh worker, no old fits
        os.kill(worker.proc.pid, signal.SIGKILL)  # dies while idle: the next request starts another
        worker.proc.wait()
        _, timing = await gp.answer("small", x[:10], y[:10], x[:1], AnswerSpec(), "context_id")
        assert timing["fit_cached"] is False

    run(scenario, gp)


def test_a_models_input_error_crosses_the_process_typed_naming_the_request_field(scenarios):
    """The GP's own check (a context of one row) comes back from its worker process as InputRejected (a 422)
    naming the field the request gave the context in, not as an untyped error."""
    x, y = scenarios
    gp = pool(workers=1)

    async def scenario():
        with pytest.raises(InputRejected) as rejected:
            await gp.answer("one-row", x[:1], y[:1], x[:1], AnswerSpec(), "context_id")
        (entry,) = rejected.value.entries
        assert entry["field"] == "context_id" and entry["expected"] == "at least 2 rows", entry

    run(scenario, gp)
