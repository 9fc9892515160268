"""What the HTTP router calls: create, inspect, cancel and delete jobs; run them when embedded.

With a Redis URL, records live in Redis and jobs are announced on the stream; any number of `gridpfn
worker` processes run their chunks. Without one (the embedded mode), records live in memory and a
one-thread executor inside the server runs the same chunk loop (service.jobs.runner) on the same
kernel; they do not survive a server restart.
Inputs, parts and results live on the shared filesystem (`GRIDPFN_JOBS_DIR`), not in Redis:
a million-row job is ~0.5 GB in and ~1 GB out, which would crowd the memory that Redis needs for
context sets, while Redis keeps only what must be atomic and shared (state, chunk leases and progress).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import redis

from service.engine.tenants import Tenant
from service.jobs import inputs
from service.jobs.executors import LocalChunks
from service.jobs.janitor import sweep
from service.jobs.jobspec import HostingJob, JobSpec, JobState
from service.jobs.queue import RedisJobQueue
from service.jobs.results import JobFiles
from service.jobs.runner import ChunkRunner
from service.jobs.settings import JobSettings
from service.jobs.states import JobStates, MemoryJobStates, RedisJobStates

log = logging.getLogger(__name__)


def new_job_id() -> str:
    return uuid.uuid4().hex


def _error_entry(job: dict[str, Any]) -> dict[str, Any]:
    """A failed job's error as a 422 names a refused field: the submission's field its input came from (in the
    body: `file`, `simulate`, `scenarios`) and what would do; a fault of the job itself names the job."""
    field = job["error_field"]
    return {
        "location": "job" if field is None else "body",
        "field": field or "job",
        "message": job["error"],
        "expected": job["error_expected"],
    }


class JobService:
    """Job bookkeeping for one server process."""

    def __init__(self, job_settings: JobSettings, redis_url: str | None, registry: Any, timeout_s: float = 2.0) -> None:
        self.settings = job_settings
        self.root = Path(job_settings.jobs_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.registry = registry
        self.queue: RedisJobQueue | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.runner: ChunkRunner | None = None
        if redis_url:
            client = redis.Redis.from_url(redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
            self.states: JobStates = RedisJobStates(client, job_settings.job_queue, job_settings.job_ttl_s)
            self.queue = RedisJobQueue(client, job_settings.job_queue)
        else:
            self.states = MemoryJobStates()
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gridpfn-job")
            self.runner = ChunkRunner(
                self.states,
                self.root,
                LocalChunks(self.root, lambda *args: self.registry.get(*args)),  # the registry as it is then
                owner="embedded",
                lease_s=job_settings.job_claim_idle_s,
                max_attempts=job_settings.job_max_attempts,
                chunk_pause_s=job_settings.job_chunk_pause_s,
            )
        self.mode = "redis" if redis_url else "embedded"
        if self.executor is not None:  # the workers sweep in Redis mode; embedded, nobody else will
            sweep(self.root, self.states, job_settings.job_ttl_s)

    def files(self, job_id: str) -> JobFiles:
        return JobFiles(self.root, job_id)

    # --- submit -----------------------------------------------------------------------------------
    def prepare_upload(self, job_id: str, upload: Path, filename: str | None, features: list[str]) -> tuple[int, str]:
        """Validate and convert an uploaded file into the job's input; (rows, format). Raises InputError."""
        fmt = inputs.detect_format(upload, filename)
        files = self.files(job_id)
        files.dir.mkdir(parents=True, exist_ok=True)
        rows = inputs.ingest(
            upload, fmt, features, files.input, self.settings.job_chunk_rows, self.settings.job_max_rows
        )
        return rows, fmt

    def prepare_simulated(self, job_id: str, sim: Any, net: Any) -> int:
        """Sample n load vectors on `net` (a gridsim Network) like gridsim.simulate(n, delta, seed) does,
        written chunk by chunk."""
        import gridsim

        features = list(net.feature_names)
        rng = np.random.default_rng(sim.seed)
        step = self.settings.job_chunk_rows

        def chunks() -> Iterator[np.ndarray]:
            for start in range(0, sim.n, step):
                yield gridsim.sample_loads(net, min(step, sim.n - start), sim.delta, rng)

        files = self.files(job_id)
        files.dir.mkdir(parents=True, exist_ok=True)
        return inputs.write_simulated(chunks(), features, files.input, step)

    def prepare_study(self, job_id: str, blocks: Iterator[Any], net: Any) -> int:
        """A study's rows (gridsim.scenarios.Block by block) and their labels as the job's input; rows."""
        files = self.files(job_id)
        files.dir.mkdir(parents=True, exist_ok=True)
        return inputs.write_study(blocks, list(net.feature_names), files.input, self.settings.job_chunk_rows)

    def prepare_hosting(self, job_id: str, loads: np.ndarray, profile: np.ndarray, net: Any) -> int:
        """A hosting-capacity study's load rows and PV profile as the job's input; rows."""
        files = self.files(job_id)
        files.dir.mkdir(parents=True, exist_ok=True)
        return inputs.write_hosting(loads, profile, list(net.feature_names), files.input)

    def enqueue(self, spec: JobSpec, context_bytes: bytes) -> None:
        """Store the context snapshot and the record, then queue the job (all inputs are in place)."""
        self.files(spec.id).context.write_bytes(context_bytes)
        self.states.create(spec)
        if self.queue is not None:
            self.queue.put(spec.id)
        else:
            self.executor.submit(self._run_embedded, spec.id)

    def _run_embedded(self, job_id: str) -> None:
        """Run every active job's chunks (this one's among them) until none is left."""
        assert self.runner is not None
        try:
            self.runner.run_until_idle()
        except Exception:  # the executor would swallow it silently
            log.exception("embedded job runner crashed while running job %s", job_id)

    def spec_for(
        self,
        job_id: str,
        loaded: Any,
        context_id: str,
        net: Any,
        options: Any,
        rows: int,
        source: str,
        *,
        tenant: Tenant,
        labels: tuple[str, ...] = (),
        hours_per_row: float | None = None,
        hosting: HostingJob | None = None,
        chunk_rows: int | None = None,
    ) -> JobSpec:
        """The job's spec, owned by `tenant`; an uploaded network's JSON goes into the job's directory (workers
        rebuild it from there, numbered as `net` is: the spec's `number_offset`)."""
        from gridsim.feeders import number_offset

        if net.source_json:
            self.files(job_id).network.write_text(net.source_json)
        return JobSpec(
            id=job_id,
            model=loaded.name,
            model_version=str(loaded.version),
            context_id=context_id,
            network=net.name,
            number_offset=number_offset(net) if net.source_json else None,
            features=tuple(net.feature_names),
            outputs=tuple(net.output_names),
            quantiles=tuple(float(q) for q in options.quantiles),
            voltage_band=tuple(options.voltage_band) if options.voltage_band else None,
            with_ground_truth=bool(options.with_ground_truth),
            rows=rows,
            chunk_rows=chunk_rows or self.settings.job_chunk_rows,
            source=source,
            created_at=time.time(),
            owner=tenant.tag,
            labels=labels,
            hours_per_row=hours_per_row,
            hosting=hosting,
        )

    # --- inspect / cancel ---------------------------------------------------------------------------
    def status(self, job_id: str, *, tenant: Tenant) -> dict[str, Any] | None:
        """The job's status; None when it does not exist or is another tenant's (the same to the caller)."""
        job = self.states.get(job_id)
        if job is None or not tenant.sees(job["spec"].owner):
            return None
        spec: JobSpec = job["spec"]
        state: JobState = job["state"]
        rate = None
        if job["started_at"] is not None:
            elapsed = (job["finished_at"] or time.time()) - job["started_at"]
            rate = job["rows_done"] / elapsed if elapsed > 0 else None
        errors = [] if not job["error"] else [_error_entry(job)]
        return {
            "id": spec.id,
            "state": state.value,
            "model": spec.model,
            "model_version": spec.model_version,
            "network": spec.network,
            "context_id": spec.context_id,
            "source": spec.source,
            "rows_total": spec.rows,
            "rows_done": job["rows_done"],
            "chunks_total": spec.chunks,
            "chunks_done": job["chunks_done"],
            "rows_per_s": rate,
            "attempts": job["attempts"],
            "quantiles": list(spec.quantiles),
            "voltage_band": list(spec.voltage_band) if spec.voltage_band else None,
            "with_ground_truth": spec.with_ground_truth,
            "labels": list(spec.labels),
            "hours_per_row": spec.hours_per_row,
            "created_at": spec.created_at,
            "started_at": job["started_at"],
            "finished_at": job["finished_at"],
            "errors": errors,
            "result": f"/v1/batch-jobs/{spec.id}/result" if state == JobState.DONE else None,
        }

    def cancel(self, job_id: str) -> bool:
        return self.states.cancel(job_id)

    def delete(self, job_id: str) -> bool:
        existed = self.states.delete(job_id)
        self.files(job_id).remove()
        return existed

    def close(self) -> None:
        """Embedded jobs cannot outlive the server: cancel them so the executor thread stops at a chunk boundary."""
        if self.executor is not None:
            for job_id in self.states.active():
                self.states.cancel(job_id)
            self.executor.shutdown(wait=False, cancel_futures=True)
            if self.runner is not None:  # not runner.close(): the executor's thread may be inside it
                self.runner.chunks.close()
                self.runner.assembler.shutdown(wait=False, cancel_futures=True)
