"""Queries sent as Arrow (service.http.arrow_request) get the JSON body's answers and errors, whichever layer serves.

Two real servers, hot routes on and off: the Arrow path must give the numbers a JSON body gives,
and every bad table must be refused with the field, row and column named.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pytest

from gridsim.network import network
from service.client import LOAD_FEATURES, GridPFNClient, arrow_request_body
from service.http.responses import ARROW_STREAM
from service.settings import Settings
from tests.service.conftest import LIMITS, MODEL, assert_problem, rows, running

ARROW = {"content-type": ARROW_STREAM}


@pytest.fixture(scope="module")
def servers(memory_server, model_dir):
    """(hot, plain) clients: GRIDPFN_HOT_ROUTES on and off. On is the default, so the session's embedded-store
    server is the first (a server of its own would start GP and sandbox processes of its own: seconds each)."""
    hot = memory_server
    assert hot.app.state.settings.hot_routes
    with running(Settings(model_dir=model_dir, redis_url=None, hot_routes=False, **LIMITS)) as plain:
        with httpx.Client(base_url=hot.url, timeout=60) as h, httpx.Client(base_url=plain.url, timeout=60) as p:
            yield h, p


@pytest.fixture(scope="module")
def cid(servers, scenarios):
    x, y = scenarios
    ids = {c.post("/v1/context-sets", json={"x": rows(x[:40]), "y": rows(y[:40])}).json()["id"] for c in servers}
    return ids.pop()


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(x: np.ndarray, fields: dict | None, names=LOAD_FEATURES) -> pa.Table:
    table = pa.table({name: x[:, j] for j, name in enumerate(names)})
    return table if fields is None else table.replace_schema_metadata({b"gridpfn": orjson.dumps(fields)})


def test_client_feature_names_are_the_networks():
    assert LOAD_FEATURES == list(network("ieee33").feature_names)


def test_arrow_queries_give_the_json_answer_on_both_layers(servers, cid, scenarios):
    x, _ = scenarios
    fields = {"model": MODEL, "context_id": cid, "quantiles": [0.05, 0.95], "voltage_band": [0.95, 1.05]}
    expected = servers[0].post("/v1/predict", json={**fields, "queries": rows(x[100:130])}).json()
    # columns in another order and as float32 / int: named columns are what counts, values are widened
    shuffled = list(reversed(LOAD_FEATURES))
    table = pa.table(
        {
            name: pa.array(x[100:130, LOAD_FEATURES.index(name)], pa.float32() if i % 2 else pa.float64())
            for i, name in enumerate(shuffled)
        }
    ).replace_schema_metadata({b"gridpfn": orjson.dumps(fields)})
    exact = arrow_request_body(x[100:130], fields)
    for client in servers:
        answer = client.post("/v1/predict", content=exact, headers=ARROW)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        # the same float64 answer: to the last bits (another process's BLAS threads may round the last one apart;
        # a float32 anywhere on the way would differ from the 8th digit)
        for key in ("mean", "std", "p_outside_band"):
            np.testing.assert_allclose(body[key], expected[key], rtol=1e-14, atol=0)
        assert body["quantiles"].keys() == expected["quantiles"].keys()
        for level, values in expected["quantiles"].items():
            np.testing.assert_allclose(body["quantiles"][level], values, rtol=1e-14, atol=0)
        widened = client.post("/v1/predict", content=_stream(table), headers=ARROW).json()
        np.testing.assert_allclose(widened["mean"], expected["mean"], atol=1e-4)  # float32 inputs round a little
    gp_fields = {"context_id": cid, "quantiles": [0.5]}
    gp_json = servers[0].post("/v1/gp/predict", json={**gp_fields, "queries": rows(x[140:143])}).json()
    for client in servers:
        gp = client.post("/v1/gp/predict", content=arrow_request_body(x[140:143], gp_fields), headers=ARROW).json()
        np.testing.assert_array_equal(gp["mean"], gp_json["mean"])


def test_integer_columns_are_accepted(servers, cid):
    ints = np.zeros((2, 64), dtype=np.int64)  # no load (1 MW at every bus has no power-flow solution: refused)
    table = pa.table({name: ints[:, j] for j, name in enumerate(LOAD_FEATURES)})
    table = table.replace_schema_metadata({b"gridpfn": orjson.dumps({"model": MODEL, "context_id": cid})})
    for client in servers:
        answer = client.post("/v1/predict", content=_stream(table), headers=ARROW)
        assert answer.status_code == 200, answer.text
        assert np.asarray(answer.json()["mean"]).shape == (2, 32)


def _bad_tables(x: np.ndarray, cid: str):
    """(name, body bytes, status, field, words the detail must contain)."""
    fields = {"model": MODEL, "context_id": cid}
    nan = x[:3].copy()
    nan[1, 5] = np.nan
    huge = x[:3].copy()
    huge[2, 40] = 1e6
    missing = _table(x[:3, :63], fields, LOAD_FEATURES[:63])
    extra = _table(np.hstack([x[:3], x[:3, :1]]), fields, LOAD_FEATURES + ["p_mw_bus99"])
    strings = pa.table(
        {name: pa.array(["1.0"] * 3) if name == "q_mvar_bus7" else x[:3, j] for j, name in enumerate(LOAD_FEATURES)}
    ).replace_schema_metadata({b"gridpfn": orjson.dumps(fields)})
    readings = np.full((20, 32), 0.98)
    readings[1, 2] = np.inf
    inline_with_token = json.dumps({"model": MODEL, "context": {"x": x[:20].tolist(), "y": readings.tolist()}}).encode()
    return [
        ("not arrow", b"not an arrow stream", 422, "body", "Arrow IPC stream"),
        ("no metadata", _stream(_table(x[:3], None)), 422, "gridpfn", "no 'gridpfn'"),
        (
            "metadata not json",
            _stream(_table(x[:3], None).replace_schema_metadata({b"gridpfn": b"{nope"})),
            422,
            "gridpfn",
            "not JSON",
        ),
        (
            "metadata a list",
            _stream(_table(x[:3], None).replace_schema_metadata({b"gridpfn": b"[1]"})),
            422,
            "gridpfn",
            "not an object",
        ),
        (
            "queries in metadata",
            arrow_request_body(x[:3], {**fields, "queries": []}),
            422,
            "gridpfn.queries",
            "columns",
        ),
        ("missing column", _stream(missing), 422, "queries", "q_mvar_bus33"),
        ("extra column", _stream(extra), 422, "queries", "p_mw_bus99"),
        ("nan cell", arrow_request_body(nan, fields), 422, "queries", "row 2, column 'p_mw_bus7'"),
        ("out of range", arrow_request_body(huge, fields), 422, "queries", "row 3, column 'q_mvar_bus10'"),
        ("text column", _stream(strings), 422, "queries", "q_mvar_bus7"),
        ("no rows", arrow_request_body(x[:0], fields), 422, "queries", "no rows"),
        ("too many rows", arrow_request_body(np.repeat(x, 2, axis=0)[:201], fields), 413, "queries", "201 rows"),
        ("bad quantile", arrow_request_body(x[:3], {**fields, "quantiles": [1.5]}), 422, "quantiles[0]", "0.999999999"),
        ("no context", arrow_request_body(x[:3], {"model": MODEL}), 422, "body", "context"),
        (  # Python's json (the client's) writes NaN and Infinity as bare tokens: named as a JSON body's are
            "infinite reading in the metadata's context",
            _stream(_table(x[:3], None).replace_schema_metadata({b"gridpfn": inline_with_token})),
            422,
            "context.y[1][2]",
            "finite number",
        ),
        ("unknown model", arrow_request_body(x[:3], {**fields, "model": "nope"}), 404, "model", "nope"),
    ]


def test_bad_tables_are_refused_naming_field_row_and_column(servers, cid, scenarios):
    x, _ = scenarios
    for name, body, status, field, words in _bad_tables(x, cid):
        answers = [client.post("/v1/predict", content=body, headers=ARROW) for client in servers]
        problems = [assert_problem(answer, status) for answer in answers]
        assert problems[0] == problems[1], name  # the same answer from both layers
        assert any(e["field"] == field for e in problems[0]["errors"]), (name, problems[0])
        assert words in problems[0]["detail"] + str(problems[0]["errors"]), (name, problems[0])


def test_client_predict_sends_a_dataframe_or_an_array(servers, cid, scenarios):
    x, _ = scenarios
    client = GridPFNClient(str(servers[0].base_url))
    from_array = client.predict(x[100:104], model=MODEL, context_id=cid, quantiles=[0.5])
    from_frame = client.predict(
        pd.DataFrame(x[100:104], columns=LOAD_FEATURES), model=MODEL, context_id=cid, quantiles=[0.5]
    )
    pd.testing.assert_frame_equal(from_array, from_frame)
    assert from_array.shape[0] == 4 and "q0.5_vm_pu_bus2" in from_array.columns
    with pytest.raises(ValueError, match="queries"):
        arrow_request_body(x[:2, :10], {})


def test_arrow_bodies_need_the_api_key_too(model_dir, scenarios):
    x, _ = scenarios
    key = "arrow-test-key"
    with running(Settings(model_dir=model_dir, redis_url=None, api_keys=(key,), **LIMITS)) as server:
        body = arrow_request_body(x[:2], {"model": MODEL, "context_id": "0" * 64})
        refused = httpx.post(f"{server.url}/v1/predict", content=body, headers=ARROW, timeout=30)
        assert_problem(refused, 401)
        allowed = httpx.post(
            f"{server.url}/v1/predict", content=body, timeout=30, headers={**ARROW, "Authorization": f"Bearer {key}"}
        )
        assert_problem(allowed, 404, "context_id")  # past the key check: the (absent) context is looked up
