"""POST /v1/hosting-capacity over real HTTP: capacities that match the network's own power flow,
curves, and clear errors for a study the service cannot run."""

from __future__ import annotations

import numpy as np

import gridsim
from gridsim.api import VoltageModel
from tests.service.conftest import assert_problem, rows


def _exact(net, loads: np.ndarray, position: int, upper: float, max_mw: float) -> float:
    truth = VoltageModel(net)
    lo, hi = 0.0, max_mw
    while hi - lo > max_mw / 4096:
        mid = 0.5 * (lo + hi)
        shifted = loads.copy()
        shifted[:, position] -= mid
        lo, hi = (lo, mid) if np.nanmax(truth(shifted)) > upper else (mid, hi)
    return lo


def test_capacity_per_bus_matches_a_power_flow_bisection(client, scenarios):
    x, y = scenarios
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "buses": [7, 18, 33],
        "load_scales": [0.3, 1.0],
        "max_kw": 8000.0,
    }
    response = client.post("/v1/hosting-capacity", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == "network-fit" and answer["network"] == "ieee33" and answer["rows"] == 2
    net = gridsim.network("ieee33")
    base = np.concatenate([net.base_p_mw, net.base_q_mvar])
    loads = np.stack([base * 0.3, base])
    assert [b["bus"] for b in answer["buses"]] == [7, 18, 33]
    for entry in answer["buses"]:
        exact = _exact(net, loads, list(net.load_buses).index(entry["bus"]), 1.05, 8.0) * 1e3
        assert not entry["at_max_kw"] and exact > 100
        assert abs(entry["hosting_capacity_kw"] - exact) <= 0.05 * exact, (entry, exact)
        assert len(entry["curve_kw"]) == len(entry["curve_risk"]) == 11
        assert all(0.0 <= r <= 1.0 for r in entry["curve_risk"]) and entry["curve_risk"][-1] > 0.05
    assert answer["risk_without_pv"] < 0.05 and answer["timing"]["query_rows"] > 0


def test_a_study_the_service_cannot_run_is_refused_naming_the_field(client, scenarios):
    x, y = scenarios
    context = {"x": rows(x), "y": rows(y)}
    unknown = client.post("/v1/hosting-capacity", json={"context": context, "buses": [1]})  # bus 1: the slack
    assert "not load buses" in assert_problem(unknown, 422, "buses")["detail"]
    profile = client.post("/v1/hosting-capacity", json={"context": context, "load_scales": [0.5], "pv_profile": [1, 1]})
    assert_problem(profile, 422, "pv_profile")
    both = client.post("/v1/hosting-capacity", json={"context": context, "load_scales": [0.5], "loads": rows(x[:1])})
    assert_problem(both, 422)
    many = client.post(
        "/v1/hosting-capacity", json={"context": context, "load_scales": [0.1 * i for i in range(1, 11)]}
    )
    assert "GRIDPFN_MAX_STUDY_ROWS" in str(assert_problem(many, 413, "loads")["errors"])  # 10 x 32 x 25 > 200


def test_a_feeders_own_generation_stays_at_full_output_and_too_large_a_search_still_answers(client):
    """Red-team findings: load_scales scaled the net's own PV with its loads (an unsafe capacity); a search
    ceiling where the power flow has no solution was a 422; a tiny body could ask for minutes of work."""
    import pandapower as pp

    from gridsim.feeders import from_pandapower_json
    from tests.gridsim.feeder_cases import small_feeder

    net = small_feeder()
    pp.create_sgen(net, 3, p_mw=0.6)  # more PV on the far bus: the base case already lifts voltages
    text = pp.to_json(net)
    nid = client.post("/v1/networks", content=text, headers={"content-type": "application/json"}).json()["id"]
    feeder = from_pandapower_json(text)
    rng = np.random.default_rng(3)
    x = feeder.base_x * (1 + 0.2 * rng.uniform(-1, 1, (60, feeder.n_features)))
    context = {"x": rows(x), "y": rows(VoltageModel(feeder)(x)), "network": nid}
    body = {"context": context, "load_scales": [0.3], "max_kw": 20_000.0, "upper_pu": 1.03}
    response = client.post("/v1/hosting-capacity", json=body)
    assert response.status_code == 200, response.text
    light = (feeder.base_consumption * 0.3 - feeder.base_generation)[None]
    for entry in response.json()["buses"]:
        at = list(feeder.load_buses).index(entry["bus"])
        exact = _exact(feeder, light, at, 1.03, 20.0) * 1e3
        assert abs(entry["hosting_capacity_kw"] - exact) <= max(0.05 * exact, 2 * response.json()["resolution_kw"])
    assert response.json()["resolution_kw"] == 20_000.0 / 4096
    scenarios_x = gridsim.simulate(100, 0.1, 4)
    big = {
        "context": {"x": rows(scenarios_x.x), "y": rows(scenarios_x.vm_pu)},
        "load_scales": [0.1 * i for i in range(1, 6)],
        "curve_points": 101,
    }
    assert "GRIDPFN_MAX_STUDY_ROWS" in str(assert_problem(client.post("/v1/hosting-capacity", json=big), 413)["errors"])
