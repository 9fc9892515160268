"""One job on several workers at once (issue 31, scale), with real Redis, real `gridpfn worker` processes and
a real Dask cluster: two workers share one job's chunks and give the one-worker result bit for bit; a worker
killed mid-job leaves its leased chunks to the other, which retakes them once their leases lapse; a Dask
LocalCluster runs the same job through a coordinating worker, on both of its worker processes, to the same
result. The tiny checkpoint and 100-row chunks keep it short."""

from __future__ import annotations

import functools
import logging
import signal
import socket
import time
import uuid
from types import SimpleNamespace

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import redis

from service.jobs.jobspec import JobSpec, JobState
from service.jobs.states import ASSEMBLY, GAVE_UP, Claim, MemoryJobStates, RedisJobStates
from tests.service.batch_support import (
    WorkerProcess,
    context_id,
    done,
    fetch_frame,
    job_server,
    loads,
    submit_file,
    wait_for,
    worker_env,
)

CHUNK = 100
ROWS = 2000
CHUNKS = ROWS // CHUNK
LEASE_S = 3.0
PAUSE_S = 0.1  # after each chunk: the tiny model is so fast that one worker would otherwise finish alone


@pytest.fixture(params=["redis", "memory"])
def states(request, redis_url):
    """Both implementations of the job records: the same semantics (Lua scripts, a lock in memory)."""
    if request.param == "memory":
        return MemoryJobStates()
    return RedisJobStates(redis.Redis.from_url(redis_url), f"test-{uuid.uuid4().hex[:8]}", 3600)


def _spec(rows: int = 5, chunk_rows: int = 2) -> JobSpec:
    return JobSpec(
        id=uuid.uuid4().hex,
        model="m",
        model_version="1",
        context_id="0" * 64,
        network="ieee33",
        features=("a",),
        outputs=("b",),
        rows=rows,
        chunk_rows=chunk_rows,
        source="parquet",
        created_at=time.time(),
    )


def test_chunks_are_leased_in_order_retaken_when_a_lease_lapses_and_assembled_once(states):
    spec = _spec()  # 3 chunks
    states.create(spec)
    assert states.active() == [spec.id] and states.get(spec.id)["state"] == JobState.QUEUED
    claim = functools.partial(states.claim_chunk, spec.id, chunks=3, max_attempts=5)
    assert claim("a", lease_s=60) == Claim(spec.id, 0, 3)
    assert states.get(spec.id)["state"] == JobState.RUNNING and states.get(spec.id)["attempts"] == 1
    assert claim("b", lease_s=60).index == 1
    assert claim("a", lease_s=0.05).index == 2
    assert claim("b", lease_s=60) is None  # every chunk leased, none lapsed
    time.sleep(0.15)
    assert claim("b", lease_s=60) == Claim(spec.id, 2, 3, retaken=True)
    assert states.get(spec.id)["attempts"] == 2  # 1 + the worker presumed dead ("a")
    assert states.renew(spec.id, "a", [0, 2], 60) == [2]  # "a" still holds 0, no longer 2
    assert states.complete_chunk(spec.id, "a", 0, 2, 3, 60) == "recorded"
    assert states.complete_chunk(spec.id, "b", 1, 2, 3, 60) == "recorded"
    assert states.complete_chunk(spec.id, "b", 2, 1, 3, 60) == "assemble"  # the last chunk: "b" assembles
    assert states.complete_chunk(spec.id, "a", 2, 1, 3, 60) == "recorded"  # a late duplicate counts once
    record = states.get(spec.id)
    assert (record["chunks_done"], record["rows_done"], record["workers"]) == (3, 5, {"a": 1, "b": 2})
    assert claim("c", lease_s=60) is None  # the assembly is leased
    assert states.finish(spec.id, 3) and not states.finish(spec.id, 3)  # done exactly once
    assert states.get(spec.id)["state"] == JobState.DONE and states.active() == []
    assert claim("c", lease_s=60) is None and states.complete_chunk(spec.id, "c", 1, 2, 3, 60) == "done"


def test_the_last_chunk_hands_the_assembly_to_the_appender_and_a_stopping_one_gives_it_up(states):
    for stops in (False, True):
        spec = _spec(rows=4)  # 2 chunks
        states.create(spec)
        claim = functools.partial(states.claim_chunk, spec.id, chunks=2, lease_s=60, max_attempts=5, appends=True)
        assert claim("a").index == 0 and claim("b").index == 1  # "a" took chunk 0 first: it appends the result
        assert states.complete_chunk(spec.id, "a", 0, 2, 2, 60) == "recorded"
        if stops:
            states.release(spec.id, "a", [ASSEMBLY])  # "a" stops: the last chunk's worker assembles instead
            assert states.complete_chunk(spec.id, "b", 1, 2, 2, 60) == "assemble"
            assert claim("a") is None
        else:
            assert states.complete_chunk(spec.id, "b", 1, 2, 2, 60) == "recorded"  # the lease went to "a"
            assert claim("b") is None and claim("a") == Claim(spec.id, ASSEMBLY, 2)
        assert states.finish(spec.id, 2)


