"""service/jobs/chunks.py's power-flow check: before a job's first chunk, every row where its model would ask
the network model's power flow (every row for network-fit; rows beyond the context's reach for physics-fit
and a checkpoint, behind the off-context guard) must have one, else the job fails at once, nothing computed,
its error naming the field and the file's rows (1-based) as predict's 422 names its queries. A cancelled job
stops the check within a block; network-fit's chunks answer from the voltages the check solved, bit for bit
as when they solve them. Real Redis, a real `gridpfn worker`, the tiny checkpoint, 100-row chunks (a late
row is in the fourth chunk of four); the voltage hand-off in this process, on a job directory as the server
writes it."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from service.jobs import chunks
from tests.service.batch_support import (
    BAND,
    FEATURES,
    NET,
    OUTPUTS,
    QUANTILES,
    context_id,
    done,
    fetch_frame,
    loads,
    server_and_worker,
    submit_file,
    wait_for,
)
from tests.service.conftest import MODEL, assert_problem

CHUNK = 100
ROWS = 350
NO_SOLUTION = "the network model's power flow does not converge at these loads: beyond what the feeder can carry"


@pytest.fixture(scope="module")
def stack(model_dir, redis_url, tmp_path_factory):
    """Server (Redis mode, its own stream) + one worker process sharing a jobs directory."""
    jobs_dir = tmp_path_factory.mktemp("jobs-power-flow")
    with server_and_worker(model_dir, redis_url, jobs_dir, CHUNK) as (_, client, _, worker):
        yield client, jobs_dir, worker


def _run(client, tmp_path, frame, model):
    path = tmp_path / "loads.parquet"
    frame.to_parquet(path, index=False)
    response = submit_file(client, path, context_id(client), model=model)
    assert response.status_code == 202, response.text  # the file itself is fine: its cells are within bounds
    return wait_for(client, response.json()["id"], lambda s: s["state"] in ("failed", "done"))


@pytest.mark.parametrize("model", ["network-fit", "physics-fit", MODEL])
def test_a_late_row_without_power_flow_fails_the_job_before_any_chunk(stack, tmp_path, model):
    client, jobs_dir, _ = stack
    frame = loads(ROWS, seed=21)
    frame.iloc[300] *= 50.0  # file row 301, in the last chunk: far beyond what the feeder carries
    final = _run(client, tmp_path, frame, model)
    assert final["state"] == "failed", final
    [error] = final["errors"]
    assert error["message"] == f"file: rows [301]: {NO_SOLUTION}", final  # the field, the file's row, no type name
    # named as a 422 names a refused field: the submission's, not "job"
    assert (error["location"], error["field"], error["expected"]) == (
        "body",
        "file",
        "loads the feeder can carry (P in MW, Q in MVAr)",
    )
    assert final["chunks_done"] == 0 and final["rows_done"] == 0, final  # refused before any chunk was computed
    assert_problem(client.get(f"/v1/batch-jobs/{final['id']}/result"), 409, "job_id")
    # nothing half-written: no part, no result, no streamed result; the input stays until the job is deleted
    assert sorted(p.name for p in (jobs_dir / final["id"]).iterdir()) == ["context.bin", "input.parquet"]


def test_every_refused_row_is_counted_and_the_first_named(stack, tmp_path):
    client, _, _ = stack
    frame = loads(ROWS, seed=22)
    bad = [5, 50, 99, 100, 130, 170, 199, 220, 260, 290, 310, 349]  # in every chunk, 12 in all
    frame.iloc[bad] *= 50.0
    final = _run(client, tmp_path, frame, "network-fit")
    assert final["state"] == "failed" and final["chunks_done"] == 0, final
    named = [row + 1 for row in bad[:10]]
    assert final["errors"][0]["message"] == f"file: rows {named} ... (12 rows in all): {NO_SOLUTION}", final


@pytest.mark.parametrize("model", ["network-fit", "physics-fit"])
def test_far_rows_with_a_power_flow_still_run(stack, tmp_path, model):
    """The check refuses only rows without a power flow: a row far beyond the context's loads that the feeder
    still carries is answered (the guard asks the network model there, and it has an answer)."""
    client, _, _ = stack
    frame = loads(ROWS, seed=23)
    frame.iloc[300] *= 1.8
    final = _run(client, tmp_path, frame, model)
    done(final)
    result = fetch_frame(client, final["id"])
    assert len(result) == ROWS and result["extrapolated"].iloc[300], result["extrapolation"].iloc[300]
    assert np.isfinite(result.filter(like="std_").to_numpy()).all()


def test_a_refused_input_is_checked_once_per_process(monkeypatch, tmp_path):
    """A process's other chunks of the job get the refusal as it was, not a second pass over the input."""
    from models.errors import InputValidationError
    from service.jobs.jobspec import JobSpec

    calls = []

    def refuse(spec, jobs_dir, models, parallel, stopped):
        calls.append(spec.id)
        raise InputValidationError("file", f"rows [301]: {NO_SOLUTION}")

    monkeypatch.setattr(chunks, "prepare", refuse)
    spec = JobSpec(
        id="a" * 32,
        model="network-fit",
        model_version="1",
        context_id="0" * 64,
        network="ieee33",
        features=("p",),
        outputs=("v",),
        rows=ROWS,
        chunk_rows=CHUNK,
        source="parquet",
        created_at=0.0,
    )
    prepared = chunks.PreparedJobs()
    for _ in range(3):
        with pytest.raises(InputValidationError, match=r"^file: rows \[301\]"):
            prepared.get(spec, tmp_path, lambda *args: None)
    assert calls == [spec.id]
    prepared.forget(spec.id)  # the job ended: a new one of the same id would be prepared afresh
    with pytest.raises(InputValidationError):
        prepared.get(spec, tmp_path, lambda *args: None)
    assert calls == [spec.id, spec.id]


