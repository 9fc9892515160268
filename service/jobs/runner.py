"""The chunk loop of one process: claim chunks of the active jobs (the oldest job first), run them on a
ChunkExecutor (this process's threads, or a Dask cluster), record each one done, and assemble a job's
result when this process finished its last chunk. Any number of such loops, in any number of processes
and hosts, work on one job at once; what keeps them apart is the chunk leases in JobStates.

Shared by `gridpfn worker` and the embedded executor. The loop renews the leases it holds between
completions (it never waits longer than a third of a lease) and writes the result on a thread of its own,
so a slow chunk or a big result does not let its lease lapse. A completion refused because the job was
cancelled or deleted makes the loop remove the job's parts (every worker does so after its last write, so
none is left behind) and stop working on it.

The process that takes a job's chunk 0 first is its appender: on its assembler thread it appends the parts
to result.streaming in order as they appear (its own chunks from memory where the executor hands the tables
back, the others' from their part files), so that when the last chunk is done only the rest is appended
and the file renamed, instead of a pass over the whole result after the last chunk. The last chunk's lease
of the assembly goes to the appender; if it is gone, whoever holds or retakes that lease assembles from the
parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from models.errors import InputValidationError
from service.jobs import results
from service.jobs.chunks import ChunkResult, JobStopped
from service.jobs.chunks import job_network as job_network  # re-exported: the routers import it from here
from service.jobs.executors import ChunkExecutor
from service.jobs.jobspec import JobSpec
from service.jobs.results import JobFiles
from service.jobs.states import ASSEMBLY, Claim, JobStates

log = logging.getLogger(__name__)

APPEND_POLL_S = 0.2  # how soon an appender with nothing in flight looks again for parts and its assembly
STAGES = ("read", "predict", "truth", "write", "encode", "assemble")


@dataclass
class ChunkTimes:
    """Seconds per stage in this process, summed over a job's chunks (logged when it is done; the benches print them)."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    def add(self, times: dict[str, float]) -> None:
        for stage, value in times.items():
            self.seconds[stage] = self.seconds.get(stage, 0.0) + value

    def line(self) -> str:
        return " ".join(f"{k}={v:.2f}s" for k, v in self.seconds.items())


@dataclass
class JobRun:
    """What this process knows of one job it works on."""

    spec: JobSpec
    files: JobFiles
    times: ChunkTimes = field(default_factory=ChunkTimes)
    stream: results.StreamedResult | None = None  # this process is the job's appender (used on the assembler thread)
    pump: Future[None] | None = None  # the latest append pass queued on the assembler thread
    assembling: bool = False
    chunks_run: int = 0
    ended: bool = False  # this process stopped working on it (set on the runner's thread, read by its chunks')

    @property
    def appending(self) -> bool:
        return self.stream is not None and not self.ended and not self.assembling

    def stopped(self) -> bool:
        """What a chunk of the job asks between the blocks of the job's power-flow check."""
        return self.ended


