"""A batch result as planners read it, through real Redis, a real `gridpfn worker` and real HTTP: the long
layout (a row per input row and bus) equals the wide file reshaped, value for value, as Parquet and CSV;
the per-bus summary equals numpy on the wide file; unknown, unfinished and bad requests name the field.
The reshape itself, nulls and per-bus metadata included, is also checked on a table built here."""

from __future__ import annotations

import io
import json
import uuid

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gridsim
from service.client import GridPFNClient, GridPFNError
from service.jobs import long_results
from tests.gridsim.feeder_cases import CASE4_M
from tests.service.batch_support import (
    BAND,
    OUTPUTS,
    QUANTILES,
    WorkerProcess,
    block,
    context_id,
    done,
    fetch_frame,
    job_server,
    loads,
    submit_file,
    wait_for,
    worker_env,
)
from tests.service.conftest import MODEL, assert_problem

CHUNK = 250  # 900 rows: 4 wide row groups, the last one short
ROWS = 900
SLICE = 128  # long slices that cut across the wide row groups
NET = gridsim.network("ieee33")
PARQUET = "application/vnd.apache.parquet"
STATS = ["mean", "std"] + [f"q{q!r}" for q in QUANTILES] + ["p_outside"]


@pytest.fixture(scope="module")
def stack(model_dir, redis_url, tmp_path_factory):
    """Server (Redis mode, its own stream) + one worker process pausing between chunks (a job of many
    chunks stays unfinished long enough to be asked for its result)."""
    jobs_dir = tmp_path_factory.mktemp("jobs-long")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = worker_env(redis_url, model_dir, jobs_dir, queue, GRIDPFN_JOB_CHUNK_PAUSE_S="0.05")
    worker = WorkerProcess(jobs_dir.parent / f"{queue}-worker.log", env)
    try:
        with job_server(model_dir, jobs_dir, redis_url, job_chunk_rows=CHUNK, job_queue=queue) as server:
            worker.wait_ready()
            with httpx.Client(base_url=server.url, timeout=60) as client:
                yield server, client
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def finished(stack, tmp_path_factory):
    """A done job of ROWS uploaded rows with quantiles and a band; its wide result as a DataFrame."""
    server, client = stack
    cid = context_id(client)
    path = tmp_path_factory.mktemp("long-input") / "loads.parquet"
    loads(ROWS, seed=21).to_parquet(path, index=False)
    job = submit_file(client, path, cid).json()
    wait_for(client, job["id"], done)
    return job["id"], fetch_frame(client, job["id"]), cid


def _long(client: httpx.Client, job_id: str, fmt: str) -> pd.DataFrame:
    response = client.get(f"/v1/batch-jobs/{job_id}/result", params={"layout": "long", "format": fmt})
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == f'attachment; filename="{job_id}-long.{fmt}"'
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(response.content))
    return pd.read_parquet(pa.BufferReader(response.content))


def _assert_reshaped(long: pd.DataFrame, wide: pd.DataFrame) -> None:
    """Every long value is its wide cell: row-major (input row, then bus), bit for bit."""
    n, k = len(wide), len(OUTPUTS)
    assert len(long) == n * k
    np.testing.assert_array_equal(long["row"], np.repeat(np.arange(n), k))
    np.testing.assert_array_equal(long["bus"], np.tile(NET.output_buses, n))
    names = [NET.bus_name(b) for b in NET.output_buses]
    np.testing.assert_array_equal(long["bus_name"].astype(str), np.tile(names, n))
    for stat in STATS:
        np.testing.assert_array_equal(long[stat].to_numpy().reshape(n, k), block(wide, stat), err_msg=stat)
    for name in ("extrapolation", "extrapolated"):
        np.testing.assert_array_equal(long[name], np.repeat(wide[name].to_numpy(), k), err_msg=name)
    for column, prefix in (("p_mw", "p_mw_bus"), ("q_mvar", "q_mvar_bus")):  # IEEE 33: a load at every bus
        want = wide[[f"{prefix}{b}" for b in NET.output_buses]].to_numpy()
        np.testing.assert_array_equal(long[column].to_numpy().reshape(n, k), want, err_msg=column)