def test_cancelling_a_job_stops_its_power_flow_check_and_its_worker_takes_the_next(stack, tmp_path):
    """DELETE while the check runs (network-fit: every row's power flow, 1000 chunks of 100 rows, about 9 s): the
    check stops within a block of the runner noticing (it looks every step, chunks in flight or not), the job
    ends cancelled with nothing computed, what the check wrote is removed, and the worker runs the next job."""
    client, jobs_dir, worker = stack
    cid = context_id(client)
    simulate = {"network": "ieee33", "delta": 0.1, "n": 100_000, "seed": 31}
    response = client.post("/v1/batch-jobs", json={"model": "network-fit", "context_id": cid, "simulate": simulate})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + 60
    while not (jobs_dir / job_id / "voltages" / "chunk-000010.npz").exists():  # the check is under way
        assert time.monotonic() < deadline, worker.text()[-3000:]
        time.sleep(0.02)
    cancelled = client.delete(f"/v1/batch-jobs/{job_id}")
    assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled", cancelled.text
    t0 = time.monotonic()
    stop = re.compile(rf"job {job_id}: power-flow check stopped at chunk (\d+) of 1000")
    while (found := stop.search(worker.text())) is None:
        assert time.monotonic() - t0 < 10, worker.text()[-3000:]
        time.sleep(0.02)
    stopped_after = time.monotonic() - t0
    assert 10 <= int(found.group(1)) < 1000 and stopped_after < 5, (found.group(0), stopped_after)
    final = wait_for(client, job_id, lambda s: not (jobs_dir / job_id / "voltages").exists())
    assert final["state"] == "cancelled" and final["chunks_done"] == 0 and final["errors"] == [], final
    path = tmp_path / "next.parquet"
    loads(ROWS, seed=32).to_parquet(path, index=False)
    following = submit_file(client, path, cid, model="network-fit").json()
    done(wait_for(client, following["id"], done, timeout_s=30))


