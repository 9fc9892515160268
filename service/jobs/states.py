"""Job records and chunk leases, in Redis or (embedded) in memory: what lets any number of workers run
one job at once.

A job is its chunks. A worker *claims* a chunk with a lease (its name and an expiry), renews the leases
it holds while it runs them, and *completes* the chunk once its part file is written: the chunk joins the
job's done set and its rows the progress. Fresh chunks are handed out in order from a cursor; once all
were handed out, a chunk whose lease expired (its worker died or stalled past the lease) is retaken by
whoever asks next, and the job's `attempts` counts the workers lost (1 + their number); a chunk leased
more than `max_attempts` times fails the job, so a chunk that kills every worker cannot loop forever. The
completion that fills the done set hands the assembly lease to the job's *appender* (the worker that took
chunk 0 first and appends the parts to the result in order as they appear, so little is left to do at the
end), or takes it when there is none; the holder (or, should it die, whoever retakes the lease) publishes
the result, and `finish` makes the job done exactly once.

Every transition that races with another process is one atomic step: a Lua script in Redis (expiries
read from the Redis server's clock, so hosts' clocks need not agree), a lock in memory. A cancelled,
failed or deleted job refuses claims and completions, so its workers stop at their next chunk boundary.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import redis

from service.jobs.jobspec import JobSpec, JobState

ACTIVE = (JobState.QUEUED.value, JobState.RUNNING.value)
ASSEMBLY = -1  # the index of a job's assembly among its leases (the field "assemble" in Redis)
GAVE_UP = " attempts (workers kept dying on it)"


@dataclass(frozen=True)
class Claim:
    """Chunk `index` of `job_id` (of `chunks`) leased to the caller, or its assembly (`index == ASSEMBLY`).
    `retaken`: an earlier lease on it expired (a worker died holding it)."""

    job_id: str
    index: int
    chunks: int
    retaken: bool = False

    @property
    def assemble(self) -> bool:
        return self.index == ASSEMBLY


def _field(index: int) -> int | str:
    return "assemble" if index == ASSEMBLY else index


def _index(field: bytes | str) -> int:
    text = field.decode() if isinstance(field, bytes) else field
    return ASSEMBLY if text == "assemble" else int(text)


# Redis 5/6 replicate scripts verbatim unless told otherwise, and refuse writes after TIME; 7 always replicates effects
_PRELUDE = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function live(value) return value and tonumber(string.match(value, '^(%d+)')) > now end
local function holder(value) return string.match(value, '^%d+ (.*)$') end
local function lease(ms, owner) return string.format('%d %s', now + tonumber(ms), owner) end
"""
# KEYS: record, done set, leases hash, lost-workers set, active zset
# ARGV: owner, chunks, lease_ms, max_attempts, wall clock now, job id, ttl_s, the give-up message's end,
#       '1' when the owner appends the result as it goes (it becomes the appender if it takes chunk 0 fresh)
# returns {index, retaken}: index -1 when the job is not active, -2 when no chunk is free; chunks: the assembly
_CLAIM = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then
  redis.call('ZREM', KEYS[5], ARGV[6])
  return {-1, 0}
end
if state == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'attempts', 1)
  redis.call('HSETNX', KEYS[1], 'started_at', ARGV[5])
end
local n, mine = tonumber(ARGV[2]), lease(ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[7])
local i = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
while i < n do
  redis.call('HSET', KEYS[1], 'next', i + 1)
  if redis.call('SISMEMBER', KEYS[2], i) == 0 and redis.call('HEXISTS', KEYS[3], i) == 0 then
    redis.call('HSET', KEYS[3], i, mine)
    if i == 0 and ARGV[9] == '1' then redis.call('HSET', KEYS[1], 'appender', ARGV[1]) end
    return {i, 0}
  end
  i = i + 1
end
local function retake(field, value)
  local tries = redis.call('HINCRBY', KEYS[1], 'retakes:' .. field, 1)
  if tries >= tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], 'state', 'failed', 'finished_at', ARGV[5],
               'error', 'gave up on chunk ' .. field .. ' after ' .. tries .. ARGV[8])
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[5], ARGV[6])
    return false
  end
  if redis.call('SADD', KEYS[4], holder(value)) == 1 then redis.call('HINCRBY', KEYS[1], 'attempts', 1) end
  redis.call('EXPIRE', KEYS[4], ARGV[7])
  redis.call('HSET', KEYS[3], field, mine)
  return true
