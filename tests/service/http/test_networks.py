"""/v1/networks over real HTTP: upload (pandapower JSON, MATPOWER, multipart), list, read with layout, delete, errors."""

from __future__ import annotations

import secrets
import time

import httpx
import pandapower as pp
import pytest

import gridsim
from service.client import GridPFNClient, GridPFNError
from service.settings import Settings
from tests.gridsim.feeder_cases import CASE3_M, small_feeder
from tests.service.conftest import LIMITS, assert_problem, running

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


def _feeder_of_its_own(p_mw: float) -> str:
    """small_feeder with one load changed: a feeder (and content id) no other test uploads, so deleting it
    never takes one away from a test sharing the session's servers."""
    net = small_feeder()
    net.load.loc[0, "p_mw"] = p_mw
    return pp.to_json(net)


def _upload(client: httpx.Client, source: str, **headers: str) -> dict:
    made = client.post("/v1/networks", content=source, headers={"content-type": "application/json", **headers})
    assert made.status_code == 201, made.text
    return made.json()


def _context_on(client: httpx.Client, nid: str, seed: int = 0, **headers: str) -> str:
    spec = {"simulate": {"network": nid, "delta": 0.1, "n": 40, "seed": seed}}
    made = client.post("/v1/context-sets", json=spec, headers=headers)
    assert made.status_code == 201, made.text
    return made.json()["id"]


def _predict(client: httpx.Client, cid: str, **headers: str) -> httpx.Response:
    """physics-fit (it serves every network) on the small feeder's base load (4 features)."""
    body = {"model": "physics-fit", "context_id": cid, "queries": [[0.4, 0.4, 0.1, 0.1]]}
    return client.post("/v1/predict", json=body, headers=headers)


def test_delete_an_upload_and_what_follows(client: httpx.Client):
    """204, then gone from GET and the list; a context set on it stays but using it is a 404 naming the
    network; a built-in is a 422 naming network_id; the same file uploaded again is the same id, working again."""
    source = _feeder_of_its_own(0.41)
    nid = _upload(client, source)["id"]
    cid = _context_on(client, nid)
    assert _predict(client, cid).status_code == 200

    gone = client.delete(f"/v1/networks/{nid}")
    assert gone.status_code == 204 and gone.content == b""
    assert_problem(client.get(f"/v1/networks/{nid}"), 404, "network_id")
    assert nid not in {n["id"] for n in client.get("/v1/networks").json()["networks"]}
    assert_problem(client.delete(f"/v1/networks/{nid}"), 404, "network_id")  # once only
    assert_problem(client.delete("/v1/networks/" + secrets.token_hex(32)), 404, "network_id")

    # the context set stays until its TTL; predicting on it names the deleted network
    assert client.get(f"/v1/context-sets/{cid}").json()["network"] == nid
    problem = assert_problem(_predict(client, cid), 404, "context_id")
    assert f"network {nid!r}" in problem["detail"] and "deleted or expired" in problem["detail"], problem
    assert nid in problem["errors"][0]["message"]
    assert_problem(client.post("/v1/simulate", json={"network": nid, "loads": [[0.4, 0.4, 0.1, 0.1]]}), 404, "network")

    for name in ("ieee33", "kerber_landnetz_kabel_1"):
        refused = assert_problem(client.delete(f"/v1/networks/{name}"), 422, "network_id")
        assert "a built-in network cannot be deleted" in refused["detail"]
        assert refused["errors"][0]["location"] == "path" and "uploaded" in refused["errors"][0]["expected"]
    assert client.get("/v1/networks/ieee33").status_code == 200
    assert_problem(client.delete("/v1/networks/NOT-AN-ID"), 422, "network_id")

    # uploaded again: the same content id, and the context set on it answers again
    assert _upload(client, source)["id"] == nid
    assert _predict(client, cid).status_code == 200
    client.delete(f"/v1/networks/{nid}")


KEY_A, KEY_B, ADMIN = "net-key-a-0123456789", "net-key-b-9876543210", "net-admin-5555555555"


