"""Run one job: encode the context once, then chunk after chunk from the last one recorded.

Shared by `gridpfn worker` and the embedded executor. A chunk is: read row group i of the input,
one forward pass + statistics, optional ground-truth power flow, write part i, record i+1 as done.
The write and record of chunk i run in a writer thread beside chunk i+1's forward pass, in order.
The job's network is a built-in's name or an upload's id, rebuilt from the JSON its directory holds
(the store's copy may have expired by the time a worker runs it); it picks the model's checkpoint
for that network and is what the ground truth is solved on.
Recording fails when the job was cancelled or taken over; the runner then stops without touching
the job again. Memory is bounded by two chunks whatever the file size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from models.errors import InputValidationError, RowsRefused, rows_text
from service.engine import sparse
from service.engine.answers import Answer, AnswerSpec, OffContext, placed_answer
from service.engine.context_sets import ContextSet
from service.jobs import results
from service.jobs.jobspec import JobSpec, JobState
from service.jobs.results import JobFiles
from service.jobs.states import JobStates

log = logging.getLogger(__name__)


@dataclass
class ChunkTimes:
    """Seconds per stage, summed over a run (logged; the bench prints them)."""

    read: float = 0.0
    predict: float = 0.0  # forward passes and statistics
    truth: float = 0.0
    write: float = 0.0  # in the writer thread, overlapping the next chunk's forward pass
    encode: float = 0.0
    assemble: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        parts = {k: v for k, v in vars(self).items() if k != "extra"}
        return " ".join(f"{k}={v:.2f}s" for k, v in parts.items())


@dataclass
class RunContext:
    """What a runner needs from its host process."""

    states: JobStates
    jobs_dir: Any
    models: Callable[..., Any]  # (name, gridsim Network[, version]) -> LoadedModel; LookupError when none
    owner: str
    max_attempts: int = 5
    chunk_pause_s: float = 0.0
    heartbeat: Callable[[], None] = lambda: None
    should_stop: Callable[[], bool] = lambda: False  # shutdown requested: leave at the next chunk boundary
    parallel: int = 1  # blocks of a chunk run side by side (each on one torch thread in `gridpfn worker`)
    times: ChunkTimes = field(default_factory=ChunkTimes)


def _stop_reason(ctx: RunContext, job_id: str) -> str:
    job = ctx.states.get(job_id)
    return "deleted" if job is None else job["state"].value


def run_job(ctx: RunContext, job_id: str) -> JobState | None:
    """Process `job_id` to a final state; returns it (None when another process owns the outcome)."""
    done = ctx.states.claim(job_id, ctx.owner, ctx.max_attempts)
    if done is None:
        log.info("job %s is not active (%s); nothing to do", job_id, _stop_reason(ctx, job_id))
        return None
    spec: JobSpec = ctx.states.get(job_id)["spec"]
    files = JobFiles(ctx.jobs_dir, job_id)
    log.info(
        "job %s: %s rows in %d chunks, starting at chunk %d (owner %s)", job_id, spec.rows, spec.chunks, done, ctx.owner
    )
    streamed = results.StreamedResult(files) if done == 0 else None
    try:
        finished = _run_chunks(ctx, spec, files, done, streamed)
    except Exception as exc:
        if streamed is not None:
            streamed.abort()
        log.exception("job %s failed", job_id)
        ctx.states.finish(job_id, ctx.owner, JobState.FAILED, f"{type(exc).__name__}: {exc}")
        return JobState.FAILED
    if not finished:
        if streamed is not None:
            streamed.abort()
        reason = _stop_reason(ctx, job_id)
        log.info("job %s stopped at a chunk boundary: %s", job_id, reason)
        if reason in ("cancelled", "deleted"):
            files.remove_parts()
        return None
    t0 = time.perf_counter()
    if streamed is None or not streamed.commit(spec):
        results.assemble(files, spec)
    ctx.times.assemble += time.perf_counter() - t0
    if not ctx.states.finish(job_id, ctx.owner, JobState.DONE):
        return None
    log.info("job %s done: %s", job_id, ctx.times.line())
    return JobState.DONE


def _run_chunks(
    ctx: RunContext, spec: JobSpec, files: JobFiles, start: int, streamed: results.StreamedResult | None = None
) -> bool:
    """False when the job was cancelled or taken over meanwhile."""
    times = ctx.times
    if start >= spec.chunks:
        return True
    net = job_network(spec, files)
    try:  # the version the job was submitted with (pinned or then served), even after a newer one is published
        loaded = ctx.models(spec.model, net, spec.model_version)
    except LookupError:
        try:
            loaded = ctx.models(spec.model, net)
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
    t0 = time.perf_counter()
    context = ContextSet.from_bytes(spec.context_id, files.context.read_bytes())
    # once per job (per process), reused by every chunk; a sparse context's typical loads go with it
    encoded = sparse.fit(loaded.method, context.x, context.y, context.typical_loads)
    geometry = sparse.geometry(context.x)  # each row's extrapolation measure is read from it (its measured loads)
    times.encode += time.perf_counter() - t0
    ctx.heartbeat()
    answer_spec = AnswerSpec(spec.quantiles, spec.voltage_band)
    source = pq.ParquetFile(files.input)

    def block_answer(block: np.ndarray, first_row: int) -> tuple[Answer, OffContext]:
        try:
            return placed_answer(loaded.method, encoded, geometry, block, answer_spec)
        except RowsRefused as exc:  # named in the file's own rows (1-based), not the block's
            rows = [first_row + r + 1 for r in exc.rows]
            raise InputValidationError("input", f"rows {rows_text(rows)}: {exc.reason}", exc.expected) from None

    def finish(index: int, inputs: Any, answer: Answer, placed: OffContext, truth: Any) -> bool:
        """Write chunk `index` and record it; runs beside the next chunk's forward pass."""
        t0 = time.perf_counter()
        table = results.chunk_table(spec, inputs, answer, placed, truth, context.metering.with_fit(encoded))
        results.write_part(files, index, table)
        if streamed is not None:
            streamed.append(index, table)
        times.write += time.perf_counter() - t0
        return ctx.states.record_chunk(spec.id, ctx.owner, index + 1, min(spec.rows, (index + 1) * spec.chunk_rows))

    with (
        ThreadPoolExecutor(max(1, ctx.parallel), thread_name_prefix="gridpfn-chunk") as pool,
        ThreadPoolExecutor(1, thread_name_prefix="gridpfn-write") as writer,
    ):
        pending = None  # the previous chunk's write + record: at most one chunk is in flight
        for index in range(start, spec.chunks):
            if pending is not None and ctx.should_stop():  # shutdown: leave at a chunk boundary
                pending.result()
                return False
            t0 = time.perf_counter()
            inputs = source.read_row_group(index)
            x = np.column_stack([inputs.column(j).to_numpy() for j in range(inputs.num_columns)])
            t1 = time.perf_counter()
            blocks = np.array_split(x, min(ctx.parallel, max(1, len(x) // 256)))
            firsts = index * spec.chunk_rows + np.cumsum([0] + [len(b) for b in blocks[:-1]])
            answered = list(pool.map(block_answer, blocks, firsts.tolist()))
            answer = Answer.concat([a for a, _ in answered])
            placed = OffContext.concat([p for _, p in answered])
            t2 = time.perf_counter()
            if not answer.all_finite():
                raise RuntimeError(
                    f"model produced NaN or infinity in chunk {index} "
                    f"(rows {index * spec.chunk_rows + 1}..{index * spec.chunk_rows + len(x)})"
                )
            truth = _ground_truth(x, net) if spec.with_ground_truth else None
            times.read += t1 - t0
            times.predict += t2 - t1
            times.truth += time.perf_counter() - t2
            if pending is not None and not pending.result():  # cancelled or taken over meanwhile
                return False
            ctx.heartbeat()
            pending = writer.submit(finish, index, inputs, answer, placed, truth)
            if ctx.chunk_pause_s:
                time.sleep(ctx.chunk_pause_s)
        return pending.result()


def job_network(spec: JobSpec, files: JobFiles) -> Any:
    """The gridsim Network the job runs on."""
    import gridsim

    if spec.network in gridsim.KNOWN_NETWORKS:
        return gridsim.network(spec.network)
    from gridsim.feeders import from_pandapower_json

    return from_pandapower_json(files.network.read_text(), name=spec.network)


def _ground_truth(x: np.ndarray, network: Any) -> tuple[np.ndarray, np.ndarray]:
    import gridsim

    result = gridsim.solve(x, network=network)
    return np.asarray(result.vm_pu), np.asarray(result.converged, dtype=bool)
