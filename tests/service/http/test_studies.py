"""POST /v1/studies over real HTTP: a planner's question in one request, answered as a per-bus table
that agrees with the power flow, and a time series' expected hours outside the band."""

from __future__ import annotations

import numpy as np

import gridsim
from gridsim.api import VoltageModel
from gridsim.scenarios import DER, Scenario, TimeSeries, expand
from tests.service.conftest import assert_problem, rows

PV_BUSES = [14, 18, 25, 30, 33]


def test_the_planners_question_in_one_request(client, scenarios):
    """Loads +40 %, 250 kW of PV at 5 buses: which buses risk leaving 0.95-1.05 p.u.?"""
    x, y = scenarios
    question = {
        "context": {"x": rows(x), "y": rows(y)},
        "scenarios": [{"name": "+40 % with PV", "load_scale": 1.4, "der": [{"bus": b, "kw": 250} for b in PV_BUSES]}],
        "voltage_band": [0.95, 1.05],
    }
    response = client.post("/v1/studies", json=question)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == "network-fit" and answer["rows"] == 1 and answer["extrapolated_rows"] == 1
    net = gridsim.network("ieee33")
    truth = VoltageModel(net)(
        expand(net, [Scenario("q", load_scale=1.4, der=tuple(DER(b, 250.0) for b in PV_BUSES))]).rows
    )[0]
    summary = answer["summary"]
    assert [s["bus"] for s in summary] == list(net.output_buses)
    outside = np.array([s["max_p_outside"] for s in summary])
    margin = np.minimum(truth - 0.95, 1.05 - truth)  # < 0: the bus is outside the band
    assert (margin < -0.005).sum() >= 5 and (margin > 0.005).sum() >= 5
    assert np.all(outside[margin < -0.005] > 0.9) and np.all(outside[margin > 0.005] < 0.1)
    lowest = np.array([s["lowest_vm_pu"] for s in summary])
    assert np.all(lowest <= truth + 1e-6)
    long = answer["long"]
    assert len(long["bus"]) == 32 and long["scenario"] == ["+40 % with PV"] * 32
    np.testing.assert_allclose(long["p_outside"], outside)


def test_a_time_series_gives_expected_hours_outside(client, scenarios):
    x, y = scenarios
    steps = ["2026-07-01T10:00", "2026-07-01T10:15", "2026-07-01T10:30", "2026-07-01T10:45"]
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "scenarios": [{"name": "growth", "load_scale": 1.2, "growth_rate": 0.05, "years": [0, 5]}],
        "time_series": {"timestamps": steps, "load": [1.0, 1.1, 1.2, 1.3], "pv": [0.2, 0.5, 0.8, 1.0]},
        "detail": "summary",
    }
    response = client.post("/v1/studies", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["rows"] == 8 and answer["long"] is None
    net = gridsim.network("ieee33")
    series = TimeSeries(tuple(steps), np.array([1.0, 1.1, 1.2, 1.3]), np.array([0.2, 0.5, 0.8, 1.0]))
    v = VoltageModel(net)(expand(net, [Scenario("g", load_scale=1.2, growth_rate=0.05, years=(0, 5))], series).rows)
    out_year5 = (v[4:] < 0.95).sum(axis=0) * 0.25  # the hours the power flow is outside in the worse year
    hours = np.array([s["hours_outside"] for s in answer["summary"]])
    assert np.all(np.abs(hours - out_year5) <= 0.25 * 0.5)  # within half a step of the truth at every bus
    spread = np.array([s["hours_outside_std"] for s in answer["summary"]])
    assert np.all(spread >= 0) and np.all(spread <= 0.25 * 2)  # 4 steps of 0.25 h: at most 0.5 h
    long = client.post("/v1/studies", json={**body, "detail": "long"}).json()["long"]
    for s in answer["summary"]:  # the worst row named is one where the bus's P(outside) is largest
        at = [
            i
            for i, (bus, year, stamp) in enumerate(zip(long["bus"], long["year"], long["timestamp"], strict=True))
            if bus == s["bus"] and year == s["worst_year"] and stamp == s["worst_timestamp"]
        ]
        assert len(at) == 1 and long["p_outside"][at[0]] == s["max_p_outside"]
    only_later = ((v[:4] > 0.955).all(axis=0)) & ((v[4:] < 0.945).any(axis=0))  # outside in year 5 alone
    assert only_later.any()
    assert all(s["worst_year"] == 5 for s, later in zip(answer["summary"], only_later, strict=True) if later)


def test_a_study_the_service_cannot_run_names_the_field(client, scenarios):
    x, y = scenarios
    context = {"x": rows(x), "y": rows(y)}
    bad_bus = client.post("/v1/studies", json={"context": context, "scenarios": [{"der": [{"bus": 1, "kw": 5}]}]})
    assert "not a load bus" in assert_problem(bad_bus, 422, "scenarios[0].der[0].bus")["detail"]
    steps = {"timestamps": ["a", "b"], "pv": [1.0]}
    bad_pv = client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": steps})
    assert_problem(bad_pv, 422, "time_series.pv")
    ragged = {"timestamps": ["a", "b"], "load": [[1.0] * 32, [1.0] * 31]}
    bad_rows = client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": ragged})
    assert "different lengths" in assert_problem(bad_rows, 422, "time_series.load")["detail"]
    negative = {"timestamps": ["a", "b"], "load": [[1.0] * 32, [1.0] * 31 + [-0.5]]}
    out_of_range = client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": negative})
    assert "[1][31]: -0.5 is outside [0.0, 100.0]" in assert_problem(out_of_range, 422, "time_series.load")["detail"]
    night = {"timestamps": ["a", "b"], "pv": [-1e-5, 0.5]}  # inverters draw a little at night: accepted
    assert (
        client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": night}).status_code
        == 200
    )
    big = {"timestamps": [str(i) for i in range(201)]}  # 201 rows > the test server's 200 study rows
    assert_problem(client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": big}), 413)


def test_a_small_body_cannot_ask_for_a_huge_or_impossible_study(client, scenarios):
    """Red-team findings: rows are counted before any is built; loads beyond the request limit and power
    flows with no solution are named by scenario, not as queries the user never sent; bus keys are numbers."""
    x, y = scenarios
    context = {"x": rows(x), "y": rows(y)}
    huge = {
        "context": context,
        "scenarios": [{"years": list(range(100))}] * 1000,
        "time_series": {"timestamps": [str(i) for i in range(1000)]},
        "detail": "summary",
    }
    assert "100000000 rows" in assert_problem(client.post("/v1/studies", json=huge), 413, "scenarios")["detail"]
    century = {"context": context, "scenarios": [{"name": "doubling", "growth_rate": 1.0, "years": [100]}]}
    detail = assert_problem(client.post("/v1/studies", json=century), 422, "scenarios")["detail"]
    assert "'doubling', year 100" in detail and "beyond 1000 MW" in detail
    too_much_pv = {"context": context, "scenarios": [{"name": "500 MW", "der": [{"bus": 18, "kw": 5e5}]}]}
    detail = assert_problem(client.post("/v1/studies", json=too_much_pv), 422, "scenarios")["detail"]
    assert "'500 MW', year 0" in detail
    for key in ("²", "1" * 5000):
        odd = {"context": context, "scenarios": [{"bus_load_scale": {key: 1.5}}]}
        assert_problem(client.post("/v1/studies", json=odd), 422)
    twice = {"context": context, "scenarios": [{"bus_load_scale": {"18": 1.5, "018": 2.0}}]}
    assert "named twice" in assert_problem(client.post("/v1/studies", json=twice), 422)["detail"]