def test_long_layout_is_the_wide_result_reshaped_as_parquet_and_csv(stack, finished, monkeypatch):
    _, client = stack
    job_id, wide, _ = finished
    monkeypatch.setattr(long_results, "SLICE_ROWS", SLICE)  # the server runs in this process
    response = client.get(f"/v1/batch-jobs/{job_id}/result", params={"layout": "long"})
    assert response.headers["content-type"] == PARQUET
    as_file = pq.ParquetFile(pa.BufferReader(response.content))
    assert as_file.num_row_groups == -(-ROWS // SLICE)  # streamed a slice at a time
    long = as_file.read().to_pandas()
    assert list(long.columns) == (
        ["row", "bus", "bus_name", *STATS, "extrapolation", "extrapolated", "metered", "readings", "p_mw", "q_mvar"]
    )
    _assert_reshaped(long, wide)
    assert long["metered"].all() and (long["readings"] == 60).all()  # the context's per-bus facts, per entry
    as_csv = _long(client, job_id, "csv")  # the same text the wide CSV has, so the same numbers
    wide_csv = fetch_frame(client, job_id, "csv")
    _assert_reshaped(as_csv, wide_csv)
    accept = client.get(f"/v1/batch-jobs/{job_id}/result?layout=long", headers={"Accept": "text/csv"})
    assert accept.headers["content-type"].startswith("text/csv") and accept.text.startswith('"row","bus"')
    default = client.get(f"/v1/batch-jobs/{job_id}/result")  # wide stays the default
    assert pq.read_schema(pa.BufferReader(default.content)).names == list(wide.columns)


def test_summary_is_numpy_on_the_wide_file(stack, finished):
    _, client = stack
    job_id, wide, cid = finished
    response = client.get(f"/v1/batch-jobs/{job_id}/summary", params={"hours_per_row": 0.25})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["rows"] == ROWS and answer["extremes_of"] == [0.05, 0.95] and answer["voltage_band"] == BAND
    assert answer["context_id"] == cid and answer["extrapolated_rows"] == int(wide["extrapolated"].sum())
    summary = pd.DataFrame(answer["summary"]).set_index("bus")
    assert list(summary.index) == list(NET.output_buses)
    assert list(summary["bus_name"]) == [NET.bus_name(b) for b in NET.output_buses]
    p = block(wide, "p_outside").astype(np.float64)
    assert p.max() > 0.5 and (p.max(axis=0) == 0).any()  # some buses at risk, some not: a real test
    np.testing.assert_array_equal(summary["max_p_outside"], p.max(axis=0))
    far = np.maximum(1.0 - block(wide, "q0.05"), block(wide, "q0.95") - 1.0)  # ties in P: the farthest row
    np.testing.assert_array_equal(summary["worst_row"], np.where(p == p.max(axis=0), far, -np.inf).argmax(axis=0))
    np.testing.assert_allclose(summary["mean_p_outside"], p.mean(axis=0), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(summary["hours_outside"], p.sum(axis=0) * 0.25, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(summary["hours_outside_std"], np.sqrt((p * (1 - p)).sum(axis=0)) * 0.25, rtol=1e-12)
    np.testing.assert_array_equal(summary["lowest_vm_pu"], block(wide, "q0.05").min(axis=0))
    np.testing.assert_array_equal(summary["highest_vm_pu"], block(wide, "q0.95").max(axis=0))
    without = client.get(f"/v1/batch-jobs/{job_id}/summary").json()
    assert without["hours_per_row"] is None and all(s["hours_outside"] is None for s in without["summary"])
    assert [s["max_p_outside"] for s in without["summary"]] == list(summary["max_p_outside"])


def test_the_client_reads_long_results_and_summaries_as_frames(stack, finished, tmp_path):
    server, _ = stack
    job_id, wide, _ = finished
    with GridPFNClient(server.url) as client:
        long = client.fetch(job_id, layout="long")
        summary = client.summary(job_id, hours_per_row=1.0)
        written = client.fetch(job_id, tmp_path / "long.csv", layout="long")
        with pytest.raises(GridPFNError) as unknown:
            client.summary("0" * 32)
    _assert_reshaped(long, wide)
    assert long.attrs["metered"] == [True] * len(OUTPUTS)  # the result's metadata, as a wide fetch has it
    _assert_reshaped(pd.read_csv(written), pd.read_csv(io.StringIO(_wide_csv(stack, job_id))))
    assert summary.index.name == "bus" and list(summary.index) == list(NET.output_buses)
    p = block(wide, "p_outside").astype(np.float64)
    np.testing.assert_allclose(summary["hours_outside"], p.sum(axis=0), rtol=1e-12, atol=1e-300)
    assert summary.attrs["rows"] == ROWS and summary.attrs["job_id"] == job_id
    assert unknown.value.status == 404


def _wide_csv(stack, job_id: str) -> str:
    return stack[1].get(f"/v1/batch-jobs/{job_id}/result", params={"format": "csv"}).text


def test_unknown_unfinished_and_bad_requests_name_the_field(stack, finished, tmp_path):
    _, client = stack
    job_id, _, cid = finished
    unknown = "0" * 32
    assert_problem(client.get(f"/v1/batch-jobs/{unknown}/summary"), 404, "job_id")
    assert_problem(client.get(f"/v1/batch-jobs/{unknown}/result", params={"layout": "long"}), 404, "job_id")
    for bad in ("0", "-1", "nan", "inf", "9000", "a lot"):  # > 0, at most a year of hours per row
        body = assert_problem(client.get(f"/v1/batch-jobs/{job_id}/summary", params={"hours_per_row": bad}), 422)
        assert [e["field"] for e in body["errors"]] == ["hours_per_row"], (bad, body)
    assert_problem(client.get(f"/v1/batch-jobs/{job_id}/result", params={"layout": "tall"}), 422, "layout")

    path = tmp_path / "many.parquet"
    loads(CHUNK * 40, seed=22).to_parquet(path, index=False)  # 40 chunks, 0.05 s apart: not done for 2 s
    job = submit_file(client, path, cid).json()
    for url, params in ((f"{job['id']}/summary", {}), (f"{job['id']}/result", {"layout": "long"})):
        body = assert_problem(client.get(f"/v1/batch-jobs/{url}", params=params), 409, "job_id")
        assert body["type"].endswith("job-not-done") and "done" in body["detail"]
    assert client.delete(f"/v1/batch-jobs/{job['id']}").status_code == 202
    assert "cancelled" in assert_problem(client.get(f"/v1/batch-jobs/{job['id']}/summary"), 409, "job_id")["detail"]

    spec = {"network": "ieee33", "delta": 0.1, "n": 20, "seed": 1}  # no band: no P(outside) to count hours with
    plain = client.post("/v1/batch-jobs", json={"simulate": spec, "model": MODEL, "context_id": cid})
    wait_for(client, plain.json()["id"], done)
    url = f"/v1/batch-jobs/{plain.json()['id']}/summary"
    assert_problem(client.get(url, params={"hours_per_row": 1}), 422, "hours_per_row")
    answer = client.get(url).json()  # no band, no quantiles: the fields that need them are null, not made up
    assert answer["extremes_of"] == [None, None] and answer["rows"] == 20
    assert all(s["max_p_outside"] is None and s["lowest_vm_pu"] is None for s in answer["summary"])


def test_reshape_keeps_nulls_per_row_columns_and_per_bus_metadata():
    """A wide table with a ground truth that did not converge in one row (nulls), `converged`, and network-fit's
    `determined` in its metadata: the long table carries all of it, on a feeder whose buses are not all loads."""
    outputs, buses, names = ("vm_pu_bus2", "vm_pu_bus3", "vm_pu_bus4"), (2, 3, 4), ("a", "b", "c")
    features = ["p_mw_bus3", "q_mvar_bus3"]  # one load, at bus 3
    n = 5
    rng = np.random.default_rng(0)
    columns: dict[str, pa.Array] = {f: pa.array(rng.random(n)) for f in features}
    converged = np.array([True, True, False, True, True])
    for stat in ("mean", "std", "true"):
        for output in outputs:
            columns[f"{stat}_{output}"] = pa.array(rng.random(n), mask=~converged if stat == "true" else None)
    columns["converged"] = pa.array(converged)
    columns["extrapolation"] = pa.array(rng.random(n))
    table = pa.table(columns)
    about = {"metered": [True, False, True], "readings": [5, 0, 5], "determined": [0.9, 0.1, 0.8]}
    table = table.replace_schema_metadata({b"gridpfn": json.dumps(about)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=2)
    source = pq.ParquetFile(pa.BufferReader(buffer.getvalue()))
    layout = long_results.WideLayout.of(source.schema_arrow, features, outputs, buses, names)
    assert layout.stats == ("mean", "std", "true") and layout.per_row == ("converged", "extrapolation")
    long = pa.Table.from_batches(list(long_results.long_batches(source, layout, slice_rows=2)))
    assert long.num_rows == n * 3 and long.schema.metadata[b"gridpfn"] == table.schema.metadata[b"gridpfn"]
    got = long.to_pydict()
    assert got["true"][6:9] == [None, None, None]  # row 2's truth, at each bus: null as in the wide file
    assert got["converged"] == np.repeat(converged, 3).tolist()
    assert got["determined"] == [0.9, 0.1, 0.8] * n and got["metered"] == [True, False, True] * n
    assert got["bus_name"] == ["a", "b", "c"] * n and got["row"] == np.repeat(np.arange(n), 3).tolist()
    p = table.column("p_mw_bus3").to_pylist()
    assert got["p_mw"] == [v for value in p for v in (None, value, None)]  # a load at bus 3 alone
    for stat in ("mean", "std"):
        wide = np.column_stack([table.column(f"{stat}_{o}").to_numpy() for o in outputs])
        np.testing.assert_array_equal(np.array(got[stat]).reshape(n, 3), wide)
    with pytest.raises(long_results.LayoutError, match="lacks"):
        long_results.WideLayout.of(table.drop_columns(["std_vm_pu_bus4"]).schema, features, outputs, buses, names)


def test_an_uploaded_feeder_names_its_buses_even_after_its_upload_expired(stack, redis_url, redis_server):
    """An uploaded feeder with a bus without a load: buses and names are the served network's, that bus has
    null loads; once the stored upload is gone the job's own copy of the network names the buses. Uploaded
    through the session's server on the same Redis, as another replica would (its upload sandbox is running
    already; this server's would start for this one upload: seconds of imports), and used through this one."""
    import redis

    server, client = stack
    uploaded = httpx.post(
        f"{redis_server.url}/v1/networks", content=CASE4_M, headers={"content-type": "text/plain"}, timeout=60
    )
    assert uploaded.status_code == 201, uploaded.text
    nid = uploaded.json()["id"]
    spec = {"network": nid, "delta": 0.2, "n": 60, "seed": 0}
    cid = client.post("/v1/context-sets", json={"simulate": spec}).json()["id"]
    job = client.post(
        "/v1/batch-jobs",
        json={"simulate": {**spec, "n": 30}, "model": "physics-fit", "context_id": cid, "voltage_band": BAND},
    ).json()
    wait_for(client, job["id"], done)
    net = server.app.state.runtime.networks.resolved[nid][0]
    names = [net.bus_name(b) for b in net.output_buses]
    loaded = set(net.load_buses)
    assert set(net.output_buses) - loaded, "a bus without a load: the test needs one"

    def check() -> None:
        long = _long(client, job["id"], "parquet")
        first = long[long["row"] == 0]
        assert list(first["bus"]) == list(net.output_buses)
        assert list(first["bus_name"]) == names
        assert first["p_mw"].isna().tolist() == [b not in loaded for b in net.output_buses]
        summary = client.get(f"/v1/batch-jobs/{job['id']}/summary").json()["summary"]
        assert [s["bus_name"] for s in summary] == list(first["bus_name"])

    check()
    store = redis.Redis.from_url(redis_url)
    assert store.delete(f"gridpfn:netsrc:{nid}", f"gridpfn:net:{nid}") == 2  # the upload expired
    server.app.state.runtime.networks.resolved.pop(nid)
    assert client.get(f"/v1/networks/{nid}").status_code == 404
    check()
