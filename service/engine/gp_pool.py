"""Where the exact GP runs: its own bounded pool of worker processes, apart from the model pool.

Why processes, not threads: a 1,000-row fit holds a core for seconds, and its Python parts
(scipy's L-BFGS-B loop, the objective's glue) hold the GIL; run in the model pool's threads, a few
of them made a one-row predict wait for seconds (bench/results/service-notes.md). In worker processes (service.engine.gp_worker) a fit
cannot take the server's GIL or its model threads, runs at a lower CPU priority (GRIDPFN_GP_NICE),
keeps its fitted GPs (256 MB each at 1,000 rows) out of the server's memory, and can be stopped
for real at its time limit: the process is killed and replaced (a thread cannot be killed, and a
deadline checked inside the fit would not stop a long Cholesky).

Admission: at most `workers` GP requests run and `queue_size` wait; one more is refused at once
(GPBusy: 429 with Retry-After), so GP demand never piles up. A request whose work runs past
`timeout_s` is answered GPTimeout (504) and its worker restarted; the clock starts when a ready
worker takes the job, so neither queueing nor a worker's start-up count against it.

Routing: each worker keeps its own fits; a request goes to the worker that holds or is fitting
its context (waiting for it when busy: concurrent requests on one context share one fit), else to
any idle worker. Workers start on first use, so a server that never fits a GP starts none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import numpy as np

from models.errors import InputValidationError
from service.engine.answers import Answer, AnswerSpec
from service.engine.errors import GPBusy, GPTimeout, GPWorkerLost, InputRejected
from service.metrics import Metrics

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[2]  # so the worker imports this checkout, wherever the server runs
START_TIMEOUT_S = 120.0  # a worker's interpreter, torch import and warm-up (seconds), with room for a busy host


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    conn: Connection | None = None
    busy_with: str | None = None  # the context id of the job it runs
    held: set[str] = dataclasses.field(default_factory=set)  # context ids it has fitted (as its last answer said)
    forget: set[str] = dataclasses.field(default_factory=set)  # deleted contexts to drop with its next job


class GPPool:
    """See the module docstring; `answer` is the one call."""

    def __init__(
        self,
        method: Any,
        workers: int,
        queue_size: int,
        timeout_s: float,
        cache_size: int,
        torch_threads: int | None,
        nice: int,
        metrics: Metrics,
    ) -> None:
        self.timeout_s, self.metrics = timeout_s, metrics
        self.capacity = workers + queue_size
        self._config = {"method": method, "torch_threads": torch_threads, "cache_size": cache_size, "nice": nice}
        self._workers = [_Worker(i) for i in range(workers)]
        self._io = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gridpfn-gp-io")
        self._free: asyncio.Condition | None = None  # made on first use, inside the server's event loop
        self._tasks: set[asyncio.Task[tuple[Answer, dict[str, Any]]]] = set()
        self.pending = 0
        self._typical_s: float | None = None  # moving average of a job's time, for Retry-After
        self._started_at: dict[int, float] = {}  # worker index -> when its job started

    # ------------------------------------------------------------------ the one call
    async def answer(
        self, context_id: str, x: np.ndarray, y: np.ndarray, queries: np.ndarray, spec: AnswerSpec, field: str
    ) -> tuple[Answer, dict[str, Any]]:
        """The GP's answer for queries on the context (fitted once per worker); GPBusy when the pool is
        full. `field` names the part of the request that asked for the GP (for the problem's errors[]).
        Returns (answer, {"fit_s", "fit_cached", "predict_s"})."""
        if self.pending >= self.capacity:
            self.metrics.rejected.labels("gp_busy").inc()
            running = sum(w.busy_with is not None for w in self._workers)
            raise GPBusy(field, running, self.pending - running, self.capacity, self.retry_after_s())
        self.pending += 1
        self._report()
        job = {"context_id": context_id, "x": x, "y": y, "queries": queries, "spec": spec}
        task = asyncio.get_running_loop().create_task(self._job(job, field))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_retrieve)
        # a caller that goes away (client hung up) leaves the job to finish: its worker answers it,
        # and the slot is freed only then, so `pending` always counts what really runs or waits
        return await asyncio.shield(task)

    def retry_after_s(self) -> int:
        """Seconds until a slot is likely free: a typical job's time (as long again as the oldest running
        one has taken, before any finished) less that job's age; at least 1, at most the time limit."""
        now = time.monotonic()
        elapsed = max((now - t for t in self._started_at.values()), default=0.0)
        typical = self._typical_s if self._typical_s is not None else 2 * elapsed
        return max(1, math.ceil(min(self.timeout_s, typical - elapsed)))

    def forget(self, context_id: str) -> None:
        """A deleted context: every worker drops its fit with its next job."""
        for worker in self._workers:
            if context_id in worker.held:
                worker.held.discard(context_id)
                worker.forget.add(context_id)

    # ------------------------------------------------------------------ scheduling
    async def _job(self, job: dict[str, Any], field: str) -> tuple[Answer, dict[str, Any]]:
        try:
            worker = await self._acquire(job["context_id"])
            try:
                return await self._run(worker, job, field)
            finally:
                await self._release(worker)
        finally:
            self.pending -= 1
            self._report()

    def _report(self) -> None:
        running = sum(w.busy_with is not None for w in self._workers)
        self.metrics.gp_depth(running, self.pending - running)

    def _choose(self, context_id: str) -> _Worker | None:
        owner = next((w for w in self._workers if w.busy_with == context_id), None) or next(
            (w for w in self._workers if context_id in w.held), None
        )
        if owner is not None:
            return owner if owner.busy_with is None else None
        idle = [w for w in self._workers if w.busy_with is None]
        return min(idle, key=lambda w: len(w.held)) if idle else None

    async def _acquire(self, context_id: str) -> _Worker:
        if self._free is None:
            self._free = asyncio.Condition()
        async with self._free:
            while (worker := self._choose(context_id)) is None:
                await self._free.wait()
            worker.busy_with = context_id
            self._report()
            return worker

    async def _release(self, worker: _Worker) -> None:
        assert self._free is not None
        async with self._free:
            worker.busy_with = None
            self._started_at.pop(worker.index, None)
            self._report()
            self._free.notify_all()

    # ------------------------------------------------------------------ one job in one worker
    async def _run(self, worker: _Worker, job: dict[str, Any], field: str) -> tuple[Answer, dict[str, Any]]:
        loop = asyncio.get_running_loop()
        if worker.proc is not None and worker.proc.poll() is not None:  # it died while idle (the OOM killer)
            log.warning(
                "GP worker %d had stopped while idle (%s); starting another",
                worker.index,
                await loop.run_in_executor(None, self._stop, worker),
            )
        if worker.conn is None:
            await loop.run_in_executor(self._io, self._start, worker, field)
        job["forget"], worker.forget = sorted(worker.forget), set()
        started = self._started_at[worker.index] = time.monotonic()
        # _start above gave the worker its connection (or raised)
        exchange = loop.run_in_executor(self._io, _exchange, cast(Connection, worker.conn), job)
        try:
            reply = await asyncio.wait_for(exchange, self.timeout_s)
        except TimeoutError:
            self.metrics.rejected.labels("gp_timeout").inc()
            log.warning(
                "GP job on context %s (%d rows) passed %g s: stopping worker %d",
                job["context_id"],
                len(job["x"]),
                self.timeout_s,
                worker.index,
            )
            await loop.run_in_executor(None, self._stop, worker)
            raise GPTimeout(field, self.timeout_s, len(job["x"])) from None
        except (EOFError, OSError) as exc:
            reason = await loop.run_in_executor(None, self._stop, worker, 5.0)
            log.error("GP worker %d stopped while answering: %s (%r)", worker.index, reason, exc)
            raise GPWorkerLost(field, reason) from None
        seconds = time.monotonic() - started
        self._typical_s = seconds if self._typical_s is None else 0.7 * self._typical_s + 0.3 * seconds
        worker.held = set(reply[-1]) - worker.forget
        if reply[0] == "error":
            if isinstance(reply[1], InputValidationError):  # as the model pool does: bad input, naming the field
                raise InputRejected(reply[1], context_field=field) from None
            raise reply[1]
        _, result, timing, _ = reply
        self.metrics.cache.labels("gp_fit", "hit" if timing["fit_cached"] else "miss").inc()
        if not timing["fit_cached"]:
            self.metrics.gp_fits.inc()
            self.metrics.gp.labels("fit").observe(timing["fit_s"])
        self.metrics.gp.labels("predict").observe(timing["predict_s"])
        return result, timing

    def _start(self, worker: _Worker, field: str) -> None:
        """Start the worker's process and wait for its ready message (blocking; runs in an io thread)."""
        ours, theirs = socket.socketpair()
        # the worker needs no secret: the API keys (and admin key) stay out of its environment
        env = {k: v for k, v in os.environ.items() if k not in ("GRIDPFN_API_KEYS", "GRIDPFN_ADMIN_API_KEY")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "service.engine.gp_worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                cwd=_ROOT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        try:
            conn.send(self._config)
            if not conn.poll(START_TIMEOUT_S):
                raise OSError(f"no ready message within {START_TIMEOUT_S:g} s")
            conn.recv()
        except (EOFError, OSError) as exc:
            proc.kill()
            proc.wait()
            conn.close()
            raise GPWorkerLost(field, f"the GP worker did not start: {exc!r}, exit code {proc.returncode}") from None
        worker.proc, worker.conn, worker.held = proc, conn, set()
        log.info("GP worker %d started (pid %d)", worker.index, proc.pid)

    def _stop(self, worker: _Worker, grace_s: float = 0.0) -> str:
        """End the worker's process (killed unless it exits by itself within grace_s), then close its
        socket; returns how it ended. Blocking. The socket is closed only after the process is gone, so
        an io thread still reading it gets EOF, never a reused descriptor."""
        proc, conn = worker.proc, worker.conn
        worker.proc, worker.conn, worker.held = None, None, set()
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=grace_s) if grace_s else proc.poll()
            except subprocess.TimeoutExpired:
                pass
            if code is None:
                proc.kill()
                proc.wait()
        if conn is not None:
            conn.close()
        if code is None:
            return "stopped by the server"
        return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"

    def shutdown(self) -> None:
        """End every worker process: an idle one exits on its closed socket, a busy one is killed."""
        for worker in self._workers:
            idle = worker.busy_with is None
            if idle and worker.conn is not None:  # no io thread reads an idle worker's socket: close it first
                worker.conn.close()
                worker.conn = None
            self._stop(worker, grace_s=2.0 if idle else 0.0)
        self._io.shutdown(wait=False, cancel_futures=True)


def _exchange(conn: Connection[dict[str, Any], tuple[Any, ...]], job: dict[str, Any]) -> tuple[Any, ...]:
    conn.send(job)
    return conn.recv()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a job's exception retrieved: its caller re-raises it, or nobody was left to."""
    if not task.cancelled():
        task.exception()
