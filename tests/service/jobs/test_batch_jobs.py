"""Batch jobs in the embedded mode (no Redis): upload -> poll -> fetch, simulate specs, bad files,
cancel, and the client importable without torch. Real uvicorn server, real tiny checkpoint."""

from __future__ import annotations

import logging
import subprocess
import sys

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gridsim
from tests.service.batch_support import (
    FEATURES,
    OUTPUTS,
    QUANTILES,
    ROOT,
    block,
    context_id,
    done,
    expected_stats,
    fetch_frame,
    job_server,
    loads,
    submit_file,
    wait_for,
)
from tests.service.conftest import MODEL, assert_problem
from tests.service.engine.test_parquet_limits import decoy_bomb, footer_field

CHUNK = 400


@pytest.fixture(scope="module")
def embedded(model_dir, tmp_path_factory):
    jobs_dir = tmp_path_factory.mktemp("jobs-embedded")
    with job_server(model_dir, jobs_dir, None, job_chunk_rows=CHUNK) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield server, client, jobs_dir


def test_upload_poll_fetch_embedded(embedded, model_dir, tmp_path):
    server, client, _ = embedded
    cid = context_id(client)
    frame = loads(1500, seed=1)
    path = tmp_path / "loads.parquet"
    frame.to_parquet(path, index=False)
    response = submit_file(client, path, cid)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/batch-jobs/{job['id']}"
    assert job["state"] in ("queued", "running", "done") and job["rows_total"] == 1500 and job["chunks_total"] == 4
    final = wait_for(client, job["id"], done)
    assert final["rows_done"] == 1500 and final["chunks_done"] == 4 and final["rows_per_s"] > 0
    assert final["errors"] == [] and final["result"] == f"/v1/batch-jobs/{job['id']}/result"

    result = fetch_frame(client, job["id"])
    stats = ["mean", "std"] + [f"q{q!r}" for q in QUANTILES] + ["p_outside"]
    per_row = ["extrapolation", "extrapolated"]
    assert list(result.columns) == FEATURES + [f"{s}_{o}" for s in stats for o in OUTPUTS] + per_row
    pd.testing.assert_frame_equal(result[FEATURES], frame)  # every row once, in order, bit for bit
    want = expected_stats(model_dir, client, cid, frame.to_numpy(), CHUNK)
    for stat in stats:
        np.testing.assert_allclose(block(result, stat), want[stat], rtol=2e-6, atol=1e-6, err_msg=stat)
    assert np.isfinite(block(result, "std")).all() and (block(result, "std") > 0).all()
    q = np.stack([block(result, f"q{level!r}") for level in QUANTILES])
    assert (np.diff(q, axis=0) >= 0).all()
    assert ((block(result, "p_outside") >= 0) & (block(result, "p_outside") <= 1)).all()
    np.testing.assert_allclose(result["extrapolation"], want["extrapolation"], rtol=1e-12)
    assert (result["extrapolated"] == (want["extrapolation"] > 1.0)).all()

    as_csv = fetch_frame(client, job["id"], "csv")  # same table as CSV, by ?format=
    numbers = result.columns[:-1]
    np.testing.assert_allclose(as_csv[numbers].to_numpy(), result[numbers].to_numpy(), rtol=1e-6)
    assert (as_csv["extrapolated"] == result["extrapolated"]).all()
    accept = client.get(f"/v1/batch-jobs/{job['id']}/result", headers={"Accept": "text/csv"})
    assert accept.headers["content-type"].startswith("text/csv") and accept.text.startswith(f'"{FEATURES[0]}"')


