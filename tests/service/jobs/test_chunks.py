"""service/jobs/chunks.py's power-flow check: before a job's first chunk, every row where its model would ask
the network model's power flow (every row for network-fit; rows beyond the context's reach for physics-fit
and a checkpoint, behind the off-context guard) must have one, else the job fails at once, nothing computed,
its error naming the field and the file's rows (1-based) as predict's 422 names its queries. Real Redis, a
real `gridpfn worker`, the tiny checkpoint, 100-row chunks (a late row is in the fourth chunk of four)."""

from __future__ import annotations

import numpy as np
import pytest

from service.jobs import chunks
from tests.service.batch_support import (
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

    def refuse(spec, jobs_dir, models):
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
