"""POST /v1/meter-placement over real HTTP: a sparse context (null where a bus is not read) on a feeder whose
lines differ from the service's model; the answer ranks exactly the unread buses, best first, as the
in-process ranking does (the engine adds nothing but checks), and a request it cannot serve is refused
naming the field. Real uvicorn server, both stores, real power flows (gridsim) for the truth."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from gridsim.sampling import sample_loads
from models.meter_placement import rank_meters
from models.network_fit import method_for
from tests.service.conftest import assert_problem, rows

NET = gridsim.network("ieee33")
METERED = (5, 11, 17, 21, 24, 31)  # output indices: buses 7, 13, 19, 23, 26, 33


@pytest.fixture(scope="module")
def sparse_feeder():
    """(x, y with null where not read, queries): 200 rows on IEEE 33 with every line 0.7-1.3 off its model."""
    rng = np.random.default_rng(30)
    scale = rng.uniform(0.7, 1.3, NET.n_lines)
    real = dataclasses.replace(NET, r_ohm=NET.r_ohm * scale, x_ohm=NET.x_ohm * scale)
    x = sample_loads(NET, 200, 0.3, rng)
    y = np.full((200, NET.n_outputs), np.nan)
    y[:, METERED] = VoltageModel(real)(x)[:, METERED]
    return x, y, sample_loads(NET, 5, 0.3, rng)


def _nulled(a: np.ndarray) -> list:
    return [[None if np.isnan(v) else float(v) for v in row] for row in a]


def test_the_unread_buses_are_ranked_best_first_as_in_process(client, sparse_feeder):
    x, y, queries = sparse_feeder
    body = {"context": {"x": rows(x), "y": _nulled(y)}, "queries": rows(queries), "top": 4}
    response = client.post("/v1/meter-placement", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == "network-fit" and answer["network"] == "ieee33" and answer["queries"] == 5
    ranked = answer["buses"]
    assert len(ranked) == 4
    unread = {NET.output_buses[j] for j in range(NET.n_outputs) if j not in METERED}
    assert all(entry["bus"] in unread and entry["output"] == f"vm_pu_bus{entry['bus']}" for entry in ranked)
    spreads = [entry["largest_std"] for entry in ranked]
    assert spreads == sorted(spreads) and all(np.isfinite(spreads))
    assert spreads[0] < answer["current_largest_std"]  # a meter where the spread is largest helps there
    method = method_for(NET)
    expected = rank_meters(method, method.fit(x, y), x, queries, top=4)
    assert [entry["bus"] for entry in ranked] == [NET.output_buses[j] for j in expected.candidates]
    assert np.allclose(spreads, expected.largest_spread, rtol=1e-6)
    again = client.post("/v1/meter-placement", json=body).json()
    assert [entry["bus"] for entry in again["buses"]] == [entry["bus"] for entry in ranked]
    assert again["timing"]["context_cached"]


def test_a_request_placement_cannot_serve_is_refused_naming_the_field(client, sparse_feeder):
    x, y, queries = sparse_feeder
    context = {"x": rows(x), "y": _nulled(y)}
    other = client.post(
        "/v1/meter-placement", json={"context": context, "queries": rows(queries), "model": "physics-fit"}
    )
    assert "network-fit" in str(assert_problem(other, 422)["errors"])
    assert_problem(client.post("/v1/meter-placement", json={"context": context}), 422, "queries")
    assert_problem(
        client.post("/v1/meter-placement", json={"context": context, "queries": rows(queries), "top": 0}), 422
    )
    incomplete = rows(queries)
    incomplete[0][3] = None
    assert_problem(client.post("/v1/meter-placement", json={"context": context, "queries": incomplete}), 422)
    many = client.post("/v1/meter-placement", json={"context": context, "queries": rows(np.repeat(queries, 4, 0))})
    assert "GRIDPFN_MAX_QUERIES" in str(assert_problem(many, 413, "queries")["errors"])  # 20 x 26 buses > 200