def test_csv_columns_in_any_order_and_simulate_spec_with_ground_truth(embedded, tmp_path):
    _, client, _ = embedded
    cid = context_id(client)
    frame = loads(300, seed=2)
    path = tmp_path / "loads.csv"
    frame[FEATURES[::-1]].to_csv(path, index=False)
    job = submit_file(client, path, cid).json()
    result = fetch_frame(client, wait_for(client, job["id"], done)["id"])
    np.testing.assert_array_equal(result[FEATURES].to_numpy(), frame.to_numpy())  # CSV text round trip exact

    spec = {"network": "ieee33", "delta": 0.1, "n": 500, "seed": 3}
    response = client.post(
        "/v1/batch-jobs",
        json={"simulate": spec, "model": MODEL, "context_id": cid, "quantiles": [0.5], "with_ground_truth": True},
    )
    assert response.status_code == 202, response.text
    sim = fetch_frame(client, wait_for(client, response.json()["id"], done)["id"])
    truth = gridsim.simulate(500, 0.1, 3)
    np.testing.assert_array_equal(sim[FEATURES].to_numpy(), truth.x)  # the same scenarios as gridsim.simulate
    np.testing.assert_allclose(block(sim, "true"), truth.vm_pu, rtol=1e-6)
    np.testing.assert_allclose(block(sim, "err"), block(sim, "mean") - block(sim, "true"), atol=1e-6)
    assert sim["converged"].all() and "p_outside_" + OUTPUTS[0] not in sim


def _bad_files(tmp_path):
    frame = loads(50, seed=4)
    cases = {}

    def csv(name, f, **kw):
        path = tmp_path / f"{name}.csv"
        f.to_csv(path, index=False, **kw)
        return path

    cases["missing"] = (csv("missing", frame.drop(columns=["q_mvar_bus7"])), None, "q_mvar_bus7")
    cases["extra"] = (csv("extra", frame.assign(comment=1.0)), None, "comment")
    nan = frame.copy()
    nan.loc[16, "p_mw_bus5"] = np.nan
    cases["nan"] = (csv("nan", nan), 17, "p_mw_bus5")
    inf = frame.copy()
    inf.loc[3, "q_mvar_bus33"] = np.inf
    cases["inf"] = (csv("inf", inf), 4, "q_mvar_bus33")
    text = frame.astype(object)
    text.loc[41, "p_mw_bus9"] = "12kW"
    cases["text"] = (csv("text", text), 42, "p_mw_bus9")
    underscore = frame.astype(object)
    underscore.loc[29, "q_mvar_bus18"] = "1_0"  # Python's float() reads 10; the CSV reader does not
    cases["underscore"] = (csv("underscore", underscore), 30, "q_mvar_bus18")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "groups.parquet", row_group_size=30)
    groups = (tmp_path / "groups.parquet").read_bytes()  # 30 + 20 rows; the footer: the file's rows stated 40
    (tmp_path / "rows.parquet").write_bytes(footer_field(groups, 50, 40, 0))
    cases["parquet-row-counts"] = (tmp_path / "rows.parquet", None, None)
    cases["header-only"] = (csv("header", frame.iloc[:0]), None, None)
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    cases["zero-bytes"] = (empty, None, None)
    strings = pa.Table.from_pandas(frame.astype({"p_mw_bus3": str}), preserve_index=False)
    strings = strings.set_column(
        strings.schema.get_field_index("p_mw_bus3"), "p_mw_bus3", pa.array(["0.1"] * 10 + ["abc"] + ["0.1"] * 39)
    )
    pq.write_table(strings, tmp_path / "strings.parquet")
    cases["parquet-string"] = (tmp_path / "strings.parquet", 11, "p_mw_bus3")
    pq.write_table(pa.Table.from_pandas(frame.iloc[:0], preserve_index=False), tmp_path / "none.parquet")
    cases["parquet-empty"] = (tmp_path / "none.parquet", None, None)
    (tmp_path / "bomb.parquet").write_bytes(decoy_bomb(pa.Table.from_pandas(frame, preserve_index=False))[0])
    cases["parquet-decoy-bomb"] = (tmp_path / "bomb.parquet", None, FEATURES[0])  # 32 MiB behind a decoy page
    return cases