class ChunkRunner:
    """Claims, runs and records chunks for one owner (a worker's name); not thread-safe: one loop calls it."""

    def __init__(
        self,
        states: JobStates,
        jobs_dir: Path,
        chunks: ChunkExecutor,
        owner: str,
        lease_s: float,
        max_attempts: int = 5,
        chunk_pause_s: float = 0.0,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.states, self.jobs_dir, self.chunks, self.owner = states, Path(jobs_dir), chunks, owner
        self.lease_s, self.max_attempts, self.chunk_pause_s = lease_s, max_attempts, chunk_pause_s
        self.should_stop = should_stop
        self.in_flight: dict[Future[ChunkResult | bool], Claim] = {}
        self.runs: dict[str, JobRun] = {}
        self.assembler = ThreadPoolExecutor(1, thread_name_prefix="gridpfn-assemble")
        self.next_renewal = 0.0

    @property
    def busy(self) -> bool:
        """Chunks in flight, or a job's result to append: the caller should come back soon, not wait for news."""
        return bool(self.in_flight) or any(run.appending for run in self.runs.values())

    def step(self, wait_s: float = 1.0, claim: bool = True) -> bool:
        """Claim chunks up to the executor's capacity, wait up to `wait_s` for one to finish and record what
        finished; False when nothing is in flight (no chunk was free anywhere)."""
        self._notice_ended()  # first: a cancelled job's leases are gone, which is no lapse
        self._renew()
        if claim and not self.should_stop():
            self._fill()
        self._pump()
        if not self.in_flight:
            if claim and any(run.appending for run in self.runs.values()):
                time.sleep(min(wait_s, APPEND_POLL_S))  # appending others' parts: back soon for the assembly
                return True
            return False
        waiting, ready = self._ready()
        if not ready:
            wait(waiting, timeout=min(wait_s, self.lease_s / 3), return_when=FIRST_COMPLETED)
            waiting, ready = self._ready()
        for future in ready:
            self._finished(self.in_flight.pop(future), future)
        if claim and not self.should_stop():
            self._fill()  # the next chunks in flight before the caller waits for anything else
        return True

    def run_until_idle(self) -> None:
        """Work until no active job has a chunk free (the embedded executor)."""
        while self.step():
            pass

    def drain(self) -> None:
        """Claim nothing more; finish and record what is in flight (a worker stopping)."""
        while self.step(claim=False):
            pass

    def close(self) -> None:
        held: dict[str, list[int]] = {}
        for claim in self.in_flight.values():
            held.setdefault(claim.job_id, []).append(claim.index)
        for job_id, run in self.runs.items():  # the appender role too: the last chunk's worker then assembles
            if run.stream is not None and ASSEMBLY not in held.get(job_id, []):
                held.setdefault(job_id, []).append(ASSEMBLY)
        for job_id, indices in held.items():  # others take them at once instead of after the lease
            self.states.release(job_id, self.owner, indices)
        self.chunks.close()
        self.assembler.shutdown(wait=False, cancel_futures=True)

    # --- claiming -------------------------------------------------------------------------------------
    def _fill(self) -> None:
        while len(self.in_flight) < self.chunks.capacity():
            claim = self._claim()
            if claim is None:
                return
            run = self.runs[claim.job_id]
            future: Future[ChunkResult | bool]
            try:
                if claim.assemble:
                    run.assembling = True
                    future = self.assembler.submit(self._assemble, run)
                else:
                    if claim.index == 0 and not claim.retaken:  # the first to take chunk 0: the appender
                        run.stream = results.StreamedResult(run.files)
                    future = self.chunks.submit(run.spec, claim.index, run.stopped)  # type: ignore[assignment]
            except BaseException:  # nothing will run it: give it back at once
                self.states.release(claim.job_id, self.owner, [claim.index])
                raise
            self.in_flight[future] = claim

    def _notice_ended(self) -> None:
        """Stop working on the jobs that ended elsewhere (done, cancelled, failed or deleted: off the active list).
        Every step, not only when a chunk is free to claim: a chunk still checking its job's input hears of it."""
        if not self.runs:
            return
        active = set(self.states.active())
        for job_id in [j for j in self.runs if j not in active and not self.runs[j].assembling]:
            self._stopped(self.runs[job_id], None)
            self._forget_if_idle(job_id)

    def _claim(self) -> Claim | None:
        for job_id in self.states.active():
            run = self._run(job_id)
            if run is None or run.ended or run.assembling:
                continue
            claim = self.states.claim_chunk(
                job_id, self.owner, run.spec.chunks, self.lease_s, self.max_attempts, appends=True
            )
            if claim is None:
                continue
            if claim.retaken:
                what = "the assembly" if claim.assemble else f"chunk {claim.index}"
                log.warning("job %s: %s retaken (its lease expired: a worker died or stalled)", job_id, what)
            if run.chunks_run == 0 and not claim.assemble:
                log.info(
                    "job %s: %s rows in %d chunks, starting at chunk %d (owner %s)",
                    job_id,
                    run.spec.rows,
                    run.spec.chunks,
                    claim.index,
                    self.owner,
                )
            run.chunks_run += 0 if claim.assemble else 1
            return claim
        return None

    def _run(self, job_id: str) -> JobRun | None:
        run = self.runs.get(job_id)
        if run is None:
            job = self.states.get(job_id)
            if job is None or job["state"].terminal:
                self.states.forget(job_id)
                return None
            spec: JobSpec = job["spec"]
            run = self.runs[job_id] = JobRun(spec, JobFiles(self.jobs_dir, job_id))
        return run

    def _renew(self) -> None:
        now = time.monotonic()
        if now < self.next_renewal or not self.in_flight:
            return
        self.next_renewal = now + self.lease_s / 3
        held: dict[str, list[int]] = {}
        for claim in self.in_flight.values():
            held.setdefault(claim.job_id, []).append(claim.index)
        for job_id, indices in held.items():
            lost = self.states.renew(job_id, self.owner, indices, self.lease_s)
            if lost and not self.runs[job_id].ended:
                log.warning("job %s: leases on %s lapsed (this worker was too slow or cut off)", job_id, lost)

    # --- recording ------------------------------------------------------------------------------------
    def _ready(self) -> tuple[list[Future[ChunkResult | bool]], list[Future[ChunkResult | bool]]]:
        """(futures to wait for, finished futures to record now). Where results are streamed, a job's chunks are
        recorded in claim order (a chunk after the one before it), so only each job's first unfinished chunk is
        waited for; otherwise every finished future is recorded."""
        waiting, ready, blocked = [], [], set()
        for future, claim in self.in_flight.items():
            ordered = self.chunks.streams and not claim.assemble
            if ordered and claim.job_id in blocked:
                continue
            if future.done():
                ready.append(future)
            else:
                waiting.append(future)
                if ordered:
                    blocked.add(claim.job_id)
        return waiting, ready

    def _finished(self, claim: Claim, future: Future[ChunkResult | bool]) -> None:
        run = self.runs[claim.job_id]
        try:
            if future.cancelled():  # by _stopped, or a cluster that dropped it: give the lease back if still wanted
                if not run.ended:
                    self.states.release(claim.job_id, self.owner, [claim.index])
                return
            outcome = future.result()
            if claim.assemble:
                if outcome:
                    workers = (self.states.get(claim.job_id) or {}).get("workers", {})
                    log.info("job %s done: %s (chunks by %s)", claim.job_id, run.times.line(), workers)
                    run.ended = True
                else:
                    job = self.states.get(claim.job_id)
                    self._stopped(run, "deleted" if job is None else job["state"].value)
            else:
                assert isinstance(outcome, ChunkResult)
                self._record(run, claim, outcome)
        except JobStopped:  # it ended while this chunk checked the job's input: _stopped already ran
            pass
        except Exception as exc:
            self._failed(run, claim, exc)
        finally:
            self._forget_if_idle(claim.job_id)
        if self.chunk_pause_s and not claim.assemble:
            time.sleep(self.chunk_pause_s)

    def _record(self, run: JobRun, claim: Claim, result: ChunkResult) -> None:
        run.times.add(result.times)
        if run.stream is not None and result.table is not None and (run.pump is None or run.pump.done()):
            # appended from memory, not re-read; a table is queued only behind an idle pump (memory stays bounded)
            run.pump = self.assembler.submit(self._append, run, claim.index, result.table)
        outcome = self.states.complete_chunk(
            run.spec.id, self.owner, claim.index, result.rows, run.spec.chunks, self.lease_s, result.ran_by
        )
        if outcome == "assemble":
            run.assembling = True
            self.in_flight[self.assembler.submit(self._assemble, run)] = Claim(run.spec.id, ASSEMBLY, run.spec.chunks)
        elif outcome != "recorded":
            self._stopped(run, outcome)

    def _pump(self) -> None:
        """Queue an append pass for every job this process appends, unless one is still queued."""
        for run in self.runs.values():
            if run.appending and (run.pump is None or run.pump.done()):
                run.pump = self.assembler.submit(self._append, run)

    def _append(self, run: JobRun, index: int = -1, table: pa.Table | None = None) -> None:
        """On the assembler thread: append to the job's result every part that follows it, in order (chunk
        `index` from `table`, the others from their files, which exist only whole); stop at the first missing."""
        stream = run.stream
        try:
            while stream is not None and stream.next_index < run.spec.chunks:
                at = stream.next_index
                if at == index and table is not None:
                    stream.append(at, table)
                elif run.files.part(at).exists():
                    stream.append(at, pq.read_table(run.files.part(at)))
                else:
                    return
        except Exception:  # the stream only spares the assembly pass; the parts are there
            if not run.ended:
                log.exception("job %s: appending the result failed; it will be assembled from the parts", run.spec.id)
            self._drop_stream(run)

    @staticmethod
    def _drop_stream(run: JobRun) -> None:
        """On the assembler thread (or once it is idle): abort the stream, removing its file."""
        stream, run.stream = run.stream, None
        if stream is not None:
            stream.abort()

    def _assemble(self, run: JobRun) -> bool:
        """Publish result.parquet (the appended stream, completed, else the parts) and make the job done."""
        t0 = time.perf_counter()
        self._append(run)
        stream, run.stream = run.stream, None
        if stream is None or not stream.commit(run.spec):
            results.assemble(run.files, run.spec)
        run.times.add({"assemble": time.perf_counter() - t0})
        return self.states.finish(run.spec.id, run.spec.chunks)

    def _stopped(self, run: JobRun, state: str | None) -> None:
        """The job was cancelled, deleted, failed or finished by others meanwhile: stop working on it (its chunks
        not yet started are cancelled; its parts are removed once none of its chunks is in flight here)."""
        if run.ended:
            return
        run.ended = True
        if run.stream is not None:
            self.assembler.submit(self._drop_stream, run)  # after any append pass queued before it
        for future, claim in self.in_flight.items():
            if claim.job_id == run.spec.id:
                future.cancel()
        if state is not None:  # None: it left the active list, which says nothing new
            log.info("job %s stopped at a chunk boundary: %s", run.spec.id, state)

    def _failed(self, run: JobRun, claim: Claim, exc: Exception) -> None:
        # the caller's input refused ("file: rows [17001]: ..."): worded and named as predict's 422; else a fault,
        # by its type, of the job itself
        if isinstance(exc, InputValidationError):
            failed = self.states.fail(run.spec.id, str(exc), exc.field, exc.expected)
        else:
            failed = self.states.fail(run.spec.id, f"{type(exc).__name__}: {exc}")
        if failed:
            if isinstance(exc, InputValidationError):  # the client's input, not a fault here: no traceback
                log.warning("job %s refused its input: %s", run.spec.id, exc)
            else:
                where = "assembling" if claim.assemble else f"in chunk {claim.index}"
                log.error("job %s failed %s", run.spec.id, where, exc_info=exc)
            self._stopped(run, "failed")
        else:  # already ended (cancelled or deleted under it, or finished by another worker)
            job = self.states.get(run.spec.id)
            self._stopped(run, "deleted" if job is None else job["state"].value)

    def _forget_if_idle(self, job_id: str) -> None:
        """Forget an ended job once nothing of it is in flight here, removing its parts after this process's last
        write: whatever ended it, no assembly will read them (a done job's result is already published), and
        every worker doing so after its own last write leaves none behind."""
        run = self.runs.get(job_id)
        if run is not None and run.ended and not any(c.job_id == job_id for c in self.in_flight.values()):
            run.files.remove_parts()
            del self.runs[job_id]
            self.chunks.forget(job_id)
