"""/v1/networks over real HTTP: upload (pandapower JSON, MATPOWER, multipart), list, read with layout, errors."""

from __future__ import annotations

import httpx
import pandapower as pp
import pytest

import gridsim
from tests.gridsim.feeder_cases import CASE3_M, small_feeder
from tests.service.conftest import LIMITS, assert_problem

BUILT_INS = {"ieee33", "kerber_landnetz_kabel_1", "mv_oberrhein_sub0"}


@pytest.fixture(scope="module")
def feeder_json() -> str:
    return pp.to_json(small_feeder())


def test_upload_list_and_read(client: httpx.Client, feeder_json: str):
    made = client.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    info = made.json()
    nid = info["id"]
    assert len(nid) == 64 and made.headers["location"] == f"/v1/networks/{nid}"
    assert info["kind"] == "uploaded" and info["format"] == "pandapower-json" and info["expires_in_s"] > 0
    assert info["features"] == ["p_mw_bus2", "p_mw_bus3", "q_mvar_bus2", "q_mvar_bus3"]
    assert info["outputs"] == ["vm_pu_bus1", "vm_pu_bus2", "vm_pu_bus3", "vm_pu_bus6"]
    # the same feeder as a multipart file gets the same content id
    again = client.post("/v1/networks", files={"file": ("feeder.json", feeder_json.encode(), "application/json")})
    assert again.status_code == 201 and again.json()["id"] == nid

    listed = client.get("/v1/networks").json()["networks"]
    by_id = {n["id"]: n for n in listed}
    assert BUILT_INS <= set(by_id) and by_id["ieee33"]["n_features"] == 64 and by_id["ieee33"]["kind"] == "built-in"
    assert by_id[nid]["n_buses"] == 5 and by_id[nid]["n_loads"] == 2 and by_id[nid]["expires_in_s"] > 0

    read = client.get(f"/v1/networks/{nid}").json()
    assert read["id"] == nid and read["slack_bus"] == 0 and read["layout"] == "tree"
    xy = {b["bus"]: (b["x"], b["y"]) for b in read["buses"]}
    assert xy[0][0] == 0 and xy[1][0] == 1 and xy[6][0] == 3  # x = depth along the feeder
    assert {b["name"] for b in read["buses"]} == {"n0", "n1", "n2", "n3", "n6"}
    assert [line["closed"] for line in read["lines"]].count(False) == 1  # the tie behind the open switch
    assert read["loads"][0] == {"bus": 2, "p_mw": pytest.approx(0.25), "q_mvar": pytest.approx(0.1)}


def test_matpower_upload_and_built_ins(memory_server):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        made = client.post("/v1/networks", content=CASE3_M, headers={"content-type": "text/plain"})
        assert made.status_code == 201, made.text
        assert made.json()["format"] == "matpower" and made.json()["features"][0] == "p_mw_bus2"
        as_file = client.post("/v1/networks", files={"file": ("case3r.m", CASE3_M.encode())})
        assert as_file.json()["id"] == made.json()["id"]
        ieee = client.get("/v1/networks/ieee33").json()
        assert ieee["features"][:2] == ["p_mw_bus2", "p_mw_bus3"] and ieee["expires_in_s"] is None
        assert len(ieee["buses"]) == 33 and len(ieee["lines"]) == 37  # 32 closed + 5 open ties
        oberrhein = client.get("/v1/networks/mv_oberrhein_sub0").json()
        geo = gridsim.network("mv_oberrhein_sub0").bus_xy  # the net's own coordinates (pandapower 3: lon/lat)
        assert oberrhein["layout"] == "geodata" and [[b["x"], b["y"]] for b in oberrhein["buses"]] == geo.tolist()
        assert len(oberrhein["transformers"]) == 1
        assert_problem(client.get("/v1/networks/" + "0" * 64), 404, "network_id")
        assert_problem(client.get("/v1/networks/NOT-AN-ID"), 422)


def _json_of(mutate) -> str:
    net = small_feeder()
    mutate(net)
    return pp.to_json(net)


@pytest.mark.parametrize(
    "body, field, words",
    [
        (
            lambda: _json_of(lambda n: n.switch.drop(n.switch.index[n.switch.et == "l"], inplace=True)),
            "line",
            "not radial when operated",
        ),
        (lambda: _json_of(lambda n: n.ext_grid.drop(n.ext_grid.index, inplace=True)), "ext_grid", "no slack"),
        (lambda: _json_of(lambda n: n.load.loc.__setitem__((0, "bus"), 99)), "load.bus", "bus 99"),
        (lambda: _json_of(lambda n: n.load.__setitem__("scaling", 400.0)), "load", "does not converge"),
        (lambda: "hello", "body", "neither pandapower JSON nor a MATPOWER case"),
        (lambda: "mpc.bus = [1 2;", "mpc.bus", "[ without its ]"),
        (lambda: "", "body", "empty upload"),
    ],
)
def test_bad_uploads_are_422_naming_the_problem(memory_server, body, field, words):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        response = client.post("/v1/networks", content=body(), headers={"content-type": "application/json"})
    problem = assert_problem(response, 422, field)
    assert words in problem["detail"], problem


def test_upload_over_the_body_limit_is_413(memory_server):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        response = client.post(
            "/v1/networks",
            content=b"{" + b" " * LIMITS["max_body_bytes"] + b"}",
            headers={"content-type": "application/json"},
        )
    assert_problem(response, 413, "body")


def test_an_upload_keeps_its_nets_name_or_the_one_given(client: httpx.Client):
    net = small_feeder()
    net.name = "  Feeder   North "
    made = client.post("/v1/networks", content=pp.to_json(net), headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    nid = made.json()["id"]
    assert made.json()["title"] == "Feeder North"
    assert {n["id"]: n["title"] for n in client.get("/v1/networks").json()["networks"]}[nid] == "Feeder North"
    assert client.get(f"/v1/networks/{nid}").json()["title"] == "Feeder North"
    net.load.loc[0, "p_mw"] = 0.41  # another feeder (another content id), named by its uploader
    named = client.post("/v1/networks", files={"file": ("f.json", pp.to_json(net).encode())}, data={"name": "Ring 7"})
    assert named.status_code == 201 and named.json()["title"] == "Ring 7" and named.json()["id"] != nid
    assert client.get(f"/v1/networks/{named.json()['id']}").json()["title"] == "Ring 7"
    long = client.post("/v1/networks?name=" + "x" * 121, content=pp.to_json(net))
    assert "121" not in assert_problem(long, 422, "name")["detail"]
    assert client.get("/v1/networks/ieee33").json()["title"] == "case33bw"  # pandapower's name for it
