"""Batch jobs on a sparse context set (null where a load or voltage was not measured): network-fit runs
them, its result equals POST /v1/predict on the same context and says in its metadata which buses the
context read and how far the meters pin each (`determined`, as the JSON answer's; the long CSV as columns);
a model that does not accept missing values is refused at submission (422), nothing queued.
Real uvicorn server (embedded store), real gridsim contexts."""

from __future__ import annotations

import io

import httpx
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
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
    job_id = response.json()["id"]
    wait_for(client, job_id, done)
    raw = client.get(f"/v1/batch-jobs/{job_id}/result")
    table = pq.read_table(pa.BufferReader(raw.content))
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
    # network-fit's `determined` (how far the meters pin each bus): the JSON answer's, in the metadata
    determined = direct.json()["determined"]
    assert len(determined) == len(OUTPUTS) and all(0.0 <= v <= 1.0 for v in determined)
    np.testing.assert_allclose(about["determined"], determined, rtol=0, atol=1e-6)
    # CSV has no metadata: the wide CSV is the Parquet's columns alone; the long layout carries the per-bus
    # facts (`metered`, `readings`, `determined`) as columns, on each row of the bus
    wide_csv = client.get(f"/v1/batch-jobs/{job_id}/result", headers={"accept": "text/csv"})
    assert wide_csv.status_code == 200 and wide_csv.headers["content-type"].startswith("text/csv")
    assert list(pd.read_csv(io.StringIO(wide_csv.text)).columns) == table.column_names
    long_csv = client.get(f"/v1/batch-jobs/{job_id}/result", params={"layout": "long"}, headers={"accept": "text/csv"})
    assert long_csv.status_code == 200 and long_csv.headers["content-type"].startswith("text/csv")
    long = pd.read_csv(io.StringIO(long_csv.text))
    assert len(long) == len(frame) * len(OUTPUTS)
    per_bus = long.groupby("bus", sort=False)[["metered", "readings", "determined"]].agg(["min", "max"])
    for key, expected in (("metered", about["metered"]), ("readings", readings.tolist()), ("determined", determined)):
        for end in ("min", "max"):  # the same value on every row of a bus: the bus's
            np.testing.assert_allclose(per_bus[(key, end)].to_numpy(dtype=float), expected, rtol=0, atol=1e-6)


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
