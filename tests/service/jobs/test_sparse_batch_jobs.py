"""Batch jobs on a sparse context set (null where a load or voltage was not measured): network-fit runs
them, its result equals POST /v1/predict on the same context and says in its metadata which buses the
context read; a model that does not accept missing values is refused at submission (422), nothing queued.
Real uvicorn server (embedded store), real gridsim contexts."""

from __future__ import annotations

import io

import httpx
import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

import gridsim
from tests.service.batch_support import OUTPUTS, QUANTILES, block, done, job_server, loads, submit_file, wait_for
from tests.service.conftest import MODEL, assert_problem

NEVER = 3  # vm_pu_bus5: never read


@pytest.fixture(scope="module")
def embedded(model_dir, tmp_path_factory):
    with job_server(model_dir, tmp_path_factory.mktemp("jobs-sparse"), None, job_chunk_rows=100) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client, tmp_path_factory.mktemp("files")


def sparse_context(client: httpx.Client) -> tuple[str, np.ndarray]:
    result = gridsim.simulate(80, 0.2, 9)
    x, y = result.x.copy(), result.vm_pu.copy()
    y[:, NEVER] = np.nan
    y[1::2, 7] = np.nan
    x[:, 11] = np.nan
    body = {
        "x": [[None if v != v else v for v in r] for r in x.tolist()],
        "y": [[None if v != v else v for v in r] for r in y.tolist()],
    }
    created = client.post("/v1/context-sets", json=body)
    assert created.status_code == 201, created.text
    return created.json()["id"], y


def test_a_sparse_context_runs_as_a_batch_job_with_network_fit(embedded):
    client, files = embedded
    cid, y = sparse_context(client)
    frame = loads(250, seed=3)
    path = files / "loads.parquet"
    frame.to_parquet(path, index=False)
    response = submit_file(client, path, cid, model="network-fit")
    assert response.status_code == 202, response.text
    wait_for(client, response.json()["id"], done)
    raw = client.get(f"/v1/batch-jobs/{response.json()['id']}/result")
    table = pq.read_table(io.BytesIO(raw.content))
    about = orjson.loads(table.schema.metadata[b"gridpfn"])
    readings = (~np.isnan(y)).sum(axis=0)
    assert about["readings"] == readings.tolist() and about["metered"] == (readings > 0).tolist()
    assert about["metered"][NEVER] is False and about["outputs"] == OUTPUTS and about["context_id"] == cid
    result = table.to_pandas()
    for stat in ("mean", "std", *(f"q{q!r}" for q in QUANTILES), "p_outside"):
        assert np.isfinite(block(result, stat)).all(), stat
    direct = client.post(
        "/v1/predict",
        json={"model": "network-fit", "context_id": cid, "queries": frame.to_numpy()[:20].tolist()},
    )
    assert direct.status_code == 200, direct.text
    np.testing.assert_allclose(block(result, "mean")[:20], direct.json()["mean"], rtol=0, atol=1e-12)


def test_a_model_that_does_not_accept_missing_values_is_refused_at_submission(embedded):
    client, files = embedded
    cid, _ = sparse_context(client)
    path = files / "few.parquet"
    loads(10, seed=4).to_parquet(path, index=False)
    for model in (MODEL, "physics-fit"):
        problem = assert_problem(submit_file(client, path, cid, model=model), 422, "context_id")
        assert "network-fit" in problem["errors"][0]["expected"]
    simulated = {"simulate": {"n": 10}, "model": "physics-fit", "context_id": cid}
    assert_problem(client.post("/v1/batch-jobs", json=simulated), 422, "context_id")
