"""The job queue: a Redis Stream read by a consumer group of `gridpfn worker` processes, as a wake-up.

A job is not owned by the worker that reads its message: the message only announces the job. The worker
that reads it puts the job on the active list (JobStates.activate; the server already did at submit, so
this is for announcements from before that list existed) and acknowledges it at once; from there every
idle worker claims the job's chunks through their leases (service.jobs.states), so one job spreads over
all workers and a dead worker's chunks are retaken when their leases expire. A message read by a worker
that died before acknowledging it is taken over with XAUTOCLAIM after `job_claim_idle_s`.

Why Streams and not Celery-on-Redis: Celery's Redis transport redelivers any task not acknowledged within
its visibility timeout, which suits neither a job that runs for an hour nor chunks shared by many
workers; here liveness is explicit (leases), and reading the stream with XREADGROUP keeps each worker a
visible consumer whose idle time the container health check reads (docker/healthcheck.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

log = logging.getLogger(__name__)

GROUP = "workers"


@dataclass(frozen=True)
class Delivery:
    """One job handed to this consumer; `reclaimed` when it was taken over from a dead worker."""

    message_id: str
    job_id: str
    reclaimed: bool


class RedisJobQueue:
    """Stream `<prefix>:stream`, consumer group `workers`."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.stream = client, f"{prefix}:stream"

    def ensure_group(self) -> None:
        try:
            self.client.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def put(self, job_id: str) -> str:
        self.ensure_group()
        return self.client.xadd(self.stream, {"job": job_id}).decode()

    def length(self) -> int:
        return int(self.client.xlen(self.stream))

    def take(self, consumer: str, claim_idle_ms: int, block_ms: int | None) -> Delivery | None:
        """A message whose reader went silent (XAUTOCLAIM) first, else a new one (XREADGROUP, waiting up to
        `block_ms`; None: not at all)."""
        _, claimed, *_ = self.client.xautoclaim(self.stream, GROUP, consumer, claim_idle_ms, "0-0", count=1)
        for message_id, fields in claimed:
            if fields:  # a trimmed entry comes back without fields
                return Delivery(message_id.decode(), fields[b"job"].decode(), True)
            self.client.xack(self.stream, GROUP, message_id)
        answer = self.client.xreadgroup(GROUP, consumer, {self.stream: ">"}, count=1, block=block_ms)
        for _, messages in answer or []:
            for message_id, fields in messages:
                return Delivery(message_id.decode(), fields[b"job"].decode(), False)
        return None

    def ack(self, message_id: str) -> None:
        pipe = self.client.pipeline()
        pipe.xack(self.stream, GROUP, message_id)
        pipe.xdel(self.stream, message_id)
        pipe.execute()
