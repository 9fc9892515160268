"""The lean ASGI layer for the query routes answers exactly what FastAPI's route answers.

Two real servers on the same registry, one with GRIDPFN_HOT_ROUTES on and one with it off, get
the same requests; status, headers that matter and bodies must agree (timings aside).
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from service.settings import Settings
from tests.service.conftest import LIMITS, MODEL, assert_problem, metric, rows, running

KEY = "hot-routes-test-key"


@pytest.fixture(scope="module")
def pair(model_dir):
    """(hot, plain) clients, both with an API key configured."""
    common = dict(model_dir=model_dir, redis_url=None, api_keys=(KEY,), **LIMITS)
    with running(Settings(hot_routes=True, **common)) as hot, running(Settings(hot_routes=False, **common)) as plain:
        auth = {"Authorization": f"Bearer {KEY}"}
        with (
            httpx.Client(base_url=hot.url, timeout=60, headers=auth) as h,
            httpx.Client(base_url=plain.url, timeout=60, headers=auth) as p,
        ):
            yield h, p


@pytest.fixture(scope="module")
def cid(pair, scenarios):
    x, y = scenarios
    ids = {c.post("/v1/context-sets", json={"x": rows(x[:40]), "y": rows(y[:40])}).json()["id"] for c in pair}
    assert len(ids) == 1  # content-addressed: the same id on both
    return ids.pop()


def _both(pair, path: str, **kwargs) -> tuple[httpx.Response, httpx.Response]:
    return tuple(c.post(path, **kwargs) for c in pair)


def _same(hot: httpx.Response, plain: httpx.Response) -> dict:
    assert hot.status_code == plain.status_code, (hot.text, plain.text)
    assert hot.headers["content-type"] == plain.headers["content-type"]
    a, b = hot.json(), plain.json()
    if hot.status_code != 200:
        if any(e["message"].startswith("Invalid JSON") for e in a["errors"]):  # parsers word it differently
            assert [e["field"] for e in a["errors"]] == [e["field"] for e in b["errors"]] == ["body"], (a, b)
            assert b["errors"][0]["message"].startswith("Invalid JSON") and a["type"] == b["type"]
            return a
        assert a == b
        return a
    assert a.pop("timing").keys() == b.pop("timing").keys()
    for key in ("mean", "std", "p_outside_band"):
        np.testing.assert_allclose(np.asarray(a.pop(key), float), np.asarray(b.pop(key), float), rtol=1e-6, atol=0)
    for level in a["quantiles"]:
        np.testing.assert_allclose(a["quantiles"][level], b["quantiles"][level], rtol=1e-6, atol=0)
    a.pop("quantiles"), b.pop("quantiles")
    if a.get("gp") is not None:
        for key in ("mean", "std"):
            np.testing.assert_allclose(a["gp"].pop(key), b["gp"].pop(key), rtol=1e-6, atol=0)
    assert a == b
    return hot.json()


def test_answers_agree(pair, cid, scenarios):
    x, y = scenarios
    bodies = [
        {"model": MODEL, "context_id": cid, "queries": rows(x[100:101])},
        {
            "model": MODEL,
            "context_id": cid,
            "queries": rows(x[100:130]),
            "quantiles": [0.05, 0.5, 0.95],
            "voltage_band": [0.95, 1.05],
        },
        {
            "model": MODEL,
            "context": {"x": rows(x[:40]), "y": rows(y[:40])},
            "queries": rows(x[130:135]),
            "compare_gp": True,
        },
    ]
    for body in bodies:
        answer = _same(*_both(pair, "/v1/predict", json=body))
        assert np.asarray(answer["mean"]).shape == (len(body["queries"]), 32)
    gp = _same(
        *_both(pair, "/v1/gp/predict", json={"context_id": cid, "queries": rows(x[140:143]), "quantiles": [0.5]})
    )
    assert gp["model"] == "exact-gp"


def test_errors_agree(pair, cid, scenarios):
    x = scenarios[0]
    nan_row = ", ".join(["0.1"] * 5 + ["NaN"] + ["0.1"] * 58)
    json_type = {"content-type": "application/json"}
    cases = [
        (
            422,
            "queries[0][5]",
            dict(content=f'{{"model": "{MODEL}", "context_id": "{cid}", "queries": [[{nan_row}]]}}', headers=json_type),
        ),
        (422, "queries[1]", dict(json={"model": MODEL, "context_id": cid, "queries": [rows(x[0]), rows(x[1][:63])]})),
        (422, None, dict(content=b"{not json", headers=json_type)),
        (422, None, dict(content=b"\xff\x06", headers=json_type)),
        (422, None, dict(json={"model": MODEL, "queries": [rows(x[0])]})),  # neither context nor context_id
        (
            422,
            "quantiles[0]",
            dict(json={"model": MODEL, "context_id": cid, "queries": [rows(x[0])], "quantiles": [1.5]}),
        ),
        (404, "model", dict(json={"model": "no-such-model", "context_id": cid, "queries": [rows(x[0])]})),
        (404, "context_id", dict(json={"model": MODEL, "context_id": "0" * 64, "queries": [rows(x[0])]})),
        (
            413,
            "queries",
            dict(json={"model": MODEL, "context_id": cid, "queries": [rows(x[0])] * (LIMITS["max_queries"] + 1)}),
        ),
        (422, None, dict(content=b"model=x", headers={"content-type": "application/x-www-form-urlencoded"})),
    ]
    for status, field, kwargs in cases:
        body = _same(*_both(pair, "/v1/predict", **kwargs))
        assert body["status"] == status, body
        if field is not None:
            assert any(e["field"] == field for e in body["errors"]), body


def test_auth_and_metrics_on_the_hot_path(pair, cid, scenarios):
    hot, plain = pair
    body = {"model": MODEL, "context_id": cid, "queries": rows(scenarios[0][:1])}
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        a, b = (
            hot.post("/v1/predict", json=body, headers=headers),
            plain.post("/v1/predict", json=body, headers=headers),
        )
        assert_problem(a, 401, "Authorization")
        assert a.json() == b.json() and a.headers["www-authenticate"] == b.headers["www-authenticate"]
    before = metric(hot, "gridpfn_http_requests_total", method="POST", route="/v1/predict", status="200")
    response = hot.post("/v1/predict", json=body)
    assert response.status_code == 200 and response.headers["server-timing"].startswith("app;dur=")
    assert metric(hot, "gridpfn_http_requests_total", method="POST", route="/v1/predict", status="200") == before + 1


def test_arrow_answers_hold_the_json_answers_on_both_paths(pair, cid, scenarios):
    """Accept: application/vnd.apache.arrow.stream gives the same numbers as the JSON answer,
    a column per statistic and bus, and the rest in the schema metadata; the Python client reads it."""
    import orjson
    import pyarrow as pa

    from service.client import GridPFNClient

    x, y = scenarios
    body = {
        "model": MODEL,
        "context_id": cid,
        "queries": rows(x[100:130]),
        "quantiles": [0.05, 0.95],
        "voltage_band": [0.95, 1.05],
        "compare_gp": True,
    }
    arrow = {"Accept": "application/vnd.apache.arrow.stream"}
    for c in pair:
        as_json = c.post("/v1/predict", json=body).json()
        response = c.post("/v1/predict", json=body, headers=arrow)
        assert response.status_code == 200 and response.headers["content-type"] == arrow["Accept"]
        table = pa.ipc.open_stream(response.content).read_all()
        # mean, std, 2 quantiles, p_outside, gp mean/std per bus; extrapolation and extrapolated per query
        assert table.num_rows == 30 and table.num_columns == 32 * 7 + 2
        meta = orjson.loads(table.schema.metadata[b"gridpfn"])
        assert meta["model"] == MODEL and meta["context_id"] == cid and meta["quantiles"] == ["0.05", "0.95"]
        assert set(meta["timing"]) >= {"pfn_ms", "gp_fit_ms", "speedup", "total_ms"}
        outputs = as_json["outputs"]
        for prefix, matrix, dtype in (
            ("mean", as_json["mean"], np.float64),
            ("q0.95", as_json["quantiles"]["0.95"], np.float64),
            ("gp_mean", as_json["gp"]["mean"], np.float64),
            ("p_outside", as_json["p_outside_band"], np.float32),
            ("gp_std", as_json["gp"]["std"], np.float32),
        ):
            got = np.column_stack([table.column(f"{prefix}_{name}").to_numpy() for name in outputs])
            assert got.dtype == dtype, prefix  # voltages float64, spreads and probabilities float32
            np.testing.assert_array_equal(got, np.asarray(matrix, dtype=dtype))
        assert table.column_names[-2:] == ["extrapolation", "extrapolated"]
        np.testing.assert_array_equal(table.column("extrapolation").to_numpy(), as_json["extrapolation"])
        assert table.column("extrapolated").to_pylist() == as_json["extrapolated"]
        gp = c.post("/v1/gp/predict", json={"context_id": cid, "queries": rows(x[:3])}, headers=arrow)
        assert pa.ipc.open_stream(gp.content).read_all().column_names[0] == "mean_vm_pu_bus2"
    with GridPFNClient(str(pair[0].base_url), api_key=KEY) as client:
        frame = client.predict(x[100:130], MODEL, context_id=cid, quantiles=[0.5])
        assert frame.shape == (30, 32 * 3 + 2) and frame.attrs["model"] == MODEL
        expected = np.asarray(pair[0].post("/v1/predict", json={**body, "compare_gp": False}).json()["mean"])
        np.testing.assert_array_equal(frame.filter(like="mean_").to_numpy(), expected)
        inline = client.predict(x[:2], MODEL, context=(x[:40], y[:40]))
        assert inline.shape == (2, 64 + 2)
