"""Batch jobs through real Redis and a real `gridpfn worker` process: upload -> poll -> fetch,
the CLI (submit --wait, status, fetch), and bad files leaving nothing on the stream."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import redis

from service.commands.cli import main
from tests.service.batch_support import (
    FEATURES,
    QUANTILES,
    block,
    context_id,
    done,
    expected_stats,
    fetch_frame,
    loads,
    server_and_worker,
    submit_file,
    wait_for,
)
from tests.service.conftest import MODEL, assert_problem

CHUNK = 500


@pytest.fixture(scope="module")
def stack(model_dir, redis_url, tmp_path_factory):
    """Server (Redis mode, its own stream) + one worker process sharing a jobs directory."""
    jobs_dir = tmp_path_factory.mktemp("jobs-redis")
    with server_and_worker(model_dir, redis_url, jobs_dir, CHUNK) as (server, client, queue, _):
        yield server, client, jobs_dir, queue


def test_upload_poll_fetch_with_worker(stack, model_dir, tmp_path):
    server, client, _, _ = stack
    assert server.app.state.runtime.store.kind == "redis"
    cid = context_id(client)
    frame = loads(3000, seed=11)
    path = tmp_path / "loads.csv"
    frame.to_csv(path, index=False)
    job = submit_file(client, path, cid).json()
    assert job["state"] in ("queued", "running", "done") and job["rows_total"] == 3000 and job["chunks_total"] == 6
    final = wait_for(client, job["id"], done)
    assert final["rows_done"] == 3000 and final["attempts"] == 1 and final["rows_per_s"] > 0
    result = fetch_frame(client, job["id"])
    np.testing.assert_array_equal(result[FEATURES].to_numpy(), frame.to_numpy())
    want = expected_stats(model_dir, client, cid, frame.to_numpy(), CHUNK)
    for stat in ["mean", "std", "p_outside"] + [f"q{q!r}" for q in QUANTILES]:
        np.testing.assert_allclose(block(result, stat), want[stat], rtol=2e-6, atol=1e-6, err_msg=stat)


def test_cli_submit_wait_status_fetch(stack, tmp_path, capsys):
    server, client, _, _ = stack
    cid = context_id(client)
    frame = loads(700, seed=12)
    path = tmp_path / "loads.parquet"
    frame.to_parquet(path, index=False)
    out = tmp_path / "out.parquet"
    assert (
        main(
            [
                "batch",
                "submit",
                "--url",
                server.url,
                str(path),
                "--context",
                cid,
                "--model",
                MODEL,
                "--quantiles",
                "0.1,0.9",
                "--wait",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    job_id = captured.out.strip().splitlines()[0]
    assert "rows" in captured.err  # the progress bar
    result = pd.read_parquet(out)
    pd.testing.assert_frame_equal(result[FEATURES], frame)
    assert "q0.1_vm_pu_bus2" in result and "p_outside_vm_pu_bus2" not in result

    assert main(["batch", "status", "--url", server.url, job_id]) == 0
    assert '"state": "done"' in capsys.readouterr().out
    again = tmp_path / "again.csv"
    assert main(["batch", "fetch", "--url", server.url, job_id, "-o", str(again)]) == 0
    as_csv, numbers = pd.read_csv(again), result.columns.drop("extrapolated")
    np.testing.assert_allclose(as_csv[numbers].to_numpy(), result[numbers].to_numpy(), rtol=1e-6)
    assert (as_csv["extrapolated"] == result["extrapolated"]).all()
    with pytest.raises(SystemExit):
        main(["batch", "status", "--url", server.url, "f" * 32])
    assert '"status": 404' in capsys.readouterr().err


def test_bad_file_leaves_nothing_on_the_stream(stack, redis_url, tmp_path):
    _, client, jobs_dir, queue = stack
    cid = context_id(client)
    stream = redis.Redis.from_url(redis_url)
    before_len, before_dirs = stream.xlen(f"{queue}:stream"), sorted(jobs_dir.iterdir())
    frame = loads(30, seed=13)
    frame.loc[20, "q_mvar_bus12"] = np.nan
    path = tmp_path / "nan.parquet"
    frame.to_parquet(path, index=False)
    body = assert_problem(submit_file(client, path, cid), 422, "file")
    assert (body["errors"][0]["row"], body["errors"][0]["column"]) == (21, "q_mvar_bus12")
    assert stream.xlen(f"{queue}:stream") == before_len and sorted(jobs_dir.iterdir()) == before_dirs
