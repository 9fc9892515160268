"""The chunk kernel: run chunk i of job J and write its part, wherever it runs (a `gridpfn worker`'s
threads, the embedded executor, a Dask worker process). There is no second copy of this logic.

A chunk is: read row group i of the job's input, forward passes + statistics in blocks, optional ground-
truth power flow, then part i written to a temporary name and renamed. The same chunk always gives the
same bytes, so running it twice (a lease that expired under a slow worker, a retaken chunk) is harmless:
either copy is whole and equal. What every chunk of a job needs (the model for the job's network, the
context encoded once, its geometry) is prepared once per process and job and cached (`PreparedJobs`).
The job's network is a built-in's name or an upload's id, rebuilt from the JSON its directory holds (the
store's copy may have expired by the time a worker runs it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from service.jobs import results
from service.jobs.jobspec import JobSpec
from service.jobs.results import JobFiles

if TYPE_CHECKING:  # the engine imports torch: imported where a chunk runs, so a Dask coordinator does without
    from service.engine.answers import Answer, AnswerSpec, OffContext

log = logging.getLogger(__name__)

BLOCK_ROWS = 256  # a chunk is cut into blocks of at least this many rows when it runs on several threads
Models = Callable[..., Any]  # (name, gridsim Network[, version]) -> LoadedModel; LookupError when none


@dataclass
class ChunkResult:
    """What running one chunk gives back: its rows, its table (when run in this process), seconds per stage,
    and which worker ran it (a Dask worker's address; None: the caller itself)."""

    rows: int
    table: pa.Table | None = None
    times: dict[str, float] = field(default_factory=dict)
    ran_by: str | None = None


@dataclass
class PreparedJob:
    """What every chunk of one job needs, built once per process."""

    spec: JobSpec
    files: JobFiles
    network: Any
    method: Any
    encoded: Any
    geometry: Any
    metering: Any  # the context's per-bus reading flags, as the result's metadata writes them
    answer_spec: AnswerSpec
    source: pq.ParquetFile
    read_lock: threading.Lock = field(default_factory=threading.Lock)  # a ParquetFile is not for two threads


def job_network(spec: JobSpec, files: JobFiles) -> Any:
    """The gridsim Network the job runs on."""
    import gridsim

    if spec.network in gridsim.KNOWN_NETWORKS:
        return gridsim.network(spec.network)
    from gridsim.feeders import from_pandapower_json

    return from_pandapower_json(files.network.read_text(), name=spec.network)


def _model(spec: JobSpec, network: Any, models: Models) -> Any:
    try:  # the version the job was submitted with (pinned or then served), even after a newer one is published
        loaded = models(spec.model, network, spec.model_version)
    except LookupError:
        try:
            loaded = models(spec.model, network)
        except LookupError as exc:
            raise RuntimeError(
                f"model {spec.model!r} for network {spec.network} is not loaded in this worker: {exc}"
            ) from None
    if str(loaded.version) != spec.model_version:
        log.warning(
            "job %s was submitted for %s %s, this worker serves %s",
            spec.id,
            spec.model,
            spec.model_version,
            loaded.version,
        )
    return loaded


def prepare(spec: JobSpec, jobs_dir: Path, models: Models) -> PreparedJob:
    """Load the model for the job's network and encode its context (the costly part, once per process)."""
    from service.engine import sparse
    from service.engine.answers import AnswerSpec
    from service.engine.context_sets import ContextSet

    files = JobFiles(jobs_dir, spec.id)
    network = job_network(spec, files)
    loaded = _model(spec, network, models)
    context = ContextSet.from_bytes(spec.context_id, files.context.read_bytes())
    # a sparse context's typical loads go with it; each row's extrapolation is read from its measured loads
    encoded = sparse.fit(loaded.method, context.x, context.y, context.typical_loads)
    return PreparedJob(
        spec=spec,
        files=files,
        network=network,
        method=loaded.method,
        encoded=encoded,
        geometry=sparse.geometry(context.x),
        metering=context.metering.with_fit(encoded),
        answer_spec=AnswerSpec(spec.quantiles, spec.voltage_band),
        source=pq.ParquetFile(files.input),
    )


def _answer(job: PreparedJob, block: np.ndarray, first_row: int) -> tuple[Answer, OffContext]:
    from models.errors import InputValidationError, RowsRefused, rows_text
    from service.engine.answers import placed_answer

    try:
        return placed_answer(job.method, job.encoded, job.geometry, block, job.answer_spec)
    except RowsRefused as exc:  # named in the file's own rows (1-based), not the block's
        rows = [first_row + r + 1 for r in exc.rows]
        raise InputValidationError("input", f"rows {rows_text(rows)}: {exc.reason}", exc.expected) from None


def compute_chunk(
    job: PreparedJob, index: int, pool: Executor | None = None, parallel: int = 1
) -> tuple[pa.Table, dict[str, float]]:
    """Chunk `index`'s result table (input columns, statistics, per-row extrapolation) and seconds per stage;
    its `parallel` blocks run side by side on `pool` (whose size bounds the forward passes at once), else here."""
    from service.engine.answers import Answer, OffContext

    spec = job.spec
    if spec.hosting is not None:
        return _hosting_chunk(job, index)
    t0 = time.perf_counter()
    with job.read_lock:
        inputs = job.source.read_row_group(index)
    x = np.column_stack([inputs.column(name).to_numpy() for name in spec.features])  # not a study's labels
    t1 = time.perf_counter()
    blocks = np.array_split(x, min(parallel, max(1, len(x) // BLOCK_ROWS)))
    firsts = (index * spec.chunk_rows + np.cumsum([0] + [len(b) for b in blocks[:-1]])).tolist()
    if pool is None:
        answered = [_answer(job, b, first) for b, first in zip(blocks, firsts)]
    else:
        answered = list(pool.map(_answer, [job] * len(blocks), blocks, firsts))
    answer = Answer.concat([a for a, _ in answered])
    placed = OffContext.concat([p for _, p in answered])
    t2 = time.perf_counter()
    if not answer.all_finite():
        first = index * spec.chunk_rows
        raise RuntimeError(f"model produced NaN or infinity in chunk {index} (rows {first + 1}..{first + len(x)})")
    truth = _ground_truth(x, job.network) if spec.with_ground_truth else None
    t3 = time.perf_counter()
    table = results.chunk_table(spec, inputs, answer, placed, truth, job.metering)
    return table, {"read": t1 - t0, "predict": t2 - t1, "truth": t3 - t2, "write": time.perf_counter() - t3}


def _hosting_chunk(job: PreparedJob, index: int) -> tuple[pa.Table, dict[str, float]]:
    """Chunk `index` of a hosting-capacity job: its group of candidate buses searched over every load row."""
    from models.hosting_capacity import HostingCapacityStudy, hosting_capacity

    spec, hosting = job.spec, job.spec.hosting
    assert hosting is not None
    t0 = time.perf_counter()
    with job.read_lock:
        rows = job.source.read()
    loads = np.column_stack([rows.column(name).to_numpy() for name in spec.features])
    t1 = time.perf_counter()
    first = index * spec.chunk_rows
    study = HostingCapacityStudy(
        loads=loads,
        profile=rows.column("pv_profile").to_numpy(),
        candidates=np.asarray(hosting.positions[first : first + spec.chunk_size(index)]),
        upper_pu=hosting.upper_pu,
        alpha=hosting.alpha,
        max_mw=hosting.max_mw,
        tolerance_mw=0.0,
        curve_points=hosting.curve_points,
    )
    result = hosting_capacity(job.method, job.encoded, study)
    t2 = time.perf_counter()
    table = results.hosting_table(spec, first, result)
    return table, {"read": t1 - t0, "predict": t2 - t1, "truth": 0.0, "write": time.perf_counter() - t2}


def run_chunk(job: PreparedJob, index: int, pool: Executor | None = None, parallel: int = 1) -> ChunkResult:
    """The kernel: compute chunk `index` and write its part (write-then-rename: idempotent)."""
    table, times = compute_chunk(job, index, pool, parallel)
    t0 = time.perf_counter()
    results.write_part(job.files, index, table)
    times["write"] += time.perf_counter() - t0
    return ChunkResult(table.num_rows, table, times)


def _ground_truth(x: np.ndarray, network: Any) -> tuple[np.ndarray, np.ndarray]:
    import gridsim

    result = gridsim.solve(x, network=network)
    return np.asarray(result.vm_pu), np.asarray(result.converged, dtype=bool)


class PreparedJobs:
    """This process's prepared jobs, the most recent `size` of them; each prepared once even when several
    threads ask for it at the same time (the others wait for the first)."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._jobs: OrderedDict[str, tuple[threading.Lock, list[PreparedJob]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, spec: JobSpec, jobs_dir: Path, models: Models) -> tuple[PreparedJob, float]:
        """The prepared job and the seconds this call spent preparing it (0 when it was cached)."""
        with self._lock:
            entry = self._jobs.get(spec.id)
            if entry is None:
                entry = self._jobs[spec.id] = (threading.Lock(), [])
                while len(self._jobs) > self.size:
                    self._jobs.popitem(last=False)
            self._jobs.move_to_end(spec.id)
        lock, slot = entry
        with lock:
            if slot:
                return slot[0], 0.0
            t0 = time.perf_counter()
            slot.append(prepare(spec, jobs_dir, models))
            return slot[0], time.perf_counter() - t0

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)
