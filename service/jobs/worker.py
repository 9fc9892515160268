"""The `gridpfn worker` loop: take job announcements off the Redis stream, then claim, run and record
chunks of whichever active job has one free, beside every other worker.

Every idle worker joins a running job (service.jobs.states: chunk leases), so one job spreads over all of
them; a worker killed at any point leaves leases that lapse after `job_claim_idle_s`, and whoever asks
next retakes its chunks. With `GRIDPFN_DASK_SCHEDULER` set the worker runs no chunk itself: it claims
chunks for a Dask cluster's workers (service.jobs.dask_chunks) and records what they finish.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

import redis

from service.jobs.executors import ChunkExecutor, LocalChunks
from service.jobs.janitor import sweep
from service.jobs.queue import RedisJobQueue
from service.jobs.runner import ChunkRunner
from service.jobs.settings import JobSettings
from service.jobs.states import RedisJobStates

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0


class Worker:
    """One consumer of the job stream and claimer of chunks; `stop()` (or SIGTERM/SIGINT) ends it once the
    chunks it has in flight are recorded."""

    def __init__(
        self,
        redis_url: str,
        registry: Any,
        job_settings: JobSettings,
        name: str | None = None,
        chunks: ChunkExecutor | None = None,
    ) -> None:
        self.settings = job_settings
        # no socket timeout: XREADGROUP blocks on purpose; connection failures still raise
        self.client = redis.Redis.from_url(redis_url, socket_connect_timeout=5, health_check_interval=30)
        self.queue = RedisJobQueue(self.client, job_settings.job_queue)
        self.states = RedisJobStates(self.client, job_settings.job_queue, job_settings.job_ttl_s)
        self.registry = registry
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()
        self.parallel = job_settings.worker_threads or os.cpu_count() or 1
        if chunks is None:
            chunks = LocalChunks(job_settings.jobs_dir, registry.get, parallel=self.parallel)
        self.runner = ChunkRunner(
            self.states,
            job_settings.jobs_dir,
            chunks,
            owner=self.name,
            lease_s=job_settings.job_claim_idle_s,
            max_attempts=job_settings.job_max_attempts,
            chunk_pause_s=job_settings.job_chunk_pause_s,
            should_stop=self.stopping.is_set,
        )

    def stop(self, *_: Any) -> None:
        self.stopping.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run_once(self, block_ms: int = 1000) -> bool:
        """Take a job announcement (waiting up to `block_ms` only when no chunk is in flight here), then claim and
        run chunks until one finishes; False when there was nothing to do."""
        idle_ms = int(self.settings.job_claim_idle_s * 1000)
        delivery = self.queue.take(self.name, idle_ms, None if self.runner.busy else block_ms)
        if delivery is not None:
            self.states.activate(delivery.job_id)
            self.queue.ack(delivery.message_id)
            log.info(
                "worker %s: job %s announced%s",
                self.name,
                delivery.job_id,
                " (reclaimed)" if delivery.reclaimed else "",
            )
        return self.runner.step() or delivery is not None

    def serve_forever(self) -> None:
        self.queue.ensure_group()
        models = self.registry.names() if self.registry is not None else "on the Dask cluster"
        log.info("worker %s waiting for jobs on %s (models: %s)", self.name, self.queue.stream, models)
        next_sweep = 0.0
        try:
            while not self.stopping.is_set():
                try:
                    if time.monotonic() >= next_sweep:
                        sweep(self.settings.jobs_dir, self.states, self.settings.job_ttl_s)
                        next_sweep = time.monotonic() + SWEEP_EVERY_S
                    self.run_once()
                except redis.RedisError as exc:
                    log.warning("redis error (%s: %s); retrying in 2 s", type(exc).__name__, exc)
                    self.stopping.wait(2.0)
            self.runner.drain()
        finally:
            self.runner.close()
        log.info("worker %s stopped", self.name)
