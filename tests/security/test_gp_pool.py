"""Finding 6 of issue 28: exact-GP fits cannot starve the models.

Real `gridpfn serve` processes whose GP pool is one worker process and no queue: a second GP
request while a fit runs is refused at once (429, Retry-After, problem+json naming the field),
a one-row model predict is answered while that fit is still running, the GP's answers equal
models.gp run in this process, and a fit past GRIDPFN_GP_TIMEOUT_S is stopped (its process gone)
and answered 504, after which the GP answers again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from service.engine import warmup
from service.settings import Settings
from tests.security.conftest import assert_stayed_healthy, serve_process, watched
from tests.service.conftest import MODEL, assert_problem, metric, rows

GP_ITER = 10  # L-BFGS iterations of the servers' GP: a 300-row fit takes seconds, a 60-row one well under
POOL_ENV = dict(
    GRIDPFN_GP_WORKERS="1", GRIDPFN_GP_QUEUE_SIZE="0", GRIDPFN_GP_MAX_CONTEXT="600", GRIDPFN_GP_MAX_ITER=str(GP_ITER)
)
SLOW_ROWS = 300  # the fit that keeps the pool busy (its hyperparameters are optimised on 256 of them)


@pytest.fixture(scope="module")
def gp_server(model_dir, tmp_path_factory):
    with serve_process(model_dir, tmp_path_factory.mktemp("gp-pool"), GRIDPFN_GP_TIMEOUT_S="120", **POOL_ENV) as server:
        yield server


def _simulated(api, n: int, seed: int) -> str:
    response = api.post(
        "/v1/context-sets", json={"simulate": {"network": "ieee33", "delta": 0.1, "n": n, "seed": seed}}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _uploaded(api, x: np.ndarray, y: np.ndarray) -> str:
    response = api.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _gp_workers(server_pid: int) -> list[int]:
    """Live (not zombie) GP worker processes the server started."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == server_pid and state != "Z" and b"service.engine.gp_worker" in cmdline:
            found.append(int(proc.name))
    return found


def test_a_full_gp_pool_refuses_at_once_while_model_predicts_are_answered(gp_server, scenarios):
    x, y = scenarios
    with gp_server.client() as api, gp_server.client() as fitter:
        slow = _simulated(api, SLOW_ROWS, seed=11)
        small = _uploaded(api, x[:60], y[:60])
        one_row = {"model": MODEL, "context_id": small, "queries": rows(x[100:101])}
        assert api.post("/v1/predict", json=one_row).status_code == 200  # encoded before the fit starts
        fit: dict = {}

        def run_fit() -> None:
            fit["response"] = fitter.post("/v1/gp/predict", json={"context_id": slow, "queries": rows(x[:2])})

        thread = threading.Thread(target=run_fit)
        thread.start()
        _wait_for(lambda: metric(api, "gridpfn_gp_running") == 1, "the slow fit to start")
        with watched(gp_server) as watch:
            busy = api.post("/v1/gp/predict", json={"context_id": small, "queries": rows(x[:1])})
            busy_compare = api.post("/v1/predict", json={**one_row, "compare_gp": True})
            predicted = api.post("/v1/predict", json=one_row)
            fit_was_running = thread.is_alive() and "response" not in fit
        thread.join(timeout=300)
        assert_stayed_healthy(watch, gp_server)

    assert fit_was_running, "the slow fit ended before the other requests: the test proved nothing"
    assert predicted.status_code == 200 and np.asarray(predicted.json()["mean"]).shape == (1, y.shape[1])
    for refused, field in ((busy, "context_id"), (busy_compare, "compare_gp")):
        body = assert_problem(refused, 429, field)
        assert body["type"].endswith(":gp-busy"), body
        assert int(refused.headers["Retry-After"]) >= 1
        assert all(e["expected"] for e in body["errors"]), body
    assert fit["response"].status_code == 200, fit["response"].text
    assert fit["response"].json()["timing"]["gp_fit_cached"] is False


def test_gp_answers_are_those_of_models_gp_in_process(gp_server, scenarios):
    x, y = scenarios
    context_x, context_y, queries = x[120:180], y[120:180], x[:5]
    with gp_server.client() as api:
        cid = _uploaded(api, context_x, context_y)
        gp_only = api.post(
            "/v1/gp/predict",
            json={"context_id": cid, "queries": rows(queries), "quantiles": [0.05, 0.95], "voltage_band": [0.95, 1.05]},
        )
        compared = api.post(
            "/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(queries), "compare_gp": True}
        )
    assert gp_only.status_code == 200 and compared.status_code == 200, (gp_only.text, compared.text)

    method = warmup.gp_method(Settings(gp_max_iter=GP_ITER))  # what the server builds from the same setting
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the GP worker runs (GRIDPFN_TORCH_THREADS)
    try:
        expected = method.summarize(method.fit(context_x, context_y), queries, (0.05, 0.95), (0.95, 1.05))
    finally:
        torch.set_num_threads(threads)
    answer = gp_only.json()
    np.testing.assert_array_equal(np.asarray(answer["mean"]), expected.mean)
    np.testing.assert_array_equal(np.asarray(answer["std"], dtype=np.float32), expected.std.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(answer["quantiles"]["0.05"]), expected.quantiles[0])
    np.testing.assert_array_equal(
        np.asarray(answer["p_outside_band"], dtype=np.float32), expected.p_outside.astype(np.float32)
    )
    np.testing.assert_array_equal(np.asarray(compared.json()["gp"]["mean"]), expected.mean)
    assert compared.json()["timing"]["gp_fit_cached"] is True  # the same worker kept the fit


def test_a_fit_past_the_time_limit_is_stopped_and_answered_504(model_dir, tmp_path, scenarios):
    x, y = scenarios
    limit_s = 1.0  # the slow fit takes several times this; the small one a fraction of it
    # GP workers at the server's own priority: niced (GRIDPFN_GP_NICE, 10 by default) on a host busy with other
    # work (pytest-xdist's other worker) the 12-row fit could wait past the limit for a core
    env = dict(GRIDPFN_GP_TIMEOUT_S=str(limit_s), GRIDPFN_GP_NICE="0", **POOL_ENV)
    with (
        serve_process(model_dir, tmp_path, **env) as server,
        server.client() as api,
    ):
        slow = _simulated(api, SLOW_ROWS, seed=12)
        small = _uploaded(api, x[:12], y[:12])
        assert _gp_workers(server.proc.pid) == []  # started on first use
        t0 = time.monotonic()
        stopped = api.post("/v1/gp/predict", json={"context_id": slow, "queries": rows(x[:1])})
        waited_s = time.monotonic() - t0
        body = assert_problem(stopped, 504, "context_id")
        assert body["type"].endswith(":gp-timeout") and "GRIDPFN_GP_TIMEOUT_S" in body["detail"], body
        assert waited_s >= limit_s
        _wait_for(lambda: _gp_workers(server.proc.pid) == [], "the stopped worker to be gone", timeout_s=10)
        after = api.post("/v1/gp/predict", json={"context_id": small, "queries": rows(x[:1])})
        assert after.status_code == 200, after.text  # a fresh worker took the next request
        assert len(_gp_workers(server.proc.pid)) == 1
        assert metric(api, "gridpfn_rejected_total", reason="gp_timeout") == 1
