"""Main flows over real HTTP, against the embedded store and against real Redis."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

import gridsim
from models import physics_fit
from service.engine.context_sets import context_id
from service.settings import Settings
from tests.service.conftest import LIMITS, MODEL, assert_problem, metric, rows

K = 32


def upload(client, x, y) -> str:
    response = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)})
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/context-sets/{body['id']}"
    return body["id"]


def test_health_and_readiness(client, server):
    assert client.get("/healthz").json()["live"] is True
    assert client.get("/v2/health/live").status_code == 200
    for path in ("/readyz", "/v2/health/ready"):
        body = client.get(path).json()
        assert body["ready"] is True and body["models"] == ["network-fit", "physics-fit", MODEL]
    assert client.get("/readyz").json()["store"] == server.app.state.runtime.store.kind


def test_models_list_and_card(client):
    listing = client.get("/v1/models").json()
    assert [m["name"] for m in listing["models"]] == ["network-fit", "physics-fit", MODEL]
    tiny = listing["models"][2]
    assert tiny["networks"] == ["ieee33"] and tiny["versions"] == {"ieee33": "0.0.1"}
    for built_in in listing["models"][:2]:  # network-fit and physics-fit
        assert built_in["networks"] == physics_fit.ANY_NETWORK and built_in["versions"] == {"*": "built-in"}
    card = client.get(f"/v1/models/{MODEL}").json()
    net = gridsim.network("ieee33")
    assert card["features"] == list(net.feature_names) and card["outputs"] == list(net.output_names)
    assert card["context_size"] == {"min": 8, "max": 2000} and card["device"] == "cpu"
    assert card["cards"]["ieee33"]["version"] == "0.0.1"
    assert client.get(f"/v1/models/{MODEL}", params={"network": "ieee33"}).json()["version"] == "0.0.1"


def test_context_set_upload_is_content_addressed(client, scenarios):
    x, y = scenarios[0][:30], scenarios[1][:30]
    cid = upload(client, x, y)
    assert cid == context_id(x, y) and upload(client, x, y) == cid  # same data, same id
    info = client.get(f"/v1/context-sets/{cid}", params={"include_data": True}).json()
    assert info["rows"] == 30 and info["features"] == 64 and info["outputs"] == K
    assert 0 < info["expires_in_s"] <= 86400 and info["source"]["kind"] == "uploaded"
    np.testing.assert_array_equal(np.array(info["x"]), x)  # float64 round trip, bit for bit
    np.testing.assert_array_equal(np.array(info["y"]), y)
    assert "x" not in client.get(f"/v1/context-sets/{cid}").json()  # arrays only when asked for
    assert client.delete(f"/v1/context-sets/{cid}").status_code == 204
    assert client.get(f"/v1/context-sets/{cid}").status_code == 404


def test_a_voltage_reading_no_feeder_operates_at_is_refused_naming_its_cell(client, scenarios):
    """|V| in p.u. of a distribution feeder lies within [0.5, 1.5]: a 0.0 (a dead meter's default), a negative,
    a denormal, a 2.0 or a reading in kV is a 422 naming the cell, where a 0.0 was taken as a reading (its bus's
    lower quantile came out negative) and a 2.0 gave a checkpoint a negative 5 % quantile."""
    x, y = (np.asarray(a[:60]) for a in scenarios)
    for bad in (0.0, -1.0, 5e-324, 0.4999, 1.5001, 2.0, 12.66, 0.5, 1.5):
        broken = y.copy()
        broken[7, 17] = bad
        problem = assert_problem(client.post("/v1/context-sets", json={"x": rows(x), "y": rows(broken)}), 422)
        assert problem["errors"][0]["field"].endswith("y[7][17]"), problem  # -1: the schema's own bound
        # the range's ends are readings, then held to the network model's power flow (service.engine.readings)
        assert ("network model" in problem["errors"][0]["message"]) == (bad in (0.5, 1.5)), problem


def test_a_quantile_level_given_twice_is_refused_naming_quantiles(client, scenarios):
    """Each level is a column of the answer (q0.05_<bus>): a repeat was dropped from JSON answers and made a batch
    job's result carry two columns of one name (its summary a 500, its long layout a stream cut mid-body)."""
    x, y = scenarios
    cid = upload(client, x[:40], y[:40])
    body = {"model": MODEL, "context_id": cid, "queries": rows(x[100:102]), "quantiles": [0.05, 0.95, 0.05]}
    problem = assert_problem(client.post("/v1/predict", json=body), 422)
    assert problem["errors"][0]["field"] == "quantiles" and "0.05 is given twice" in problem["errors"][0]["message"]
    job = {"model": MODEL, "context_id": cid, "quantiles": [0.5, 0.5], "simulate": {"n": 10, "delta": 0.1, "seed": 1}}
    problem = assert_problem(client.post("/v1/batch-jobs", json=job), 422)
    assert problem["errors"][0]["field"] == "quantiles"
    form = {"model": MODEL, "context_id": cid, "quantiles": "0.05,0.05,0.95"}
    files = {"file": ("loads.csv", "p\n1\n", "text/csv")}
    problem = assert_problem(client.post("/v1/batch-jobs", data=form, files=files), 422)
    assert problem["errors"][0]["field"] == "quantiles"


def test_bad_cells_stop_their_row_at_the_first_so_a_body_of_them_is_refused_fast(client):
    """Each bad cell was an error object: 10,000 rows of 64 out-of-range loads (4.5 MB) held the event loop 5.7 s
    (a 32 MiB body ~45 s). A row now stops at its first bad cell: one error per row, the first named. (The rows are
    as many as the server takes: more are counted and refused before any is read, tests/security/test_list_limits.)"""
    body = {"model": MODEL, "context_id": "0" * 64, "queries": [[-5000.0] * 64] * LIMITS["max_queries"]}
    problem = assert_problem(client.post("/v1/predict", json=body), 422)
    assert problem["errors"][0]["field"] == "queries[0][0]", problem["errors"][0]
    named = [e["field"] for e in problem["errors"]]
    assert "queries[0][1]" not in named and "queries[1][0]" in named


def test_context_set_simulated_matches_gridsim(client):
    spec = {"network": "ieee33", "delta": 0.1, "n": 20, "seed": 7}
    response = client.post("/v1/context-sets", json={"simulate": spec})
    assert response.status_code == 201, response.text
    body = response.json()
    expected = gridsim.simulate(20, 0.1, 7)
    assert body["id"] == context_id(expected.x, expected.vm_pu)
    assert body["source"] == {"kind": "simulated", **spec, "dropped_nonconverged": 0}


def test_predict_shapes_quantiles_band(client, scenarios):
    x, y = scenarios
    cid = upload(client, x[:40], y[:40])
    body = client.post(
        "/v1/predict",
        json={
            "model": MODEL,
            "context_id": cid,
            "queries": rows(x[100:105]),
            "quantiles": [0.05, 0.5, 0.95],
            "voltage_band": [0.95, 1.05],
        },
    ).json()
    assert body["model"] == MODEL and body["context_id"] == cid and len(body["outputs"]) == K
    mean, std = np.array(body["mean"]), np.array(body["std"])
    assert mean.shape == std.shape == (5, K) and np.isfinite(mean).all() and (std > 0).all()
    q = {level: np.array(v) for level, v in body["quantiles"].items()}
    assert set(q) == {"0.05", "0.5", "0.95"} and all(v.shape == (5, K) for v in q.values())
    assert (q["0.05"] <= q["0.5"] + 1e-6).all() and (q["0.5"] <= q["0.95"] + 1e-6).all()
    p = np.array(body["p_outside_band"])
    assert p.shape == (5, K) and ((p >= 0) & (p <= 1)).all()
    assert body["gp"] is None and body["timing"]["total_ms"] > 0


def test_server_timing_header_covers_the_whole_request(client, scenarios):
    """Server-Timing's app;dur spans parsing and serialisation, so it is at least the handler's total_ms."""
    x, y = scenarios
    cid = upload(client, x[:40], y[:40])
    response = client.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[100:150])})
    name, _, duration = response.headers["server-timing"].partition(";dur=")
    assert name == "app" and float(duration) >= response.json()["timing"]["total_ms"]
    missing = client.get("/v1/models/no-such-model")
    assert missing.status_code == 404 and missing.headers["server-timing"].startswith("app;dur=")


