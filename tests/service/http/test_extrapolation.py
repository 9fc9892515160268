"""Every answer says how far each query lies outside its context's loads (issue 29 item 1), over real HTTP:
POST /v1/predict as JSON and Arrow for a checkpoint and physics-fit, the exact GP (alone and beside a
model), batch-job results and the Python client, all carrying the same measure of the context alone."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gridsim
from models.off_context import EXTRAPOLATION_THRESHOLD, ContextGeometry
from service.client import GridPFNClient
from tests.service.batch_support import FEATURES, done, job_server, submit_file, wait_for
from tests.service.conftest import MODEL, rows

ARROW = {"Accept": "application/vnd.apache.arrow.stream"}
SCALE = 1.4  # every load 40 % above what the context saw


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    with job_server(model_dir, tmp_path_factory.mktemp("jobs-extrapolation"), None, job_chunk_rows=64) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield server, client


@pytest.fixture(scope="module")
def context():
    """500 power flows within +-10 % of nominal: far more rows than the 64 loads."""
    result = gridsim.simulate(500, 0.1, 0)
    return result.x, result.vm_pu


@pytest.fixture(scope="module")
def queries():
    """Load cases drawn like the context's rows (another seed)."""
    return gridsim.simulate(100, 0.1, 11).x


def stored(client: httpx.Client, x: np.ndarray, y: np.ndarray) -> str:
    response = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def predicted(client: httpx.Client, path: str = "/v1/predict", **body) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_in_range_queries_are_mostly_not_flagged_and_scaled_loads_are(served, context, queries):
    _, client = served
    x, y = context
    cid = stored(client, x, y)
    expected = ContextGeometry.of(x).extrapolation(queries)
    served = [m["name"] for m in client.get("/v1/models").json()["models"]]  # the checkpoint and the built-ins
    assert {MODEL, "physics-fit"} <= set(served)
    for model in served:
        inside = predicted(client, model=model, context_id=cid, queries=rows(queries))
        assert len(inside["extrapolation"]) == len(inside["extrapolated"]) == len(queries)
        values, flags = np.asarray(inside["extrapolation"]), np.asarray(inside["extrapolated"])
        np.testing.assert_allclose(values, expected, rtol=1e-12)  # the context's measure, whichever model
        assert flags.dtype == bool and (flags == (values > EXTRAPOLATION_THRESHOLD)).all()
        assert flags.mean() <= 0.1, values  # about 1 in n + 1 of the context's own kind is past its farthest row
        outside = predicted(client, model=model, context_id=cid, queries=rows(SCALE * queries))
        assert all(outside["extrapolated"]) and min(outside["extrapolation"]) > 1.5, outside["extrapolation"]
    inline = predicted(client, model=MODEL, context={"x": rows(x), "y": rows(y)}, queries=rows(queries[:3]))
    np.testing.assert_allclose(inline["extrapolation"], expected[:3], rtol=1e-12)  # an inline context: the same


def test_the_arrow_answer_carries_the_same_columns(served, context, queries):
    _, client = served
    cid = stored(client, *context)
    mixed = np.concatenate([queries[:20], SCALE * queries[:20]])  # 20 direct rows, then micro-batched single ones
    for block in (mixed, mixed[:1], SCALE * mixed[:1]):
        body = {"model": MODEL, "context_id": cid, "queries": rows(block), "quantiles": [0.5]}
        as_json = predicted(client, **body)
        response = client.post("/v1/predict", json=body, headers=ARROW)
        assert response.status_code == 200, response.text
        table = pa.ipc.open_stream(response.content).read_all()
        assert table.schema.field("extrapolation").type == pa.float64()
        assert table.schema.field("extrapolated").type == pa.bool_()
        np.testing.assert_array_equal(table.column("extrapolation").to_numpy(), as_json["extrapolation"])
        assert table.column("extrapolated").to_pylist() == as_json["extrapolated"]
    assert as_json["extrapolated"] == [True]


def test_the_exact_gp_carries_the_same_measure(served, context, queries):
    _, client = served
    x, y = context[0][:60], context[1][:60]  # within GRIDPFN_GP_MAX_CONTEXT
    cid = stored(client, x, y)
    both = np.concatenate([queries[:5], SCALE * queries[:5]])
    beside = predicted(client, model=MODEL, context_id=cid, queries=rows(both), compare_gp=True)
    alone = predicted(client, "/v1/gp/predict", context_id=cid, queries=rows(both))
    assert alone["extrapolation"] == beside["extrapolation"] and alone["extrapolated"] == beside["extrapolated"]
    np.testing.assert_allclose(alone["extrapolation"], ContextGeometry.of(x).extrapolation(both), rtol=1e-12)
    assert all(alone["extrapolated"][5:])
    arrow = client.post("/v1/gp/predict", json={"context_id": cid, "queries": rows(both)}, headers=ARROW)
    table = pa.ipc.open_stream(arrow.content).read_all()
    assert table.column("extrapolated").to_pylist() == alone["extrapolated"]


def test_batch_results_and_the_client_carry_them(served, context, queries, tmp_path):
    server, client = served
    x, y = context
    cid = stored(client, x, y)
    loads = pd.DataFrame(np.concatenate([queries, SCALE * queries[:30]]), columns=FEATURES)
    path = tmp_path / "loads.parquet"
    loads.to_parquet(path, index=False)
    job = submit_file(client, path, cid)
    assert job.status_code == 202, job.text
    wait_for(client, job.json()["id"], done)
    response = client.get(f"/v1/batch-jobs/{job.json()['id']}/result")
    result = pd.read_parquet(pa.BufferReader(response.content))
    assert list(result.columns[-2:]) == ["extrapolation", "extrapolated"]
    assert result["extrapolation"].dtype == np.float64 and result["extrapolated"].dtype == bool
    expected = ContextGeometry.of(x).extrapolation(loads.to_numpy())
    np.testing.assert_allclose(result["extrapolation"].to_numpy(), expected, rtol=1e-12)
    assert result["extrapolated"][:100].mean() <= 0.1 and result["extrapolated"][100:].all()

    with GridPFNClient(server.url) as api:
        frame = api.predict(loads.iloc[95:105], MODEL, context_id=cid)
        assert list(frame.columns[-2:]) == ["extrapolation", "extrapolated"]
        np.testing.assert_allclose(frame["extrapolation"], expected[95:105], rtol=1e-12)
        assert frame["extrapolated"].tolist() == (expected[95:105] > EXTRAPOLATION_THRESHOLD).tolist()
        fetched = api.fetch(job.json()["id"])
        pd.testing.assert_series_equal(fetched["extrapolated"], result["extrapolated"])
    histogram = client.get(f"/ui/api/batch-jobs/{job.json()['id']}/risk-histogram")
    assert histogram.json()["extrapolated"] == int(result["extrapolated"].sum())
    assert histogram.json()["max_extrapolation"] == pytest.approx(result["extrapolation"].max())
