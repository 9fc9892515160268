"""Chunks on a Dask cluster: how one study runs beyond one host (the `cluster` extra: dask[distributed]).

A `gridpfn worker` with GRIDPFN_DASK_SCHEDULER set claims chunks as every worker does (leases in Redis, so
it shares a job with plain workers) and hands each to the cluster as `run_on_dask_worker`. That task runs
the one kernel, service.jobs.chunks.run_chunk, in a Dask worker process, which loads the model registry
once (a cache per process: any `dask worker tcp://...` with this package installed serves, no plugin to
register) and prepares each job once. The part goes to the shared jobs directory; only the row count,
timings and the Dask worker's address travel back. The coordinating worker records each chunk, renews
the leases of those in flight and assembles the result; if it dies, its leases lapse and another worker
retakes the chunks (a Dask task still running then writes the same part again: harmless).

Why Dask and not Ray (measured 2026-11-26 on this project's 2-core host, Python 3.11, numpy only
beside): installed size 44 MB (dask + distributed 2026.8.0 and their dependencies) against 259 MB (ray
2.60.0); a local cluster of 2 worker processes up in 1.0-1.4 s against 6.2-6.7 s; a task round trip of
11 ms against 2 ms. A chunk (16,384 rows) takes about 0.8 s on one thread there, so Ray's faster round
trip would save about 1 %, while Dask starts five times faster (what tests and short studies pay) and is six
times smaller (what every image pays). Figures: bench/results/scale-out.md.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

from service.jobs.chunks import ChunkResult, Models, PreparedJobs, Stopped, run_chunk
from service.jobs.jobspec import JobSpec

log = logging.getLogger(__name__)

CAPACITY_EVERY_S = 5.0  # how often the cluster's thread count is asked again (workers come and go)

# --- in the Dask worker process ----------------------------------------------------------------------
_registries: dict[str, Any] = {}
_registry_lock = threading.Lock()
_prepared = PreparedJobs()


def _models(model_dir: str) -> Models:
    """This process's registry for `model_dir`, loaded on its first chunk. The process's parallelism is the
    Dask worker's threads, one chunk each: torch and BLAS get one thread per chunk, as in `gridpfn worker`."""
    with _registry_lock:
        registry = _registries.get(model_dir)
        if registry is None:
            import torch

            from service.engine.warmup import one_blas_thread, registry_from
            from service.settings import Settings

            torch.set_num_threads(1)
            one_blas_thread()
            registry = _registries[model_dir] = registry_from(Settings(model_dir=Path(model_dir)))
            log.info("dask worker: models %s from %s", registry.names(), model_dir)
        return registry.get  # type: ignore[no-any-return]


def preload(model_dir: str | None = None) -> None:
    """Load the models before the first chunk asks (default: GRIDPFN_MODEL_DIR, as the coordinator passes
    its own model directory with every chunk, the two must name the same path)."""
    from service.settings import Settings

    _models(model_dir or str(Settings().model_dir))


def dask_setup(worker: Any) -> None:
    """Dask's preload hook: `dask worker tcp://scheduler:8786 --preload service.jobs.dask_chunks`."""
    preload()


def _here() -> str | None:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:  # not inside a Dask worker (a task run in the client's process)
        return None


def run_on_dask_worker(jobs_dir: str, model_dir: str, spec_json: str, index: int) -> ChunkResult:
    """The task: chunk `index` of the job, by the same kernel as `gridpfn worker` runs."""
    spec = JobSpec.model_validate_json(spec_json)
    job, encode_s = _prepared.get(spec, Path(jobs_dir), _models(model_dir))
    result = run_chunk(job, index)
    result.table = None  # the part is on the shared disk; the table stays here
    result.times["encode"] = encode_s
    result.ran_by = _here()
    return result


# --- in the coordinating `gridpfn worker` -------------------------------------------------------------
class DaskChunks:
    """A ChunkExecutor whose chunks run on a Dask cluster; keeps `per_thread` chunks per cluster thread in flight."""

    streams = False

    def __init__(self, client: Any, jobs_dir: Path, model_dir: Path, per_thread: int = 2) -> None:
        self.client, self.jobs_dir, self.model_dir, self.per_thread = (
            client,
            Path(jobs_dir),
            Path(model_dir),
            per_thread,
        )
        self._tasks: dict[Future[ChunkResult], Any] = {}  # held so that Dask keeps the task
        self._lock = threading.Lock()
        self._threads, self._asked = 0, -CAPACITY_EVERY_S

    @classmethod
    def connect(cls, address: str, jobs_dir: Path, model_dir: Path, per_thread: int = 2) -> DaskChunks:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ValueError(
                "GRIDPFN_DASK_SCHEDULER is set but dask.distributed is not installed: pip install 'gridpfn[cluster]'"
            ) from exc
        try:
            client = Client(address, set_as_default=False, timeout=30)
        except OSError as exc:
            raise ValueError(f"GRIDPFN_DASK_SCHEDULER: no Dask scheduler answers at {address}: {exc}") from exc
        chunks = cls(client, jobs_dir, model_dir, per_thread)
        log.info("dask scheduler %s: %d worker threads", address, chunks.capacity() // per_thread)
        return chunks

    def capacity(self) -> int:
        """Zero while the scheduler does not answer: no chunk is claimed for a cluster that cannot run it."""
        if time.monotonic() - self._asked >= CAPACITY_EVERY_S:
            try:
                self._threads = sum(self.client.nthreads(callback_timeout=CAPACITY_EVERY_S).values())
            except (TimeoutError, OSError) as exc:
                log.warning("dask scheduler does not answer (%s: %s); claiming no chunks", type(exc).__name__, exc)
                self._threads = 0
            self._asked = time.monotonic()
        return self._threads * self.per_thread

    def submit(self, spec: JobSpec, index: int, stopped: Stopped) -> Future[ChunkResult]:
        """`stopped` stays here (a Dask worker cannot ask it): a cluster's power-flow check of a job cancelled
        meanwhile runs to its end, as a chunk does."""
        out: Future[ChunkResult] = Future()
        task = self.client.submit(
            run_on_dask_worker,
            str(self.jobs_dir),
            str(self.model_dir),
            spec.model_dump_json(),
            index,
            key=f"gridpfn-chunk-{spec.id}-{index}-{uuid.uuid4().hex[:8]}",
            pure=False,
        )
        with self._lock:
            self._tasks[out] = task
        out.add_done_callback(self._dropped)
        task.add_done_callback(lambda finished: self._relay(finished, out))
        return out

    def _relay(self, task: Any, out: Future[ChunkResult]) -> None:
        """Runs on Dask's callback thread: the task's outcome onto the runner's future."""
        try:
            if task.status == "finished":
                out.set_result(task.result())
            elif task.status == "error":
                out.set_exception(task.exception())
            else:  # cancelled: the scheduler dropped it, or the runner cancelled it
                out.cancel()
        except InvalidStateError:  # the runner cancelled it first
            pass

    def _dropped(self, out: Future[ChunkResult]) -> None:
        with self._lock:
            task = self._tasks.pop(out, None)
        if task is not None and out.cancelled():
            task.cancel()

    def forget(self, job_id: str) -> None:
        """Nothing here: the Dask workers keep their few most recent jobs prepared."""

    def close(self) -> None:
        self.client.close()