def test_released_chunks_go_back_cancelled_jobs_refuse_and_a_deadly_chunk_fails_its_job(states):
    spec = _spec()
    states.create(spec)
    claim = functools.partial(states.claim_chunk, spec.id, chunks=3)
    assert claim("a", lease_s=60, max_attempts=5).index == 0
    states.release(spec.id, "a", [0])  # a worker stopping gives it back: taken at once, not a retake
    assert claim("b", lease_s=60, max_attempts=5) == Claim(spec.id, 0, 3)
    assert states.get(spec.id)["attempts"] == 1
    assert states.cancel(spec.id) and states.active() == []
    assert claim("c", lease_s=60, max_attempts=5) is None
    assert states.complete_chunk(spec.id, "b", 0, 2, 3, 60) == "cancelled"

    deadly = _spec(rows=2)  # one chunk that kills whoever runs it
    states.create(deadly)
    for _ in range(2):
        assert states.claim_chunk(deadly.id, f"w{_}", 1, 0.05, max_attempts=2) is not None
        time.sleep(0.15)
    assert states.claim_chunk(deadly.id, "w2", 1, 0.05, max_attempts=2) is None
    record = states.get(deadly.id)
    assert record["state"] == JobState.FAILED and record["error"] == f"gave up on chunk 0 after 2{GAVE_UP}", record


@pytest.fixture(scope="module")
def stack(model_dir, redis_url, tmp_path_factory):
    """A server in Redis mode with its own queue, one input file, and the workers the tests start (stopped at the end)."""
    jobs_dir = tmp_path_factory.mktemp("jobs-scale-out")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    workers: dict[str, WorkerProcess] = {}
    with job_server(model_dir, jobs_dir, redis_url, job_chunk_rows=CHUNK, job_queue=queue) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            path = jobs_dir.parent / f"{queue}-loads.parquet"
            loads(ROWS, seed=31).to_parquet(path, index=False)
            env = worker_env(
                redis_url,
                model_dir,
                jobs_dir,
                queue,
                GRIDPFN_JOB_CLAIM_IDLE_S=LEASE_S,
                GRIDPFN_JOB_CHUNK_PAUSE_S=PAUSE_S,
            )

            def start(*names: str, **extra: str) -> list[WorkerProcess]:
                for name in names:  # side by side: each start imports torch and loads the models
                    workers[name] = WorkerProcess(jobs_dir.parent / f"{queue}-{name}.log", {**env, **extra})
                for name in names:
                    workers[name].wait_ready()
                return [workers[name] for name in names]

            states = RedisJobStates(redis.Redis.from_url(redis_url), queue, 3600)
            cluster, dask = _dask_cluster(model_dir)
            try:
                yield SimpleNamespace(
                    client=client,
                    cid=context_id(client),
                    path=path,
                    start=start,
                    states=states,
                    workers=workers,
                    cluster=cluster,
                    dask=dask,
                )
            finally:
                for worker in workers.values():
                    worker.stop()
                dask.close()
                cluster.close()


def _dask_cluster(model_dir):
    """A local Dask cluster of two worker processes, their models loaded in the background meanwhile (the
    preload a production worker gets from `--preload service.jobs.dask_chunks`): the other tests mostly wait."""
    from distributed import Client, LocalCluster

    from service.jobs import dask_chunks

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.WARNING
    )
    client = Client(cluster, set_as_default=False)
    client.preloading = [
        client.submit(dask_chunks.preload, str(model_dir), workers=[w.worker_address], pure=False)
        for w in cluster.workers.values()
    ]
    return cluster, client


def _name(worker: WorkerProcess) -> str:
    return f"{socket.gethostname()}-{worker.proc.pid}"  # the worker's default name


def _run(stack, **wait) -> tuple[str, pd.DataFrame]:
    job = submit_file(stack.client, stack.path, stack.cid).json()
    wait_for(stack.client, job["id"], done, **wait)
    return job["id"], fetch_frame(stack.client, job["id"])


@pytest.fixture(scope="module")
def pair(stack):
    """Workers "a" and "b" (started side by side) and the job run by "a" alone while "b" is paused (SIGSTOP)."""
    a, b = stack.start("a", "b")
    b.proc.send_signal(signal.SIGSTOP)
    try:
        job_id, frame = _run(stack)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert stack.states.get(job_id)["workers"] == {_name(a): CHUNKS}
    return a, b, frame


def test_two_workers_share_one_job_and_give_the_one_worker_result(stack, pair):
    a, b, one_worker = pair
    job_id, frame = _run(stack)
    record = stack.states.get(job_id)
    assert set(record["workers"]) == {_name(a), _name(b)}, record["workers"]  # both ran chunks of it
    assert sum(record["workers"].values()) == CHUNKS and record["attempts"] == 1
    assert f"job {job_id}: " in a.text() and f"job {job_id}: " in b.text()  # each logged joining it
    pd.testing.assert_frame_equal(frame, one_worker)  # every row once, in order, the same values bit for bit


