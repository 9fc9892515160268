"""Every bad input gets the one problem+json shape with the right status and the field named."""

from __future__ import annotations

import logging
import re

import httpx
import numpy as np
import pytest

from models.errors import InputValidationError
from service.engine import executor, inference
from service.http.routers import simulate as simulate_route
from tests.service.conftest import LIMITS, MODEL, assert_problem, rows


@pytest.fixture(scope="module")
def api(memory_server):
    with httpx.Client(base_url=memory_server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def cid(api, scenarios):
    x, y = scenarios
    return api.post("/v1/context-sets", json={"x": rows(x[:40]), "y": rows(y[:40])}).json()["id"]


def predict(api, **body):
    return api.post("/v1/predict", json={"model": MODEL, **body})


def test_nan_and_infinity_literals_name_the_field(api, cid):
    for literal in ("NaN", "Infinity", "-Infinity"):
        row = ", ".join(["0.1"] * 5 + [literal] + ["0.1"] * 58)
        raw = f'{{"model": "{MODEL}", "context_id": "{cid}", "queries": [[{row}]]}}'
        response = api.post("/v1/predict", content=raw, headers={"content-type": "application/json"})
        body = assert_problem(response, 422, "queries[0][5]")
        assert "finite" in body["errors"][0]["expected"]


def test_a_string_or_a_list_where_a_number_goes_says_a_number(api, cid, scenarios):
    """A value that is no number (a string, a nested list) in a query, a context or typical_loads: the error names the
    cell and expects a finite number, not pydantic's type name ("float": a user trial)."""
    x, y = scenarios
    for bad in ("0.1", [0.1]):
        query = rows(x[0])
        query[3] = bad
        body = assert_problem(predict(api, context_id=cid, queries=[query]), 422, "queries[0][3]")
        assert body["errors"][0]["expected"] == "a finite number (a JSON number)", body
    typical = rows(x[0])
    typical[2] = "a lot"
    context = {"x": rows(x[:20]), "y": rows(y[:20]), "typical_loads": typical}
    body = assert_problem(predict(api, context=context, queries=[rows(x[0])]), 422, "context.typical_loads[2]")
    assert body["errors"][0]["expected"] == "a finite number (a JSON number)", body


def test_nan_in_context_names_the_field(api, scenarios):
    x, y = scenarios
    raw = f'{{"model": "{MODEL}", "queries": [{rows(x[0])}], "context": {{"x": {rows(x[:1])}, "y": [[NaN{", 1.0" * 31}]]}}}}'
    response = api.post("/v1/predict", content=raw, headers={"content-type": "application/json"})
    assert_problem(response, 422, "context.y[0][0]")


def test_wrong_lengths(api, cid, scenarios):
    x, y = scenarios
    body = assert_problem(predict(api, context_id=cid, queries=[rows(x[0]), rows(x[1][:63])]), 422, "queries[1]")
    assert body["errors"][0]["expected"].startswith("64 ") and "63" in body["errors"][0]["message"]
    assert "network ieee33 has 64 load inputs" in body["errors"][0]["message"]
    assert_problem(api.post("/v1/context-sets", json={"x": rows(x[:10]), "y": rows(y[:9])}), 422, "body.y")
    short = assert_problem(
        api.post("/v1/context-sets", json={"x": rows(x[:10]), "y": rows(y[:10, :31])}), 422, "body.y"
    )
    assert "y has 31 columns; network ieee33 has 32 outputs" in short["detail"]
    assert_problem(api.post("/v1/simulate", json={"loads": [[0.1] * 65]}), 422, "loads")
    assert_problem(api.post("/v1/simulate", json={"loads": [[0.1] * 999]}), 422, "loads[0]")  # over any network's


def test_malformed_requests(api, cid, scenarios):
    assert_problem(api.post("/v1/predict", content=b"{not json", headers={"content-type": "application/json"}), 422)
    assert_problem(api.post("/v1/predict", content=b"\xff\x06", headers={"content-type": "application/json"}), 422)
    assert_problem(predict(api, queries=[rows(scenarios[0][0])]), 422)  # neither context nor context_id
    assert_problem(predict(api, context_id=cid, queries=[rows(scenarios[0][0])], quantiles=[1.5]), 422, "quantiles[0]")
    body = assert_problem(predict(api, context_id=cid, queries=[rows(scenarios[0][0])], voltage_band=[1.05, 0.95]), 422)
    assert "voltage_band" in body["detail"]
    assert_problem(predict(api, context_id="xyz", queries=[rows(scenarios[0][0])]), 422, "context_id")
    assert_problem(api.post("/v1/context-sets", json={}), 422)
    assert_problem(api.post("/v1/context-sets", json={"simulate": {"delta": -1}}), 422, "simulate.delta")


def test_unknown_model_and_context(api, cid, scenarios):
    query = [rows(scenarios[0][0])]
    assert_problem(
        api.post("/v1/predict", json={"model": "no-such", "context_id": cid, "queries": query}), 404, "model"
    )
    assert_problem(api.get("/v1/models/no-such"), 404, "name")
    assert_problem(predict(api, context_id="0" * 64, queries=query), 404, "context_id")
    assert_problem(api.get("/v1/context-sets/" + "0" * 64), 404, "context_id")
    assert_problem(api.delete("/v1/context-sets/" + "0" * 64), 404, "context_id")
    assert_problem(api.get("/v1/nothing-here"), 404)


def test_context_size_outside_model_range(api, scenarios):
    x, y = scenarios
    response = predict(api, context={"x": rows(x[:5]), "y": rows(y[:5])}, queries=[rows(x[0])])
    body = assert_problem(response, 422, "context")
    assert body["errors"][0]["expected"] == "between 8 and 2000 rows (model card context_size)"
    assert "5 context rows" in body["detail"] and "8 to 2000 rows" in body["detail"]  # the range in the message too
    # issue 31: a stored 10-row context is accepted, and physics-fit's refusal names its minimum and the rows given
    stored = api.post("/v1/context-sets", json={"x": rows(x[:10]), "y": rows(y[:10])}).json()["id"]
    refused = assert_problem(
        api.post("/v1/predict", json={"model": "physics-fit", "context_id": stored, "queries": [rows(x[0])]}),
        422,
        "context_id",
    )
    assert "10 context rows is too few for physics-fit: it takes 16 to" in refused["detail"]


def test_limits_answer_413(api, cid, scenarios):
    x, y = scenarios
    many = rows(np.repeat(x[:1], LIMITS["max_queries"] + 1, axis=0))
    assert_problem(predict(api, context_id=cid, queries=many), 413, "queries")
    big = b'{"pad": "' + b"x" * LIMITS["max_body_bytes"] + b'"}'
    assert_problem(api.post("/v1/predict", content=big, headers={"content-type": "application/json"}), 413, "body")

    def chunks():
        for _ in range(21):
            yield b" " * 100_000  # no Content-Length: the streamed size is counted

    assert_problem(api.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"}), 413)
    over_simulate = LIMITS["max_simulate"] + 1
    assert_problem(
        api.post("/v1/simulate", json={"loads": rows(np.repeat(x[:1], over_simulate, axis=0))}), 413, "loads"
    )
    simulated = assert_problem(api.post("/v1/context-sets", json={"simulate": {"n": over_simulate}}), 413, "simulate.n")
    limit = min(LIMITS["max_simulate"], LIMITS["max_context_rows"])
    assert f"limit of {limit}" in simulated["detail"]  # the limit itself, not only in errors[].expected
    over = LIMITS["max_context_rows"] + 1
    tall_x, tall_y = rows(np.repeat(x[:1], over, axis=0)), rows(np.repeat(y[:1], over, axis=0))
    assert_problem(api.post("/v1/context-sets", json={"x": tall_x, "y": tall_y}), 413, "body.x")


def test_gp_over_configured_size_points_to_batch_jobs(api, scenarios):
    x, y = scenarios
    context = {"x": rows(x[:61]), "y": rows(y[:61])}
    for response in (
        api.post("/v1/gp/predict", json={"context": context, "queries": rows(x[:1])}),
        predict(api, context=context, queries=rows(x[:1]), compare_gp=True),
    ):
        body = assert_problem(response, 422, "context")
        assert body["type"].endswith("gp-too-large") and "/v1/batch-jobs" in body["detail"]


def test_wrong_method_is_a_problem_too(api):
    assert_problem(api.get("/v1/predict"), 405)


def test_values_outside_physical_ranges(api, cid, scenarios):
    x, y = scenarios
    body = assert_problem(predict(api, context_id=cid, queries=[[1e30] * 64]), 422, "queries[0][0]")
    assert "1000" in body["errors"][0]["expected"]
    bad_y = rows(y[:10])
    bad_y[3][7] = 40.0
    assert_problem(predict(api, context={"x": rows(x[:10]), "y": bad_y}, queries=rows(x[:1])), 422, "context.y[3][7]")


def _bug(*args, **kwargs):
    raise ValueError("queries: a bug of the service, worded like the caller's fault")


def _assert_logged_500(response, caplog) -> None:
    """A 500 internal-error blaming no field, whose id is in the answer and on the logged traceback."""
    body = assert_problem(response, 500)
    assert body["type"].endswith(":internal-error") and body["errors"] == []
    error_id = body["error_id"]
    assert re.fullmatch("[0-9a-f]{16}", error_id) and error_id in body["detail"]
    logged = [record for record in caplog.records if error_id in record.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR and logged[0].exc_info[0] is ValueError


# Fault injection into the running in-process server: the engine's answer raises a plain ValueError.
@pytest.mark.parametrize("n_queries", [1, 20], ids=["micro-batched", "direct"])
def test_a_value_error_inside_the_engine_is_a_500_with_a_logged_id(api, cid, scenarios, monkeypatch, caplog, n_queries):
    monkeypatch.setattr(executor, "placed_answer", _bug)
    monkeypatch.setattr(inference, "placed_answer", _bug)
    with caplog.at_level(logging.ERROR, logger="service.http.problems"):
        _assert_logged_500(predict(api, context_id=cid, queries=rows(scenarios[0][:n_queries])), caplog)


def test_a_value_error_in_a_power_flow_is_a_500_not_the_loads_fault(api, scenarios, monkeypatch, caplog):
    """The same through FastAPI's routing (not the hot routes): gridsim's ValueError is the service's."""
    monkeypatch.setattr(simulate_route, "solve", _bug)
    with caplog.at_level(logging.ERROR, logger="service.http.problems"):
        _assert_logged_500(api.post("/v1/simulate", json={"loads": rows(scenarios[0][:2])}), caplog)


def test_a_models_typed_input_error_is_a_422_naming_the_request_field(api, cid, scenarios, monkeypatch):
    def refuses(*args, **kwargs):
        raise InputValidationError("levels", "must be inside (0, 1), got [1.5]", "levels inside (0, 1)")

    monkeypatch.setattr(executor, "placed_answer", refuses)
    body = assert_problem(predict(api, context_id=cid, queries=rows(scenarios[0][:1])), 422, "quantiles")
    assert body["type"].endswith(":input-rejected") and body["errors"][0]["expected"] == "levels inside (0, 1)"
    assert "error_id" not in body


def test_a_body_with_thousands_of_bad_cells_lists_a_bounded_number(api, scenarios):
    """6,400 out-of-range voltages in 200 rows: each row stops at its first bad cell (schemas.FAIL_FAST), and the
    problem lists the first MAX_LISTED_ERRORS of the 200 and says how many."""
    from service.http.problems import MAX_LISTED_ERRORS

    x, _ = scenarios
    response = api.post("/v1/context-sets", json={"x": rows(x[:200]), "y": [[-1.0] * 32] * 200})
    body = assert_problem(response, 422, "y[0][0]")
    assert len(body["errors"]) == MAX_LISTED_ERRORS and "200 errors" in body["detail"]
    assert body["errors"][1]["field"] == "y[1][0]"
    assert len(response.content) < 50_000
