"""The `gridpfn worker` loop: take jobs from the Redis stream, run them, acknowledge them.

A job is acknowledged only once it reached a final state (or no longer exists), so a worker killed
at any point, or one whose job was taken over, leaves it pending; after `job_claim_idle_s` without a heartbeat another
worker (or this one restarted) reclaims it and resumes from the last recorded chunk.
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

from service.jobs.janitor import sweep
from service.jobs.queue import RedisJobQueue
from service.jobs.runner import RunContext, run_job
from service.jobs.settings import JobSettings
from service.jobs.states import RedisJobStates

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0


class Worker:
    """One consumer of the job stream; `stop()` (or SIGTERM/SIGINT) ends it after the current chunk."""

    def __init__(self, redis_url: str, registry: Any, job_settings: JobSettings, name: str | None = None) -> None:
        self.settings = job_settings
        # no socket timeout: XREADGROUP blocks on purpose; connection failures still raise
        self.client = redis.Redis.from_url(redis_url, socket_connect_timeout=5, health_check_interval=30)
        self.queue = RedisJobQueue(self.client, job_settings.job_queue)
        self.states = RedisJobStates(self.client, job_settings.job_queue, job_settings.job_ttl_s)
        self.registry = registry
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()
        self.parallel = job_settings.worker_threads or os.cpu_count() or 1

    def stop(self, *_: Any) -> None:
        self.stopping.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run_once(self, block_ms: int = 1000) -> bool:
        """Take and process at most one job; False when none was waiting."""
        delivery = self.queue.take(self.name, int(self.settings.job_claim_idle_s * 1000), block_ms)
        if delivery is None:
            return False
        log.info("worker %s took job %s%s", self.name, delivery.job_id, " (reclaimed)" if delivery.reclaimed else "")
        ctx = RunContext(
            self.states,
            self.settings.jobs_dir,
            self.registry.get,
            owner=self.name,
            max_attempts=self.settings.job_max_attempts,
            chunk_pause_s=self.settings.job_chunk_pause_s,
            heartbeat=lambda: self.queue.heartbeat(self.name, delivery.message_id),
            should_stop=self.stopping.is_set,
            parallel=self.parallel,
        )
        run_job(ctx, delivery.job_id)
        if self._still_active(delivery.job_id):
            # stopping, or taken over by another worker: acking would drop it from the pending list
            # that lets a worker reclaim it should its current owner die too
            log.info("worker %s leaves job %s pending (still active)", self.name, delivery.job_id)
            return True
        self.queue.ack(delivery.message_id)
        return True

    def _still_active(self, job_id: str) -> bool:
        job = self.states.get(job_id)
        return job is not None and not job["state"].terminal

    def serve_forever(self) -> None:
        self.queue.ensure_group()
        log.info("worker %s waiting for jobs on %s (models: %s)", self.name, self.queue.stream, self.registry.names())
        next_sweep = 0.0
        while not self.stopping.is_set():
            try:
                if time.monotonic() >= next_sweep:
                    sweep(self.settings.jobs_dir, self.states, self.settings.job_ttl_s)
                    next_sweep = time.monotonic() + SWEEP_EVERY_S
                self.run_once()
            except redis.RedisError as exc:
                log.warning("redis error (%s: %s); retrying in 2 s", type(exc).__name__, exc)
                self.stopping.wait(2.0)
        log.info("worker %s stopped", self.name)