def test_bad_files_are_refused_naming_row_and_column_and_nothing_is_queued(embedded, tmp_path):
    server, client, jobs_dir = embedded
    cid = context_id(client)
    before = sorted(p.name for p in jobs_dir.iterdir())
    for name, (path, row, column) in _bad_files(tmp_path).items():
        body = assert_problem(submit_file(client, path, cid), 422, "file")
        error = body["errors"][0]
        assert (error["row"], error["column"]) == (row, column), (name, body)
        if row is not None:
            assert f"row {row}" in body["detail"] and column in body["detail"], body
    assert sorted(p.name for p in jobs_dir.iterdir()) == before  # no job directory left behind
    assert server.app.state.jobs.states.active() == []


def test_request_errors(embedded, tmp_path):
    _, client, _ = embedded
    cid = context_id(client)
    path = tmp_path / "ok.csv"
    loads(10, seed=6).to_csv(path, index=False)
    assert_problem(submit_file(client, path, cid, model="nope"), 404, "model")
    assert_problem(submit_file(client, path, "0" * 64), 404, "context_id")
    assert_problem(submit_file(client, path, cid, quantiles="0.5,1.5"), 422, "quantiles[1]")
    assert_problem(submit_file(client, path, cid, voltage_band="1.05,0.95"), 422)
    assert_problem(
        client.post("/v1/batch-jobs", data={"model": MODEL, "context_id": cid}, files={"x": b"1"}), 422, "x"
    )  # an undeclared form field, refused like an unknown JSON field
    assert_problem(
        client.post("/v1/batch-jobs", data={"model": MODEL, "context_id": cid}, files={"file": b"1"}), 422, "file"
    )
    assert_problem(client.post("/v1/batch-jobs", json={"model": MODEL, "context_id": cid}), 422, "simulate")
    assert_problem(client.post("/v1/batch-jobs", content=b"x", headers={"content-type": "text/plain"}), 415)
    huge = b'{"pad": "' + b"x" * (1 << 20) + b'"}'  # JSON submissions carry a spec, never data
    assert_problem(
        client.post("/v1/batch-jobs", content=huge, headers={"content-type": "application/json"}), 413, "body"
    )
    assert_problem(client.get("/v1/batch-jobs/" + "a" * 32), 404, "job_id")
    assert_problem(client.get("/v1/batch-jobs/not-an-id"), 422)


def test_cancel_embedded(model_dir, tmp_path):
    with job_server(model_dir, tmp_path / "jobs", None, job_chunk_rows=50, job_chunk_pause_s=0.05) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            cid = context_id(client)
            path = tmp_path / "loads.parquet"
            loads(2000, seed=7).to_parquet(path, index=False)
            job = submit_file(client, path, cid).json()
            wait_for(client, job["id"], lambda s: s["chunks_done"] >= 2)
            cancelled = client.delete(f"/v1/batch-jobs/{job['id']}")
            assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled"
            stopped = client.get(f"/v1/batch-jobs/{job['id']}").json()["chunks_done"]
            assert stopped < 40
            import time

            time.sleep(0.3)
            after = client.get(f"/v1/batch-jobs/{job['id']}").json()
            assert after["state"] == "cancelled" and after["chunks_done"] <= stopped + 1  # at most the chunk in flight
            assert_problem(client.get(f"/v1/batch-jobs/{job['id']}/result"), 409, "job_id")
            assert client.delete(f"/v1/batch-jobs/{job['id']}").status_code == 204  # a finished job is deleted
            assert_problem(client.get(f"/v1/batch-jobs/{job['id']}"), 404)
            assert not (tmp_path / "jobs" / job["id"]).exists()