end
if redis.call('SCARD', KEYS[2]) >= n then
  local value = redis.call('HGET', KEYS[3], 'assemble')
  if live(value) then return {holder(value) == ARGV[1] and n or -2, 0} end  -- handed to the caller: its turn
  if value and not retake('assemble', value) then return {-1, 0} end
  redis.call('HSET', KEYS[3], 'assemble', mine)
  return {n, value and 1 or 0}
end
local leases = redis.call('HGETALL', KEYS[3])
for k = 1, #leases, 2 do
  local field, value = leases[k], leases[k + 1]
  if field ~= 'assemble' and not live(value) then
    if redis.call('SISMEMBER', KEYS[2], field) == 1 then
      redis.call('HDEL', KEYS[3], field)
    else
      if not retake(field, value) then return {-1, 0} end
      return {tonumber(field), 1}
    end
  end
end
return {-2, 0}
"""
)
# KEYS: record, done set, leases hash, workers hash; ARGV: owner, index, rows, chunks, lease_ms, ttl_s, ran_by
_COMPLETE = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then return state or 'deleted' end
local value = redis.call('HGET', KEYS[3], ARGV[2])
if value and holder(value) == ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[2]) end
if redis.call('SADD', KEYS[2], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'rows_done', ARGV[3])
  redis.call('HINCRBY', KEYS[4], ARGV[7], 1)
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
redis.call('EXPIRE', KEYS[2], ARGV[6])
local done = redis.call('SCARD', KEYS[2])
redis.call('HSET', KEYS[1], 'chunks_done', done)
if done >= tonumber(ARGV[4]) and redis.call('HEXISTS', KEYS[3], 'assemble') == 0 then
  local who = redis.call('HGET', KEYS[1], 'appender') or ARGV[1]
  redis.call('HSET', KEYS[3], 'assemble', lease(ARGV[5], who))
  if who == ARGV[1] then return 'assemble' end
end
return 'recorded'
"""
)
# KEYS: leases hash; ARGV: owner, lease_ms, fields...; returns the fields no longer held by owner
_RENEW = (
    _PRELUDE
    + """
local lost = {}
for k = 3, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[k])
  if value and holder(value) == ARGV[1] then
    redis.call('HSET', KEYS[1], ARGV[k], lease(ARGV[2], ARGV[1]))
  else
    table.insert(lost, ARGV[k])
  end
end
return lost
"""
)
# KEYS: record, leases hash; ARGV: owner, fields...; a released chunk goes back under the cursor, a released
# assembly takes the owner's appender role with it
_RELEASE = """
for k = 2, #ARGV do
  if ARGV[k] == 'assemble' and redis.call('HGET', KEYS[1], 'appender') == ARGV[1] then
    redis.call('HDEL', KEYS[1], 'appender')
  end
  local value = redis.call('HGET', KEYS[2], ARGV[k])
  if value and string.match(value, '^%d+ (.*)$') == ARGV[1] then
    redis.call('HDEL', KEYS[2], ARGV[k])
    local cursor = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
    if ARGV[k] ~= 'assemble' and tonumber(ARGV[k]) < cursor then redis.call('HSET', KEYS[1], 'next', ARGV[k]) end
  end
end
return 1
"""
# KEYS: record, done set, leases hash, lost set, active zset; ARGV: chunks, wall clock now, job id, ttl_s
_FINISH = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
if redis.call('SCARD', KEYS[2]) < tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[5], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
# KEYS: record, leases hash, active zset; ARGV: new state, wall clock now, job id, error, the error's field, what it
# expected (the last three '' when none)
_END = """
local state = redis.call('HGET', KEYS[1], 'state')
redis.call('ZREM', KEYS[3], ARGV[3])
if state ~= 'queued' and state ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'finished_at', ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'error_field', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'error_expected', ARGV[6]) end
redis.call('DEL', KEYS[2])
return 1
"""
# KEYS: record, active zset; ARGV: job id, score
_ACTIVATE = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return 0 end
return redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
"""


class JobStates(ABC):
    """Atomic job-record and chunk-lease operations shared by the server, the embedded executor and the workers."""

    @abstractmethod
    def create(self, spec: JobSpec) -> None:
        """A queued record, on the active list."""

    @abstractmethod
    def get(self, job_id: str) -> dict[str, Any] | None:
        """{spec, state, chunks_done, rows_done, attempts, started_at, finished_at, error, error_field,
        error_expected, workers} or None; `workers`: chunks completed per worker (a Dask coordinator counts its
        cluster's workers); `error_field`: the submission's field the error is about (None: the job itself)."""

    @abstractmethod
    def active(self) -> list[str]:
        """Ids of the queued and running jobs, oldest first: where an idle worker looks for chunks."""

    @abstractmethod
    def activate(self, job_id: str) -> None:
        """Put an active job on the active list (idempotent; a job announced before the list existed)."""

    @abstractmethod
    def forget(self, job_id: str) -> None:
        """Take a job that is no longer active (ended, or its record expired) off the active list."""

    @abstractmethod
    def claim_chunk(
        self, job_id: str, owner: str, chunks: int, lease_s: float, max_attempts: int, appends: bool = False
    ) -> Claim | None:
        """Lease the next free chunk (or the assembly: when every chunk is done and it is free, lapsed or handed
        to `owner`) to `owner`; None when none is free or the job is not active. `appends`: the owner appends
        the result as chunks finish; taking chunk 0 first makes it the job's appender."""

    @abstractmethod
    def renew(self, job_id: str, owner: str, indices: list[int], lease_s: float) -> list[int]:
        """Extend owner's leases; returns the indices it no longer holds (expired and retaken, or the job ended)."""

    @abstractmethod
    def release(self, job_id: str, owner: str, indices: list[int]) -> None:
        """Give leases back unfinished (a worker stopping): others take them at once, not after the lease.
        Releasing ASSEMBLY also gives up the appender role."""

    @abstractmethod
    def complete_chunk(
        self, job_id: str, owner: str, index: int, rows: int, chunks: int, lease_s: float, ran_by: str | None = None
    ) -> str:
        """Record chunk `index` done (its part is written). 'recorded' (when it was the last chunk, the assembly
        lease went to the job's appender, who claims it next); 'assemble' when it was the last chunk and the
        caller now holds the assembly lease; else the job's state ('cancelled', 'failed', 'done', 'deleted'),
        and the caller stops working on it."""

    @abstractmethod
    def finish(self, job_id: str, chunks: int) -> bool:
        """Done, once: True when this call made a running job with every chunk done `done`."""

    @abstractmethod
    def fail(self, job_id: str, error: str, field: str | None = None, expected: str | None = None) -> bool:
        """True when an active job was failed with `error`; `field`: the submission's field it is about (the
        input refused: "file: rows [17001]: ..."), with what would do (`expected`), as a 422 names them."""

    @abstractmethod
    def cancel(self, job_id: str) -> bool:
        """True when an active job was cancelled."""

    @abstractmethod
    def delete(self, job_id: str) -> bool: ...


def _decode(raw: dict[str, str], workers: dict[str, int]) -> dict[str, Any] | None:
    if not raw:
        return None

    def num(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if value not in (None, "") else None

    return {
        "spec": JobSpec.model_validate_json(raw["spec"]),
        "state": JobState(raw["state"]),
        "chunks_done": int(raw.get("chunks_done", 0)),
        "rows_done": int(raw.get("rows_done", 0)),
        "attempts": int(raw.get("attempts", 0)),
        "started_at": num("started_at"),
        "finished_at": num("finished_at"),
        "error": raw.get("error") or None,
        "error_field": raw.get("error_field") or None,
        "error_expected": raw.get("error_expected") or None,
        "workers": workers,
    }


class RedisJobStates(JobStates):
    """Per job `<prefix>:job:<id>` (the record hash) and beside it `:done` (set of chunk indices), `:leases`
    (index -> "expiry_ms owner"), `:lost` (workers whose leases were retaken), `:workers` (worker -> chunks);
    `<prefix>:active` lists the active jobs by submission time. All expire after the configured TTL."""

    def __init__(self, client: redis.Redis, prefix: str, ttl_s: int) -> None:
        self.client, self.prefix, self.ttl_s = client, prefix, ttl_s
        self.active_key = f"{prefix}:active"
        self._claim, self._complete = client.register_script(_CLAIM), client.register_script(_COMPLETE)
        self._renew, self._release = client.register_script(_RENEW), client.register_script(_RELEASE)
        self._finish, self._end = client.register_script(_FINISH), client.register_script(_END)
        self._activate = client.register_script(_ACTIVATE)

    def key(self, job_id: str, part: str = "") -> str:
        return f"{self.prefix}:job:{job_id}{':' + part if part else ''}"

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
        pipe.zadd(self.active_key, {spec.id: spec.created_at})
        pipe.execute()

    def get(self, job_id: str) -> dict[str, Any] | None:
        pipe = self.client.pipeline()
        pipe.hgetall(self.key(job_id))
        pipe.hgetall(self.key(job_id, "workers"))
        raw, workers = pipe.execute()
        return _decode(
            {k.decode(): v.decode() for k, v in raw.items()}, {k.decode(): int(v) for k, v in workers.items()}
        )

    def holders(self, job_id: str) -> dict[str, str]:
        """Lease field (a chunk index or 'assemble') -> the worker holding it, live or expired."""
        raw = self.client.hgetall(self.key(job_id, "leases"))
        return {k.decode(): v.decode().split(" ", 1)[1] for k, v in raw.items()}

    def active(self) -> list[str]:
        return [job_id.decode() for job_id in self.client.zrange(self.active_key, 0, -1)]

    def activate(self, job_id: str) -> None:
        self._activate(keys=[self.key(job_id), self.active_key], args=[job_id, time.time()])

    def forget(self, job_id: str) -> None:
        self.client.zrem(self.active_key, job_id)

    def claim_chunk(
        self, job_id: str, owner: str, chunks: int, lease_s: float, max_attempts: int, appends: bool = False
    ) -> Claim | None:
        keys = [self.key(job_id, part) for part in ("", "done", "leases", "lost")] + [self.active_key]
        args: list[str | int | float] = [owner, chunks, int(lease_s * 1000), max_attempts, time.time(), job_id]
        args += [self.ttl_s, GAVE_UP, "1" if appends else "0"]
        index, retaken = (int(v) for v in self._claim(keys=keys, args=args))
        if index < 0:
            return None
        return Claim(job_id, ASSEMBLY if index == chunks else index, chunks, bool(retaken))

    def renew(self, job_id: str, owner: str, indices: list[int], lease_s: float) -> list[int]:
        if not indices:
            return []
        fields = [_field(i) for i in indices]
        lost = self._renew(keys=[self.key(job_id, "leases")], args=[owner, int(lease_s * 1000), *fields])
        return [_index(v) for v in lost]

    def release(self, job_id: str, owner: str, indices: list[int]) -> None:
        if indices:
            fields = [_field(i) for i in indices]
            self._release(keys=[self.key(job_id), self.key(job_id, "leases")], args=[owner, *fields])

    def complete_chunk(
        self, job_id: str, owner: str, index: int, rows: int, chunks: int, lease_s: float, ran_by: str | None = None
    ) -> str:
        keys = [self.key(job_id, part) for part in ("", "done", "leases", "workers")]
        args: list[str | int | float] = [owner, index, rows, chunks, int(lease_s * 1000), self.ttl_s, ran_by or owner]
        outcome = self._complete(keys=keys, args=args)
        return outcome.decode() if isinstance(outcome, bytes) else str(outcome)

    def finish(self, job_id: str, chunks: int) -> bool:
        keys = [self.key(job_id, part) for part in ("", "done", "leases", "lost")] + [self.active_key]
        return bool(self._finish(keys=keys, args=[chunks, time.time(), job_id, self.ttl_s]))

    def _to(
        self, job_id: str, state: JobState, error: str = "", field: str | None = None, expected: str | None = None
    ) -> bool:
        keys = [self.key(job_id), self.key(job_id, "leases"), self.active_key]
        return bool(self._end(keys=keys, args=[state.value, time.time(), job_id, error, field or "", expected or ""]))

    def fail(self, job_id: str, error: str, field: str | None = None, expected: str | None = None) -> bool:
        return self._to(job_id, JobState.FAILED, error, field, expected)

    def cancel(self, job_id: str) -> bool:
        return self._to(job_id, JobState.CANCELLED)

    def delete(self, job_id: str) -> bool:
        pipe = self.client.pipeline()
        pipe.delete(self.key(job_id))
        pipe.delete(*(self.key(job_id, part) for part in ("done", "leases", "lost", "workers")))
        pipe.zrem(self.active_key, job_id)
        return bool(pipe.execute()[0])


@dataclass
class _MemoryJob:
    spec: JobSpec
    state: JobState = JobState.QUEUED
    rows_done: int = 0
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    error_field: str | None = None
    error_expected: str | None = None
    cursor: int = 0
    appender: str | None = None
    done: set[int] = field(default_factory=set)
    leases: dict[int, tuple[float, str]] = field(default_factory=dict)  # index -> (monotonic expiry, owner)
    retakes: dict[int, int] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    workers: dict[str, int] = field(default_factory=dict)

    def end(
        self, state: JobState, error: str | None = None, field: str | None = None, expected: str | None = None
    ) -> None:
        self.state, self.finished_at, self.error = state, time.time(), error
        self.error_field, self.error_expected = field, expected
        self.leases.clear()


class MemoryJobStates(JobStates):
    """The embedded mode's records: objects under one lock, the same semantics as the Lua scripts (monotonic clock)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _MemoryJob] = {}
        self._lock = threading.Lock()

    def create(self, spec: JobSpec) -> None:
        with self._lock:
            self._jobs[spec.id] = _MemoryJob(spec)

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            return {
                "spec": job.spec,
                "state": job.state,
                "chunks_done": len(job.done),
                "rows_done": job.rows_done,
                "attempts": job.attempts,
                "started_at": job.started_at,
                "finished_at": job.finished_at,
                "error": job.error,
                "error_field": job.error_field,
                "error_expected": job.error_expected,
                "workers": dict(job.workers),
            }

    def active(self) -> list[str]:
        with self._lock:
            return [job_id for job_id, job in self._jobs.items() if not job.state.terminal]

    def activate(self, job_id: str) -> None:
        """Every record is listed while active."""

    def forget(self, job_id: str) -> None:
        """Ended records are not listed."""

    def claim_chunk(
        self, job_id: str, owner: str, chunks: int, lease_s: float, max_attempts: int, appends: bool = False
    ) -> Claim | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state.terminal:
                return None
            if job.state == JobState.QUEUED:
                job.state, job.attempts = JobState.RUNNING, 1
                job.started_at = job.started_at or time.time()
            now = time.monotonic()
            mine = (now + lease_s, owner)
            while job.cursor < chunks:
                index, job.cursor = job.cursor, job.cursor + 1
                if index not in job.done and index not in job.leases:
                    job.leases[index] = mine
                    if index == 0 and appends:
                        job.appender = owner
                    return Claim(job_id, index, chunks)
            candidates = [ASSEMBLY] if len(job.done) >= chunks else sorted(i for i in job.leases if i != ASSEMBLY)
            for index in candidates:
                held = job.leases.get(index)
                if held is not None and held[0] > now:
                    if index == ASSEMBLY and held[1] == owner:  # handed to the caller: its turn
                        return Claim(job_id, ASSEMBLY, chunks)
                    continue
                if index in job.done:
                    del job.leases[index]
                    continue
                if held is not None:
                    job.retakes[index] = job.retakes.get(index, 0) + 1
                    if job.retakes[index] >= max_attempts:
                        job.end(
                            JobState.FAILED, f"gave up on chunk {_field(index)} after {job.retakes[index]}{GAVE_UP}"
                        )
                        return None
                    if held[1] not in job.lost:
                        job.lost.add(held[1])
                        job.attempts += 1
                job.leases[index] = mine
                return Claim(job_id, index, chunks, held is not None)
            return None

    def renew(self, job_id: str, owner: str, indices: list[int], lease_s: float) -> list[int]:
        with self._lock:
            job = self._jobs.get(job_id)
            leases = {} if job is None else job.leases
            lost = []
            for index in indices:
                held = leases.get(index)
                if held is not None and held[1] == owner:
                    leases[index] = (time.monotonic() + lease_s, owner)
                else:
                    lost.append(index)
            return lost

    def release(self, job_id: str, owner: str, indices: list[int]) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            for index in indices:
                held = job.leases.get(index)
                if index == ASSEMBLY and job.appender == owner:
                    job.appender = None
                if held is not None and held[1] == owner:
                    del job.leases[index]
                    if index != ASSEMBLY:
                        job.cursor = min(job.cursor, index)

    def complete_chunk(
        self, job_id: str, owner: str, index: int, rows: int, chunks: int, lease_s: float, ran_by: str | None = None
    ) -> str:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return "deleted"
            if job.state != JobState.RUNNING:
                return str(job.state.value)
            held = job.leases.get(index)
            if held is not None and held[1] == owner:
                del job.leases[index]
            if index not in job.done:
                job.done.add(index)
                job.rows_done += rows
                who = ran_by or owner
                job.workers[who] = job.workers.get(who, 0) + 1
            if len(job.done) >= chunks and ASSEMBLY not in job.leases:
                who = job.appender or owner
                job.leases[ASSEMBLY] = (time.monotonic() + lease_s, who)
                if who == owner:
                    return "assemble"
            return "recorded"

    def finish(self, job_id: str, chunks: int) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state != JobState.RUNNING or len(job.done) < chunks:
                return False
            job.end(JobState.DONE)
            return True

    def _to(
        self,
        job_id: str,
        state: JobState,
        error: str | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state.terminal:
                return False
            job.end(state, error, field, expected)
            return True

    def fail(self, job_id: str, error: str, field: str | None = None, expected: str | None = None) -> bool:
        return self._to(job_id, JobState.FAILED, error or None, field, expected)

    def cancel(self, job_id: str) -> bool:
        return self._to(job_id, JobState.CANCELLED)

    def delete(self, job_id: str) -> bool:
        with self._lock:
            return self._jobs.pop(job_id, None) is not None