def test_a_study_job_is_shared_by_two_workers_and_its_summary_follows_its_rows(stack, pair):
    """POST /v1/studies with `as_job`: a study over the one-request limit (3 scenario-years of 500 steps) runs as
    chunks on both workers; the summary's hours outside are per scenario and year, the largest, as a study's
    (the same answer as one request: tests/service/http/test_studies.py)."""
    a, b, _ = pair
    steps = 500
    phase = np.linspace(0, 4 * np.pi, steps)
    body = {
        "context_id": stack.cid,
        "scenarios": [{"name": "today"}, {"name": "growth", "load_scale": 1.3, "growth_rate": 0.02, "years": [0, 10]}],
        "time_series": {
            "timestamps": [f"t{i}" for i in range(steps)],
            "load": (1.0 + 0.3 * np.sin(phase)).tolist(),
            "pv": np.clip(np.sin(phase / 2), 0, 1).tolist(),
            "step_hours": 1.0,
        },
        "voltage_band": [0.97, 1.03],
    }
    assert stack.client.post("/v1/studies", json=body).status_code == 413  # too many rows for one request
    job = stack.client.post("/v1/studies", json={**body, "as_job": True}).json()
    assert job["rows_total"] == 3 * steps and job["chunks_total"] == 3 * steps // CHUNK
    wait_for(stack.client, job["id"], done)
    assert set(stack.states.get(job["id"])["workers"]) == {_name(a), _name(b)}  # both ran chunks of it
    summary = stack.client.get(f"/v1/batch-jobs/{job['id']}/summary").json()["summary"]
    response = stack.client.get(f"/v1/batch-jobs/{job['id']}/result", params={"layout": "long"})
    long = pd.read_parquet(pa.BufferReader(response.content))
    assert long.groupby(["scenario", "year"]).size().to_dict() == {
        ("growth", 0): 16_000,
        ("growth", 10): 16_000,
        ("today", 0): 16_000,
    }
    hours = long.groupby(["bus", "scenario", "year"])["p_outside"].sum().groupby("bus").max()
    assert hours.max() > 1.0  # some bus is at risk for hours: the groups matter
    for entry in summary:
        assert entry["hours_outside"] == pytest.approx(hours[entry["bus"]], rel=1e-5, abs=1e-6), entry
        worst = long[(long["bus"] == entry["bus"]) & (long["row"] == entry["worst_row"])].iloc[0]
        assert (entry["worst_scenario"], entry["worst_year"], entry["worst_timestamp"]) == (
            worst["scenario"],
            worst["year"],
            worst["timestamp"],
        )


def test_a_killed_worker_leaves_its_chunks_to_the_other(stack, pair):
    a, b, one_worker = pair
    job = submit_file(stack.client, stack.path, stack.cid).json()
    both = {_name(a), _name(b)}
    wait_for(stack.client, job["id"], lambda s: set(stack.states.get(job["id"])["workers"]) == both)
    # killed while it holds a lease (between two chunks it holds none: a loaded CI host caught it there once)
    wait_for(stack.client, job["id"], lambda s: _name(a) in stack.states.holders(job["id"]).values())
    a.kill()  # SIGKILL mid-job, holding leases
    killed_at = stack.client.get(f"/v1/batch-jobs/{job['id']}").json()
    assert killed_at["state"] == "running" and killed_at["chunks_done"] < CHUNKS, killed_at
    assert _name(a) in stack.states.holders(job["id"]).values()  # its leases outlive it
    final = wait_for(stack.client, job["id"], done)
    assert final["rows_done"] == ROWS and final["attempts"] == 2  # 1 + the worker lost
    assert "retaken (its lease expired" in b.text(), b.text()
    pd.testing.assert_frame_equal(fetch_frame(stack.client, job["id"]), one_worker)
    b.stop()


def test_a_dask_cluster_runs_the_job_to_the_same_result(stack, pair):
    for worker in stack.workers.values():
        worker.stop()  # only the cluster runs this job
    stack.dask.gather(stack.dask.preloading)
    address = stack.cluster.scheduler_address
    (coordinator,) = stack.start("dask", GRIDPFN_DASK_SCHEDULER=address, GRIDPFN_JOB_CHUNK_PAUSE_S="0")
    job_id, frame = _run(stack)
    ran_by = stack.states.get(job_id)["workers"]
    assert set(ran_by) == {w.worker_address for w in stack.cluster.workers.values()}, ran_by  # both Dask workers
    assert sum(ran_by.values()) == CHUNKS
    pd.testing.assert_frame_equal(frame, pair[2])
    coordinator.stop()
    assert f"dask scheduler {address}: 2 worker threads" in coordinator.text()