def test_client_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import service.client\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "assert not any(m.startswith(('models', 'gridsim', 'service.jobs')) for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_janitor_removes_only_old_orphaned_job_directories(tmp_path):
    import os
    import time

    from service.jobs.janitor import sweep
    from service.jobs.jobspec import JobSpec
    from service.jobs.states import MemoryJobStates

    states = MemoryJobStates()
    now = time.time()
    dirs = {name: tmp_path / (name * 32) for name in "abc"}
    for directory in dirs.values():
        (directory / "parts").mkdir(parents=True)
    os.utime(dirs["a"], (now - 7200, now - 7200))  # old, no record -> removed
    os.utime(dirs["b"], (now - 7200, now - 7200))  # old, but its job still has a record -> kept
    states.create(
        JobSpec(
            id="b" * 32,
            model=MODEL,
            model_version="1",
            context_id="0" * 64,
            network="ieee33",
            features=tuple(FEATURES),
            outputs=tuple(OUTPUTS),
            rows=1,
            chunk_rows=1,
            source="csv",
            created_at=now,
        )
    )
    # "c": recent, no record (an upload still being validated) -> kept; "not-a-job": not a job id -> kept
    (tmp_path / "not-a-job").mkdir()
    assert sweep(tmp_path, states, max_age_s=3600, now=now) == ["a" * 32]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["b" * 32, "c" * 32, "not-a-job"])


def test_streamed_result_publishes_only_a_complete_in_order_run(tmp_path):
    """result.parquet streamed chunk by chunk is published only when every chunk came through in order;
    otherwise it is discarded and the parts stay for `assemble`."""
    from service.jobs import results
    from service.jobs.jobspec import JobSpec

    spec = JobSpec(
        id="j",
        model=MODEL,
        model_version="0",
        context_id="0" * 64,
        network="ieee33",
        features=("a",),
        outputs=("b",),
        rows=5,
        chunk_rows=2,
        source="parquet",
        created_at=0.0,
    )
    tables = [pa.table({"a": np.arange(start, min(start + 2, 5), dtype=float)}) for start in (0, 2, 4)]
    files = results.JobFiles(tmp_path, "j")
    files.parts.mkdir(parents=True)
    streamed = results.StreamedResult(files)
    with pytest.raises(RuntimeError, match="out of order"):
        streamed.append(1, tables[1])
    for i in (0, 1):
        streamed.append(i, tables[i])
    assert not streamed.commit(spec)  # chunk 2 never came: nothing published, the partial file removed
    assert not files.result.exists() and not streamed.tmp.exists() and files.parts.exists()
    streamed = results.StreamedResult(files)
    for i, table in enumerate(tables):
        streamed.append(i, table)
    assert streamed.commit(spec)
    assert pq.read_table(files.result).column("a").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert not files.parts.exists()


def test_a_row_the_network_cannot_carry_fails_the_job_naming_its_file_row(embedded, tmp_path, caplog):
    """network-fit refuses loads beyond what the feeder carries; a batch job names the file's row (1-based), before
    its first chunk (tests/service/jobs/test_chunks.py: the check itself). The worker logs the client's refusal as
    a warning, not as its own failure (it logged an ERROR with a traceback, "failed in chunk 0")."""
    caplog.set_level(logging.WARNING, logger="service.jobs.runner")
    server, client, _ = embedded
    cid = context_id(client)
    frame = loads(CHUNK + 10, seed=3)
    frame.iloc[CHUNK + 4] *= 50.0  # the second chunk's fifth row: file row CHUNK + 5
    path = tmp_path / "beyond.parquet"
    frame.to_parquet(path, index=False)
    response = submit_file(client, path, cid, model="network-fit")
    assert response.status_code == 202, response.text
    final = wait_for(client, response.json()["id"], lambda s: s["state"] in ("failed", "done"))
    assert final["state"] == "failed" and final["chunks_done"] == 0  # refused before the first chunk
    assert final["errors"][0]["message"].startswith(f"file: rows [{CHUNK + 5}]: ")
    assert "beyond what the feeder can carry" in final["errors"][0]["message"]
    assert (final["errors"][0]["location"], final["errors"][0]["field"]) == ("body", "file")  # the field refused
    mine = [r for r in caplog.records if r.name == "service.jobs.runner" and final["id"] in r.getMessage()]
    assert [r.levelno for r in mine] == [logging.WARNING] and mine[0].exc_info is None, mine