def test_inline_context_equals_stored_context(client, scenarios):
    x, y = scenarios
    cid = upload(client, x[:25], y[:25])
    query = {"model": MODEL, "queries": rows(x[150:160])}
    by_id = client.post("/v1/predict", json={**query, "context_id": cid}).json()
    inline = client.post("/v1/predict", json={**query, "context": {"x": rows(x[:25]), "y": rows(y[:25])}}).json()
    assert inline["context_id"] == cid
    np.testing.assert_allclose(inline["mean"], by_id["mean"], rtol=1e-6)
    assert by_id["quantiles"] == {} and by_id["p_outside_band"] is None


def test_encoded_context_is_cached(client, scenarios):
    x, y = scenarios
    cid = upload(client, x[40:72], y[40:72])
    before = metric(client, "gridpfn_context_encodes_total", model=MODEL)
    first = client.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[:2])}).json()
    second = client.post("/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[2:20])}).json()
    assert metric(client, "gridpfn_context_encodes_total", model=MODEL) == before + 1
    assert first["timing"]["context_cached"] is False and second["timing"]["context_cached"] is True
    assert second["timing"]["pfn_ms"] == second["timing"]["pfn_predict_ms"]  # nothing re-encoded
    assert metric(client, "gridpfn_cache_lookups_total", cache="encoded_context", result="hit") >= 1


def test_compare_gp_side_by_side_and_gp_fit_cached(client, scenarios):
    x, y = scenarios
    cid = upload(client, x[80:120], y[80:120])
    fits = metric(client, "gridpfn_gp_fits_total")
    request = {"model": MODEL, "context_id": cid, "queries": rows(x[:3]), "compare_gp": True}
    first = client.post("/v1/predict", json=request).json()
    gp_mean, gp_std = np.array(first["gp"]["mean"]), np.array(first["gp"]["std"])
    assert gp_mean.shape == gp_std.shape == (3, K) and (gp_std > 0).all()
    assert np.abs(gp_mean - y[:3]).max() < 0.05  # an exact GP on real power flows is close
    t = first["timing"]
    assert t["gp_fit_cached"] is False and t["gp_fit_ms"] > 0 and t["gp_predict_ms"] > 0
    assert t["speedup"] == (t["gp_fit_ms"] + t["gp_predict_ms"]) / (t["pfn_encode_ms"] + t["pfn_predict_ms"])
    second = client.post("/v1/predict", json=request).json()
    assert second["timing"]["gp_fit_cached"] is True and second["timing"]["gp_fit_ms"] == t["gp_fit_ms"]
    assert metric(client, "gridpfn_gp_fits_total") == fits + 1
    gp_only = client.post(
        "/v1/gp/predict",
        json={"context_id": cid, "queries": rows(x[:3]), "quantiles": [0.5], "voltage_band": [0.95, 1.05]},
    ).json()
    np.testing.assert_allclose(gp_only["mean"], gp_mean, rtol=1e-6)
    np.testing.assert_allclose(gp_only["quantiles"]["0.5"], gp_mean, rtol=1e-6)
    assert np.array(gp_only["p_outside_band"]).shape == (3, K) and gp_only["timing"]["gp_fit_cached"] is True


def test_simulate_is_ground_truth(client, scenarios):
    x, y = scenarios
    body = client.post("/v1/simulate", json={"loads": rows(x[:4])}).json()
    assert body["converged"] == [True] * 4 and body["outputs"] == list(gridsim.network("ieee33").output_names)
    np.testing.assert_allclose(np.array(body["vm_pu"]), y[:4], atol=1e-9)


def test_simulate_reports_non_convergence_as_null(client, scenarios):
    overloaded = np.full(64, 50.0)  # 50 MW at every bus: no power-flow solution
    body = client.post("/v1/simulate", json={"loads": [rows(scenarios[0][0]), rows(overloaded)]}).json()
    assert body["converged"] == [True, False] and body["vm_pu"][1] is None


def test_metrics_exposition(client):
    client.get("/healthz")
    text = client.get("/metrics").text
    for name in (
        "gridpfn_http_requests_total",
        "gridpfn_http_request_seconds_bucket",
        "gridpfn_queue_depth",
        "gridpfn_pool_running",
        "gridpfn_model_inference_seconds",
    ):
        assert name in text
    assert metric(client, "gridpfn_http_requests_total", method="GET", route="/healthz", status="200") >= 1


@pytest.mark.parametrize("recheck_s", [0.0, 0.5])
def test_context_deleted_by_another_process_is_gone_here_too(model_dir, redis_url, scenarios, recheck_s):
    """The in-process copy of a hot context outlives the stored one by at most GRIDPFN_CONTEXT_RECHECK_S."""
    import time

    import httpx
    import redis

    from tests.service.conftest import LIMITS, running  # noqa: PLC0415 - a server of its own

    x, y = scenarios
    settings = Settings(model_dir=model_dir, redis_url=redis_url, context_recheck_s=recheck_s, **LIMITS)
    with running(settings) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        cid = upload(client, x[120:140], y[120:140])
        request = {"model": MODEL, "context_id": cid, "queries": rows(x[:1])}
        assert client.post("/v1/predict", json=request).status_code == 200
        deleted_at = time.monotonic()
        redis.Redis.from_url(redis_url).delete(f"gridpfn:ctx:{cid}")  # as another server would
        status = client.post("/v1/predict", json=request).status_code
        if recheck_s == 0:
            assert status == 404
        else:  # within the bound the copy may still answer; past it, never
            assert status in (200, 404) and (status == 404 or time.monotonic() - deleted_at < recheck_s)
            time.sleep(recheck_s)
            assert client.post("/v1/predict", json=request).status_code == 404


def test_big_predict_split_across_workers_equals_small_requests(model_dir, scenarios):
    """A request over SPLIT_ROWS runs as blocks in parallel workers; the answer is the unsplit one, in order."""
    from service.engine.inference import SPLIT_ROWS
    from tests.service.conftest import LIMITS, running  # noqa: PLC0415 - a server of its own with 2 workers

    x, y = scenarios
    rng = np.random.default_rng(0)
    queries = x[rng.integers(0, len(x), SPLIT_ROWS + 500)] * rng.uniform(0.9, 1.1, (SPLIT_ROWS + 500, x.shape[1]))
    settings = Settings(model_dir=model_dir, redis_url=None, workers=2, **{**LIMITS, "max_queries": 5000})
    with running(settings) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
        cid = upload(c, x[:120], y[:120])
        ask = {"model": MODEL, "context_id": cid, "quantiles": [0.1, 0.9], "voltage_band": [0.95, 1.05]}
        whole = c.post("/v1/predict", json={**ask, "queries": rows(queries)}).json()
        parts = [
            c.post("/v1/predict", json={**ask, "queries": rows(queries[i : i + 500])}).json()
            for i in range(0, len(queries), 500)
        ]
    assert np.array(whole["mean"]).shape == (len(queries), K)
    for key in ("mean", "std", "p_outside_band"):
        np.testing.assert_array_equal(np.array(whole[key]), np.concatenate([np.array(p[key]) for p in parts]))
    np.testing.assert_array_equal(
        np.array(whole["quantiles"]["0.9"]), np.concatenate([np.array(p["quantiles"]["0.9"]) for p in parts])
    )


@pytest.mark.parametrize("model", ["physics-fit", "network-fit"])
def test_rows_the_feeder_cannot_carry_are_named_in_the_requests_own_words(client, scenarios, model):
    """Rows at 6x nominal load (voltage collapse) among rows in range: a 422 naming `queries` and worded with it
    (physics-fit's said "query_x: rows ...", the model argument's name, where network-fit said "queries: ...")."""
    x, y = scenarios
    cid = upload(client, x[:60], y[:60])
    queries = np.asarray(x[100:104]).copy()
    queries[2] *= 6.0
    problem = assert_problem(
        client.post("/v1/predict", json={"model": model, "context_id": cid, "queries": rows(queries)}), 422
    )
    error = problem["errors"][0]
    assert error["field"] == "queries" and error["message"].startswith("queries: rows [2]"), error