def _width_free_job(tmp_path, rows: int, chunk_rows: int, model: str = "network-fit"):
    """A network-fit (physics-fit) job's directory as the server writes it (context, input in chunk_rows row
    groups), its spec, and the models a worker would load for it (the model on ieee33, built as the registry
    builds it)."""
    import gridsim
    from models import network_fit
    from models.registry import width_free_builder
    from service.engine.context_sets import ContextSet
    from service.jobs import inputs
    from service.jobs.jobspec import JobSpec
    from service.jobs.results import JobFiles

    context = gridsim.simulate(60, 0.2, 5)
    ctx = ContextSet.build(context.x, context.vm_pu)
    spec = JobSpec(
        id=uuid.uuid4().hex,
        model=model,
        model_version=str(network_fit.VERSION),  # physics-fit's is the same: "built-in"
        context_id=ctx.id,
        network=NET.name,
        features=tuple(FEATURES),
        outputs=tuple(OUTPUTS),
        quantiles=tuple(QUANTILES),
        voltage_band=tuple(BAND),
        rows=rows,
        chunk_rows=chunk_rows,
        source="parquet",
        created_at=0.0,
    )
    files = JobFiles(tmp_path, spec.id)
    files.dir.mkdir()
    files.context.write_bytes(ctx.to_bytes())
    inputs.write_simulated(iter([loads(rows, seed=33).to_numpy()]), FEATURES, files.input, chunk_rows)
    loaded = width_free_builder(model, 600)(NET)
    return spec, lambda *_: loaded


def _bits(table) -> list[bytes]:
    return [column.to_numpy().tobytes() for column in table.columns]


@pytest.mark.parametrize(("model", "parallel"), [("network-fit", 1), ("network-fit", 3), ("physics-fit", 3)])
def test_chunks_answer_from_the_checks_voltages_bit_for_bit(tmp_path, model, parallel):
    """The check leaves network-fit's (physics-fit's: it reads them at every row) voltages per chunk, in the
    chunk's blocks (3 of 300 rows side by side with parallel=3); the chunk solves no row again, and answers bit for
    bit as when it solves its rows itself (its file gone: a chunk run twice, or cut otherwise). A part written, its
    voltages are removed."""
    spec, models = _width_free_job(tmp_path, rows=2 * 900 + 50, chunk_rows=900, model=model)
    pool = ThreadPoolExecutor(parallel) if parallel > 1 else None
    job = chunks.prepare(spec, tmp_path, models, parallel)
    assert all(job.files.voltages(i).exists() for i in range(spec.chunks))
    solve, solved = job.method.voltage_model, []
    job.method.voltage_model = lambda x: solved.append(len(x)) or solve(x)  # the real solver, its calls counted
    handed = [chunks.compute_chunk(job, i, pool, parallel)[0] for i in range(spec.chunks)]
    assert solved == []
    job.files.remove_parts()
    own = [chunks.compute_chunk(job, i, pool, parallel)[0] for i in range(spec.chunks)]
    blocks = [300] * 6 + [50] if parallel == 3 else [900, 900, 50]
    assert solved == blocks
    for mine, theirs in zip(handed, own):
        assert mine.schema.equals(theirs.schema, check_metadata=True)
        # `extrapolation` reads no voltage, and its BLAS product may round a last bit apart between two runs whose
        # blocks' threads meet otherwise (1 ulp, seen here): compared to 1e-15; every other column bit for bit
        same = [name for name in mine.column_names if name != "extrapolation"]
        assert _bits(mine.select(same)) == _bits(theirs.select(same))
        np.testing.assert_allclose(mine["extrapolation"], theirs["extrapolation"], rtol=1e-15, atol=0.0)
    chunks.check_power_flow(job, parallel)
    chunks.run_chunk(job, 0, pool, parallel)
    assert job.files.part(0).exists() and not job.files.voltages(0).exists() and job.files.voltages(1).exists()
    if pool is not None:
        pool.shutdown()
