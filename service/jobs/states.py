"""Job records (spec, state, per-chunk progress, owner) in Redis or, embedded, in memory.

Every transition that races with another process (claim, record a chunk, finish, cancel) is one
atomic step: a Lua script in Redis, a lock in memory. Recording chunk i+1 only succeeds while the
caller still owns a running job, so a cancelled job, or one taken over from a worker presumed dead,
stops its old worker at the next chunk boundary instead of letting two writers race.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import redis

from service.jobs.jobspec import JobSpec, JobState

ACTIVE = (JobState.QUEUED.value, JobState.RUNNING.value)

_CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return -1 end
local attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
if attempts > tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[2],
             'error', 'gave up after ' .. ARGV[3] .. ' attempts (workers kept dying on this job)')
  return -1
end
redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1])
redis.call('HSETNX', KEYS[1], 'started_at', ARGV[2])
return tonumber(redis.call('HGET', KEYS[1], 'chunks_done') or '0')
"""
_RECORD = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'chunks_done', ARGV[2], 'rows_done', ARGV[3])
return 1
"""
_FINISH = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'finished_at', ARGV[3], 'error', ARGV[4])
return 1
"""
_CANCEL = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at', ARGV[1])
return 1
"""


class JobStates(ABC):
    """Atomic job-record operations shared by the server, the embedded executor and the workers."""

    @abstractmethod
    def create(self, spec: JobSpec) -> None: ...

    @abstractmethod
    def get(self, job_id: str) -> dict[str, Any] | None:
        """{spec, state, chunks_done, rows_done, attempts, started_at, finished_at, error} or None."""

    @abstractmethod
    def claim(self, job_id: str, owner: str, max_attempts: int) -> int | None:
        """Mark running under `owner`; returns chunks already done, None if the job is not active."""

    @abstractmethod
    def record_chunk(self, job_id: str, owner: str, chunks_done: int, rows_done: int) -> bool:
        """False when the job was cancelled or taken over: the caller must stop."""

    @abstractmethod
    def finish(self, job_id: str, owner: str, state: JobState, error: str = "") -> bool: ...

    @abstractmethod
    def cancel(self, job_id: str) -> bool:
        """True when an active job was cancelled."""

    @abstractmethod
    def delete(self, job_id: str) -> bool: ...


def _decode(raw: dict) -> dict[str, Any] | None:
    if not raw:
        return None
    get = lambda k, default=None: raw.get(k, default)  # noqa: E731
    num = lambda k: float(get(k)) if get(k) not in (None, "") else None  # noqa: E731
    return {
        "spec": JobSpec.model_validate_json(get("spec")),
        "state": JobState(get("state")),
        "chunks_done": int(get("chunks_done", 0)),
        "rows_done": int(get("rows_done", 0)),
        "attempts": int(get("attempts", 0)),
        "started_at": num("started_at"),
        "finished_at": num("finished_at"),
        "error": get("error") or None,
    }


class RedisJobStates(JobStates):
    """One hash per job at `<prefix>:job:<id>`, expiring after the configured TTL."""

    def __init__(self, client: redis.Redis, prefix: str, ttl_s: int) -> None:
        self.client, self.prefix, self.ttl_s = client, prefix, ttl_s
        self._claim, self._record = client.register_script(_CLAIM), client.register_script(_RECORD)
        self._finish, self._cancel = client.register_script(_FINISH), client.register_script(_CANCEL)

    def key(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def create(self, spec: JobSpec) -> None:
        pipe = self.client.pipeline()
        pipe.hset(
            self.key(spec.id),
            mapping={
                "spec": spec.model_dump_json(),
                "state": JobState.QUEUED.value,
                "chunks_done": 0,
                "rows_done": 0,
                "attempts": 0,
            },
        )
        pipe.expire(self.key(spec.id), self.ttl_s)
        pipe.execute()

    def get(self, job_id: str) -> dict[str, Any] | None:
        raw = self.client.hgetall(self.key(job_id))
        return _decode({k.decode(): v.decode() for k, v in raw.items()})

    def claim(self, job_id: str, owner: str, max_attempts: int) -> int | None:
        done = self._claim(keys=[self.key(job_id)], args=[owner, time.time(), max_attempts])
        return None if done is None or int(done) < 0 else int(done)

    def record_chunk(self, job_id: str, owner: str, chunks_done: int, rows_done: int) -> bool:
        return bool(self._record(keys=[self.key(job_id)], args=[owner, chunks_done, rows_done]))

    def finish(self, job_id: str, owner: str, state: JobState, error: str = "") -> bool:
        ok = bool(self._finish(keys=[self.key(job_id)], args=[owner, state.value, time.time(), error]))
        self.client.expire(self.key(job_id), self.ttl_s)
        return ok

    def cancel(self, job_id: str) -> bool:
        return bool(self._cancel(keys=[self.key(job_id)], args=[time.time()]))

    def delete(self, job_id: str) -> bool:
        return bool(self.client.delete(self.key(job_id)))


class MemoryJobStates(JobStates):
    """The embedded mode's records: a dict under a lock, same semantics as the Lua scripts."""

    def __init__(self) -> None:
        self._jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def create(self, spec: JobSpec) -> None:
        with self._lock:
            self._jobs[spec.id] = {
                "spec": spec,
                "state": JobState.QUEUED,
                "chunks_done": 0,
                "rows_done": 0,
                "attempts": 0,
                "started_at": None,
                "finished_at": None,
                "error": None,
                "owner": None,
            }

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else {k: v for k, v in job.items() if k != "owner"}

    def claim(self, job_id: str, owner: str, max_attempts: int) -> int | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job["state"].terminal:
                return None
            job["attempts"] += 1
            if job["attempts"] > max_attempts:
                job.update(
                    state=JobState.FAILED, finished_at=time.time(), error=f"gave up after {max_attempts} attempts"
                )
                return None
            job.update(state=JobState.RUNNING, owner=owner)
            job["started_at"] = job["started_at"] or time.time()
            return job["chunks_done"]

    def _owned(self, job_id: str, owner: str) -> dict[str, Any] | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job["owner"] == owner and job["state"] == JobState.RUNNING else None

    def record_chunk(self, job_id: str, owner: str, chunks_done: int, rows_done: int) -> bool:
        with self._lock:
            job = self._owned(job_id, owner)
            if job is not None:
                job.update(chunks_done=chunks_done, rows_done=rows_done)
            return job is not None

    def finish(self, job_id: str, owner: str, state: JobState, error: str = "") -> bool:
        with self._lock:
            job = self._owned(job_id, owner)
            if job is not None:
                job.update(state=state, finished_at=time.time(), error=error or None)
            return job is not None

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job["state"].terminal:
                return False
            job.update(state=JobState.CANCELLED, finished_at=time.time())
            return True

    def delete(self, job_id: str) -> bool:
        with self._lock:
            return self._jobs.pop(job_id, None) is not None

    def active(self) -> list[str]:
        with self._lock:
            return [job_id for job_id, job in self._jobs.items() if not job["state"].terminal]
