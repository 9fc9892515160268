"""The chunk kernel: run chunk i of job J and write its part, wherever it runs (a `gridpfn worker`'s
threads, the embedded executor, a Dask worker process). There is no second copy of this logic.

A chunk is: read row group i of the job's input, forward passes + statistics in blocks, optional ground-
truth power flow, then part i written to a temporary name and renamed. The same chunk always gives the
same bytes, so running it twice (a lease that expired under a slow worker, a retaken chunk) is harmless:
either copy is whole and equal. What every chunk of a job needs (the model for the job's network, the
context encoded once, its geometry, the input's power-flow check) is prepared once per process and job and
cached (`PreparedJobs`); network-fit's chunks answer from the voltages the check solved (service.jobs.voltages).
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

from models.errors import ROWS_SHOWN, InputValidationError, RowsRefused, rows_text
from service.jobs import results, voltages
from service.jobs.jobspec import JobSpec
from service.jobs.results import JobFiles

if TYPE_CHECKING:  # the engine imports torch: imported where a chunk runs, so a Dask coordinator does without
    from service.engine.answers import Answer, AnswerSpec, OffContext

log = logging.getLogger(__name__)

BLOCK_ROWS = 256  # a chunk is cut into blocks of at least this many rows when it runs on several threads
Models = Callable[..., Any]  # (name, gridsim Network[, version]) -> LoadedModel; LookupError when none
# What a job's rows are called in its errors (by the job's source): the field of the submission they came from
INPUT_FIELDS = {"csv": "file", "parquet": "file", "simulate": "simulate", "study": "scenarios"}
Stopped = Callable[[], bool]  # whether the job ended meanwhile (the runner's JobRun.ended): asked between blocks


def _never() -> bool:
    return False


class JobStopped(Exception):
    """The job ended (cancelled, deleted, or failed elsewhere) while this process checked its input: the runner
    knows, as it told the check; nothing is recorded."""


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
    """The gridsim Network the job runs on: an upload rebuilt from the job's copy of its JSON, its buses numbered
    as at submit (`spec.number_offset`: a MATPOWER case's own numbers, as its description and `spec.features`)."""
    import gridsim

    if spec.network in gridsim.KNOWN_NETWORKS:
        return gridsim.network(spec.network)
    from gridsim.feeders import from_pandapower_json

    return from_pandapower_json(files.network.read_text(), name=spec.network, number_offset=spec.number_offset)


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


def prepare(spec: JobSpec, jobs_dir: Path, models: Models, parallel: int = 1, stopped: Stopped = _never) -> PreparedJob:
    """Load the model for the job's network, encode its context and check its input (the costly part, once per
    process); `parallel`: the blocks this process's chunks are cut into (`blocks`), which the check solves."""
    from service.engine import sparse
    from service.engine.answers import AnswerSpec
    from service.engine.context_sets import ContextSet

    files = JobFiles(jobs_dir, spec.id)
    network = job_network(spec, files)
    loaded = _model(spec, network, models)
    context = ContextSet.from_bytes(spec.context_id, files.context.read_bytes())
    # a sparse context's typical loads go with it; each row's extrapolation is read from its measured loads
    encoded = sparse.fit(loaded.method, context.x, context.y, context.typical_loads, network)
    job = PreparedJob(
        spec=spec,
        files=files,
        network=network,
        method=loaded.method,
        encoded=encoded,
        geometry=sparse.fitted_geometry(sparse.context_geometry(context.x, context.typical_loads, network), encoded),
        metering=context.metering.with_fit(encoded),
        answer_spec=AnswerSpec(spec.quantiles, spec.voltage_band),
        source=pq.ParquetFile(files.input),
    )
    if spec.hosting is None:  # a hosting-capacity study's rows are checked by its search's first step
        check_power_flow(job, parallel, stopped)
    return job


def input_field(spec: JobSpec) -> str:
    """What the job's rows are called in its errors: the field of the submission they came from."""
    return INPUT_FIELDS.get(spec.source, "input")


def _refusal(
    spec: JobSpec, rows: list[int], refused: RowsRefused, total: int | None = None, job: PreparedJob | None = None
) -> InputValidationError:
    """`refused` with `rows` in the job's own numbering (1-based, as the checks at submit name a file's rows)
    and its field: the job's error reads as POST /v1/predict's 422 does for its queries. A study job's (`job`
    given) names its first row as the study's 422 does (scenario, year, step), then the rows as its result's
    `row` column numbers them (from 0: its rows come from JSON or a table times scenarios, not from one file)."""
    if job is not None and spec.source == "study" and rows:
        where = _study_row(job, rows[0] - 1)
        count = len(rows) if total is None else total
        at = rows_text([r - 1 for r in rows], total=total)
        message = f"{where}: {refused.reason} ({count} row(s) in all; the result's `row` {at})"
        return InputValidationError(input_field(spec), message, refused.expected)
    message = f"rows {rows_text(rows, total=total)}: {refused.reason}"
    return InputValidationError(input_field(spec), message, refused.expected)


def _study_row(job: PreparedJob, row: int) -> str:
    """A study job's input row `row` (0-based) as the study names its rows: scenario, year and step."""
    index, at = divmod(row, job.spec.chunk_rows)
    with job.read_lock:
        labels = job.source.read_row_group(index, columns=["scenario", "year", "timestamp"]).slice(at, 1).to_pylist()
    label = labels[0]
    stamp = "" if label["timestamp"] is None else f", step {label['timestamp']}"
    return f"scenario {label['scenario']!r}, year {label['year']}{stamp}"


def _loads(job: PreparedJob, index: int, whole: bool = True) -> tuple[pa.Table, np.ndarray]:
    """Row group `index` of the job's input (`whole`: every column, else the loads alone) and its (m, d) loads."""
    with job.read_lock:
        inputs = job.source.read_row_group(index, columns=None if whole else list(job.spec.features))
    return inputs, np.column_stack([inputs.column(name).to_numpy() for name in job.spec.features])


def blocks(x: np.ndarray, parallel: int) -> list[np.ndarray]:
    """A chunk's rows as it answers them, `parallel` blocks side by side (each at least BLOCK_ROWS rows); the
    power-flow check solves the same blocks, so network-fit's answers from its voltages are bit for bit the same."""
    return np.array_split(x, min(parallel, max(1, len(x) // BLOCK_ROWS)))


def check_power_flow(job: PreparedJob, parallel: int = 1, stopped: Stopped = _never) -> None:
    """Before the job's first chunk: the rows where its model would ask the network model's power flow (every
    row for network-fit, those beyond the context's reach for a guarded model: Method.refuse_unsolved) all
    have one, or the whole job is refused (InputValidationError naming the first of them in the job's rows,
    and how many there are) before any answer is computed, instead of failing at the chunk that holds one.
    A chunk's rows at a time, in its blocks, so memory stays bounded by a chunk and a cancelled job stops it
    within a block (JobStopped once `stopped`). A chunk whose part exists was checked by whoever answered it."""
    spec = job.spec
    shown: list[int] = []
    total, refused = 0, None
    for index in range(spec.chunks):  # row group i is chunk i
        if job.files.part(index).exists():
            continue
        try:
            _check_chunk(job, index, parallel, stopped)
        except RowsRefused as exc:
            first = index * spec.chunk_rows + 1
            shown += [first + r for r in exc.rows[: ROWS_SHOWN - len(shown)]]
            total, refused = total + len(exc.rows), exc
    if refused is not None:
        job.files.remove_parts()  # the voltages left for chunks that will not run
        raise _refusal(spec, shown, refused, total, job)


def _check_chunk(job: PreparedJob, index: int, parallel: int, stopped: Stopped) -> None:
    """Chunk `index`'s rows block by block: RowsRefused naming (in the chunk's rows) every one without a power
    flow, else network-fit's voltages at them left for the chunk (service.jobs.voltages)."""
    from service.engine.answers import OffContext

    _, x = _loads(job, index, whole=False)
    solved: list[np.ndarray | None] = []
    rows: list[int] = []
    refused, offset = None, 0
    for block in blocks(x, parallel):
        if stopped():
            log.info(
                "job %s: power-flow check stopped at chunk %d of %d: the job ended", job.spec.id, index, job.spec.chunks
            )
            raise JobStopped(job.spec.id)
        method, kept = voltages.solving_once(job.method, block)
        try:
            method.refuse_unsolved(job.encoded, block, OffContext.of(job.geometry, block).extrapolation)
        except RowsRefused as exc:
            rows, refused = rows + [offset + r for r in exc.rows], exc
        solved.append(None if kept is None else kept.v)
        offset += len(block)
    if refused is not None:
        raise RowsRefused(refused.field, rows, refused.reason, refused.expected)
    voltages.save(job.files, index, solved)


def _answer(
    job: PreparedJob, block: np.ndarray, first_row: int, v: np.ndarray | None = None
) -> tuple[Answer, OffContext]:
    """The block's answer; `v`: network-fit's voltages at its rows, as the power-flow check solved them."""
    from service.engine.answers import placed_answer

    method = job.method if v is None else voltages.solving_once(job.method, block, v)[0]
    try:
        return placed_answer(method, job.encoded, job.geometry, block, job.answer_spec)
    except RowsRefused as exc:  # check_power_flow passed, so not expected; named in the job's rows all the same
        raise _refusal(job.spec, [first_row + r + 1 for r in exc.rows], exc, job=job) from None


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
    inputs, x = _loads(job, index)  # x: the loads, not a study's labels
    t1 = time.perf_counter()
    cut = blocks(x, parallel)
    firsts = (index * spec.chunk_rows + np.cumsum([0] + [len(b) for b in cut[:-1]])).tolist()
    solved = voltages.load(job.files, index, cut)
    if pool is None:
        answered = [_answer(job, b, first, v) for b, first, v in zip(cut, firsts, solved)]
    else:
        answered = list(pool.map(_answer, [job] * len(cut), cut, firsts, solved))
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
    try:
        result = hosting_capacity(job.method, job.encoded, study)
    except RowsRefused as exc:  # rows without a power flow without new PV (checked at submit up to a bound)
        file = hosting.rows_field == "file"  # a profile table's rows from 1, as its 422s name them; JSON's from 0
        rows = [r + 1 for r in exc.rows] if file else exc.rows
        raise InputValidationError(hosting.rows_field, f"rows {rows_text(rows)}: {exc.reason}", exc.expected) from None
    t2 = time.perf_counter()
    table = results.hosting_table(spec, first, result)
    return table, {"read": t1 - t0, "predict": t2 - t1, "truth": 0.0, "write": time.perf_counter() - t2}


def run_chunk(job: PreparedJob, index: int, pool: Executor | None = None, parallel: int = 1) -> ChunkResult:
    """The kernel: compute chunk `index` and write its part (write-then-rename: idempotent)."""
    table, times = compute_chunk(job, index, pool, parallel)
    t0 = time.perf_counter()
    results.write_part(job.files, index, table)
    voltages.discard(job.files, index)
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
        # per job: its lock, and once prepared the PreparedJob, or the refusal of its input, or JobStopped
        self._jobs: OrderedDict[str, tuple[threading.Lock, list[PreparedJob | Exception]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, spec: JobSpec, jobs_dir: Path, models: Models, parallel: int = 1, stopped: Stopped = _never
    ) -> tuple[PreparedJob, float]:
        """The prepared job and the seconds this call spent preparing it (0 when it was cached); `parallel` and
        `stopped` as `prepare` takes them."""
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
                prepared = slot[0]
                if isinstance(prepared, Exception):  # refused or stopped here: the job's other chunks hear the same
                    raise prepared
                return prepared, 0.0
            t0 = time.perf_counter()
            try:
                job = prepare(spec, jobs_dir, models, parallel, stopped)
            except (InputValidationError, JobStopped) as exc:  # the same input gives the same refusal; ended is ended
                slot.append(exc)
                raise
            slot.append(job)
            return job, time.perf_counter() - t0

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)
