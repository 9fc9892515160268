"""The job queue: a Redis Stream read by a consumer group of `gridpfn worker` processes.

Why Streams and not Celery-on-Redis: Celery's Redis transport redelivers any task not
acknowledged within its visibility timeout, so a job that legitimately runs longer than that
(a million rows) is started a second time while the first run is still going. Here liveness is
explicit instead: a worker reads a job with XREADGROUP (it becomes pending, owned by that worker),
renews its claim after every finished chunk (XCLAIM ... JUSTID resets the idle time), and XACKs it
only when the job has reached a final state. A job whose worker died stops being renewed; after
`job_claim_idle_s` another worker takes it over with XAUTOCLAIM and resumes from the last chunk
recorded in the job's record. No extra library, and the pending list shows who holds what.
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

    def take(self, consumer: str, claim_idle_ms: int, block_ms: int) -> Delivery | None:
        """A job whose worker went silent (XAUTOCLAIM) first, else a new one (XREADGROUP)."""
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

    def heartbeat(self, consumer: str, message_id: str) -> None:
        """Reset the idle time of a job we are still working on, so nobody takes it over."""
        self.client.xclaim(self.stream, GROUP, consumer, 0, [message_id], justid=True)

    def ack(self, message_id: str) -> None:
        pipe = self.client.pipeline()
        pipe.xack(self.stream, GROUP, message_id)
        pipe.xdel(self.stream, message_id)
        pipe.execute()
