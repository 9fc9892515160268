"""Workers dying and jobs being cancelled, with real Redis and real worker processes.

A worker SIGKILLed mid-job leaves leases on the chunks it was running; another worker carries on from
the next free chunk, retakes those once their leases lapse (the claim idle time), and the result equals
an uninterrupted run.
"""

from __future__ import annotations

import re
import socket
import time
import uuid

import httpx
import numpy as np
import pandas as pd
import pytest
import redis

from service.jobs.states import RedisJobStates
from tests.service.batch_support import (
    FEATURES,
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
from tests.service.conftest import assert_problem

CHUNK = 150
ROWS = 3000


@pytest.fixture(scope="module")
def stack(model_dir, redis_url, tmp_path_factory):
    jobs_dir = tmp_path_factory.mktemp("jobs-recovery")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with job_server(model_dir, jobs_dir, redis_url, job_chunk_rows=CHUNK, job_queue=queue) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            env = worker_env(redis_url, model_dir, jobs_dir, queue, GRIDPFN_JOB_CLAIM_IDLE_S=1.0)
            yield client, jobs_dir, queue, env


def _pending(redis_url: str, queue: str) -> int:
    return int(redis.Redis.from_url(redis_url).xpending(f"{queue}:stream", "workers")["pending"])


def test_cancel_then_worker_killed_mid_job_another_finishes(stack, redis_url, tmp_path):
    client, jobs_dir, queue, env = stack
    cid = context_id(client)
    frame = loads(ROWS, seed=22)
    path = tmp_path / "loads.parquet"
    frame.to_parquet(path, index=False)

    queued = submit_file(client, path, cid).json()  # no worker yet: cancelled while queued
    response = client.delete(f"/v1/batch-jobs/{queued['id']}")
    assert response.status_code == 202 and response.json()["state"] == "cancelled"

    first = WorkerProcess(tmp_path / "first.log", {**env, "GRIDPFN_JOB_CHUNK_PAUSE_S": "0.05"})
    try:
        first.wait_ready()
        running = submit_file(client, path, cid).json()  # cancelled while running
        wait_for(client, running["id"], lambda s: s["chunks_done"] >= 2)
        response = client.delete(f"/v1/batch-jobs/{running['id']}")
        assert response.status_code == 202 and response.json()["state"] == "cancelled"
        parts = jobs_dir / running["id"] / "parts"
        deadline = time.monotonic() + 10
        while parts.exists() and time.monotonic() < deadline:  # removed at the next chunk boundary
            time.sleep(0.05)
        assert _pending(redis_url, queue) == 0  # announcements are acknowledged once the job is on the active list
        status = client.get(f"/v1/batch-jobs/{running['id']}").json()
        assert status["state"] == "cancelled" and status["chunks_done"] < ROWS // CHUNK
        assert_problem(client.get(f"/v1/batch-jobs/{running['id']}/result"), 409)
        assert not (jobs_dir / running["id"] / "parts").exists()  # the worker cleaned up its parts
        assert not (jobs_dir / running["id"] / "result.streaming").exists()  # and the result it was streaming
        assert client.get(f"/v1/batch-jobs/{queued['id']}").json()["attempts"] == 0  # skipped, never run

        job = submit_file(client, path, cid).json()  # the worker is free again: this one it dies on
        wait_for(client, job["id"], lambda s: s["chunks_done"] >= 5)
        first.kill()
    finally:
        first.stop()
    killed_at = client.get(f"/v1/batch-jobs/{job['id']}").json()
    assert killed_at["state"] == "running" and 5 <= killed_at["chunks_done"] < ROWS // CHUNK
    holders = RedisJobStates(redis.Redis.from_url(redis_url), queue, 3600).holders(job["id"])
    dead = f"{socket.gethostname()}-{first.proc.pid}"  # its default name
    assert holders and set(holders.values()) == {dead}, holders  # the leases it left behind
    assert (jobs_dir / job["id"] / "result.streaming").exists()  # it ran from chunk 0: it was streaming the result

    reference = submit_file(client, path, cid).json()  # the same input, to run uninterrupted
    second = WorkerProcess(tmp_path / "second.log", env)
    try:
        second.wait_ready()
        final = wait_for(client, job["id"], done, timeout_s=60)
        assert final["attempts"] == 2 and final["rows_done"] == ROWS
        resumed = re.search(rf"job {job['id']}: .* starting at chunk (\d+)", second.text())
        assert resumed and int(resumed.group(1)) >= killed_at["chunks_done"], second.text()  # not from scratch
        uninterrupted = fetch_frame(client, wait_for(client, reference["id"], done)["id"])
        assert client.get(f"/v1/batch-jobs/{reference['id']}").json()["attempts"] == 1
    finally:
        second.stop()
    assert not (jobs_dir / job["id"] / "result.streaming").exists()  # assembled from parts; the stale stream removed
    recovered = fetch_frame(client, job["id"])
    assert len(recovered) == ROWS
    pd.testing.assert_frame_equal(recovered[FEATURES], frame)  # each row exactly once, in input order
    pd.testing.assert_frame_equal(recovered, uninterrupted)  # and the same values, bit for bit
    assert np.isfinite(recovered.drop(columns=[*FEATURES, "extrapolated"]).to_numpy()).all()
