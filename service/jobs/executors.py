"""Where a runner's chunks run: `LocalChunks`, threads of this process (a `gridpfn worker`, the embedded
executor), or `service.jobs.dask_chunks.DaskChunks`, the processes of a Dask cluster. Both run the one
kernel, `service.jobs.chunks.run_chunk`; the runner only claims chunks, hands them here and records what
comes back, so the claiming, progress and assembly logic does not care where a chunk ran.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from service.jobs.chunks import ChunkResult, Models, PreparedJobs, Stopped, run_chunk
from service.jobs.jobspec import JobSpec


class ChunkExecutor(Protocol):
    """Runs chunk kernels; `streams`: results carry their tables, in claim order if the runner records them so
    (the job's appender then appends them from memory instead of re-reading their parts)."""

    streams: bool

    def capacity(self) -> int:
        """How many chunks to keep in flight: enough that none of its workers waits for the next one."""
        ...

    def submit(self, spec: JobSpec, index: int, stopped: Stopped) -> Future[ChunkResult]:
        """Run chunk `index`; `stopped`: whether the runner stopped working on the job meanwhile (JobRun.ended),
        which the job's power-flow check asks between its blocks."""
        ...

    def forget(self, job_id: str) -> None:
        """The job ended: drop what was prepared for it."""
        ...

    def close(self) -> None: ...


class LocalChunks:
    """Two chunks in flight on threads of this process, so one chunk's part is written while the next one's
    forward passes run; the forward passes of both run on `parallel` threads only (one torch thread each in
    `gridpfn worker`), never more. Memory stays bounded by two chunks whatever the job's size."""

    streams = True

    def __init__(self, jobs_dir: Path, models: Models, parallel: int = 1, in_flight: int = 2) -> None:
        self.jobs_dir, self.models, self.parallel, self.in_flight = Path(jobs_dir), models, max(1, parallel), in_flight
        self.chunk_pool = ThreadPoolExecutor(in_flight, thread_name_prefix="gridpfn-chunk")
        self.block_pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="gridpfn-block")
        self.prepared = PreparedJobs()

    def capacity(self) -> int:
        return self.in_flight

    def submit(self, spec: JobSpec, index: int, stopped: Stopped) -> Future[ChunkResult]:
        return self.chunk_pool.submit(self._run, spec, index, stopped)

    def _run(self, spec: JobSpec, index: int, stopped: Stopped) -> ChunkResult:
        job, encode_s = self.prepared.get(spec, self.jobs_dir, self.models, self.parallel, stopped)
        result = run_chunk(job, index, self.block_pool, self.parallel)
        result.times["encode"] = encode_s
        return result

    def forget(self, job_id: str) -> None:
        self.prepared.forget(job_id)

    def close(self) -> None:
        self.chunk_pool.shutdown(wait=False, cancel_futures=True)
        self.block_pool.shutdown(wait=False, cancel_futures=True)