@pytest.fixture(scope="module")
def keyed(model_dir):
    settings = Settings(model_dir=model_dir, redis_url=None, api_keys=(KEY_A, KEY_B), admin_api_key=ADMIN, **LIMITS)
    with running(settings) as server:
        yield server


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_one_key_deleting_the_feeder_leaves_another_keys_copy(keyed):
    """Two keys upload the same file: each gets its own id (the content id mixed with the key's tag) and its
    own stored copy, so A deleting its upload leaves B's readable, listed and usable; A cannot delete B's (a
    404 exactly like an unknown id); the admin key can."""
    source = _feeder_of_its_own(0.43)
    with httpx.Client(base_url=keyed.url, timeout=60) as c:
        a, b = _upload(c, source, **_as(KEY_A)), _upload(c, source, **_as(KEY_B))
        assert a["id"] != b["id"] and a["features"] == b["features"]
        a_cid, b_cid = _context_on(c, a["id"], **_as(KEY_A)), _context_on(c, b["id"], **_as(KEY_B))
        assert _predict(c, b_cid, **_as(KEY_B)).status_code == 200  # B's copy rebuilt in this process

        unknown = secrets.token_hex(32)
        for theirs in (b["id"], a["id"]):  # another key's upload answers as an id that never existed
            mine = _as(KEY_A) if theirs == b["id"] else _as(KEY_B)
            real, never = (
                c.delete(f"/v1/networks/{theirs}", headers=mine),
                c.delete(f"/v1/networks/{unknown}", headers=mine),
            )
            assert_problem(real, 404, "network_id")
            assert real.content.replace(theirs.encode(), b"<id>") == never.content.replace(unknown.encode(), b"<id>")

        assert c.delete(f"/v1/networks/{a['id']}", headers=_as(KEY_A)).status_code == 204
        assert_problem(c.get(f"/v1/networks/{a['id']}", headers=_as(KEY_A)), 404, "network_id")
        assert_problem(_predict(c, a_cid, **_as(KEY_A)), 404, "context_id")
        # B's is untouched: read, listed, and its context set predicts on the copy this process holds
        assert c.get(f"/v1/networks/{b['id']}", headers=_as(KEY_B)).json()["features"] == b["features"]
        assert b["id"] in {n["id"] for n in c.get("/v1/networks", headers=_as(KEY_B)).json()["networks"]}
        assert _predict(c, b_cid, **_as(KEY_B)).status_code == 200

        assert c.delete(f"/v1/networks/{b['id']}", headers=_as(ADMIN)).status_code == 204  # the admin sees all
        assert_problem(c.get(f"/v1/networks/{b['id']}", headers=_as(KEY_B)), 404, "network_id")
        assert_problem(c.delete("/v1/networks/ieee33", headers=_as(ADMIN)), 422, "network_id")
        assert_problem(c.delete(f"/v1/networks/{unknown}"), 401, "Authorization")


def test_another_server_process_drops_its_copy_within_the_recheck(model_dir, redis_url, redis_server):
    """Two servers on one Redis (as `--processes 2` or two replicas): the one that did not delete stops
    answering from its rebuilt copy within GRIDPFN_CONTEXT_RECHECK_S; the client's delete_network is the route.
    The one that uploads and deletes is the session's (its recheck period plays no part; its upload sandbox is
    running already, where a server of its own would start one: seconds of imports)."""
    settings = Settings(model_dir=model_dir, redis_url=redis_url, context_recheck_s=0.2, **LIMITS)
    with running(settings) as second:
        with httpx.Client(base_url=second.url, timeout=60) as other, GridPFNClient(redis_server.url) as deleting:
            nid = deleting.upload_network(_feeder_of_its_own(0.44).encode())["id"]
            cid = _context_on(other, nid, seed=1)
            assert _predict(other, cid).status_code == 200  # `second` has rebuilt the upload
            assert deleting.delete_network(nid) is None
            time.sleep(0.3)
            problem = assert_problem(_predict(other, cid), 404, "context_id")
            assert f"network {nid!r}" in problem["detail"]
            assert_problem(other.post("/v1/simulate", json={"network": nid, "loads": [[0.4] * 4]}), 404, "network")
            with pytest.raises(GridPFNError) as again:
                deleting.delete_network(nid)
            assert again.value.status == 404


def test_a_stored_network_that_no_longer_rebuilds_is_a_422_naming_it_not_a_500(redis_server, redis_url):
    """An upload accepted before a reader grew stricter (here a line with a negative resistance, which MATPOWER
    uploads let through) is in the store, but its rebuild is refused: every use was a 500 "unexpected
    NetworkError". Now a 422 naming the request's field, the network and the reason, and what to do; its
    description still reads and it can be deleted. Stored through the store API, as that older server stored it."""
    import asyncio

    from service.engine.networks import Networks, snapshot_upload
    from service.engine.store import open_store
    from service.engine.tenants import KEYS_OFF

    info, _ = snapshot_upload(_feeder_of_its_own(0.45).encode(), None)
    broken = small_feeder()
    broken.load.loc[0, "p_mw"] = 0.45
    broken.line.loc[1, "r_ohm_per_km"] = -0.3
    nid = secrets.token_hex(32)  # an id of its own: no other test's upload is touched

    async def store() -> None:
        backend = open_store(redis_url)
        try:
            await Networks(backend, 3600).put({**info, "id": nid}, pp.to_json(broken), tenant=KEYS_OFF)
        finally:
            await backend.close()

    asyncio.run(store())
    with httpx.Client(base_url=redis_server.url, timeout=60) as client:
        assert client.get(f"/v1/networks/{nid}").status_code == 200
        uses = [
            (client.post("/v1/simulate", json={"network": nid, "loads": [[0.4] * 4]}), "network"),
            (client.post("/v1/simulate", json={"network": nid, "loads": [[0.4] * 4]}), "network"),  # remembered
            (client.post("/v1/context-sets", json={"simulate": {"network": nid, "n": 40}}), "simulate.network"),
            (client.get(f"/ui/api/networks/{nid}/loads"), "network_id"),
            (client.get("/v1/models/network-fit", params={"network": nid}), "network"),
        ]
        for response, field in uses:
            problem = assert_problem(response, 422, field)
            assert f"network {nid!r} is stored but cannot be used" in problem["detail"], problem
            assert "line.r_ohm_per_km" in problem["detail"] and "upload it again" in problem["errors"][0]["expected"]
        assert client.delete(f"/v1/networks/{nid}").status_code == 204
        assert_problem(client.post("/v1/simulate", json={"network": nid, "loads": [[0.4] * 4]}), 404, "network")
