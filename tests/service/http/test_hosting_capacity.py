"""POST /v1/hosting-capacity over real HTTP: capacities that match the network's own power flow,
curves, and clear errors for a study the service cannot run."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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


# A day's four steps as a profile table: `load` and `pv` shape every bus, `homes` / `shops` the classes the
# request defines, PV5 the new PV's own profile; WP4 (wind) is no class of the study: listed, never read.
PROFILE_CSV = (
    "time,load,pv,homes,shops,PV5,WP4\n"
    "2026-07-01T06:00,0.5,0.2,0.8,0.3,0.25,0.3\n"
    "2026-07-01T12:00,0.6,1.0,0.5,1.2,0.6,0.2\n"
    "2026-07-01T18:00,1.0,0.4,1.6,0.9,0.5,0.6\n"
)
CLASSES = {"homes": list(range(2, 18)), "shops": list(range(18, 34))}


def _table_rows(csv: str, classes: dict, pv_profile: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows and new PV share the server builds from `csv`, built here with gridsim's own expansion."""
    import io

    import pandas as pd

    from gridsim.scenarios import Classes, Scenario, TimeSeries, expand

    frame = pd.read_csv(io.StringIO(csv))
    net = gridsim.network("ieee33")
    profiles = {name: frame[name].to_numpy() for name in ("homes", "shops", "PV5")}
    series = TimeSeries(tuple(frame["time"]), frame["load"].to_numpy(), frame["pv"].to_numpy(), 0.25, profiles)
    rows = expand(net, [Scenario("hosting capacity")], series, Classes.of_buses(net, classes)).rows
    share = frame["pv"].to_numpy() * (frame[pv_profile].to_numpy() if pv_profile else 1.0)
    return rows, share


def _post_table(client, spec: dict, csv: str | bytes, name: str = "profiles.csv"):
    import json

    data = csv.encode() if isinstance(csv, str) else csv
    return client.post(
        "/v1/hosting-capacity", data={"spec": json.dumps(spec)}, files={"file": (name, data, "text/csv")}
    )


def test_a_profile_table_answers_as_the_same_rows_sent_as_json(client, scenarios):
    """multipart: the study as JSON (`spec`) and its rows as a profile table (`file`); the answer is the JSON
    answer for the rows and PV share the table stands for, to the last bit, and columns not read are listed."""
    x, y = scenarios
    cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
    spec = {"context_id": cid, "buses": [6, 18], "classes": CLASSES, "pv_profile": "PV5", "max_kw": 8000.0}
    sent = _post_table(client, spec, PROFILE_CSV)
    assert sent.status_code == 200, sent.text
    answer = sent.json()
    assert answer["rows"] == 3 and answer["ignored_columns"] == ["WP4"]
    loads, share = _table_rows(PROFILE_CSV, CLASSES, "PV5")
    json_body = {k: v for k, v in spec.items() if k not in ("classes", "pv_profile")}
    same = client.post("/v1/hosting-capacity", json={**json_body, "loads": rows(loads), "pv_profile": share.tolist()})
    assert same.status_code == 200, same.text
    want = same.json()
    assert want["ignored_columns"] == [] and want["rows"] == 3
    assert answer["buses"] == want["buses"] and answer["risk_without_pv"] == want["risk_without_pv"]
    assert [b["bus"] for b in answer["buses"]] == [6, 18] and all(b["hosting_capacity_kw"] > 0 for b in answer["buses"])
    # the new PV follows PV5 x pv: at 60 % of its size at noon it may be larger than following pv alone
    assert share.tolist() == [0.05, 0.6, 0.2]
    pv_alone = _post_table(client, {k: v for k, v in spec.items() if k != "pv_profile"}, PROFILE_CSV).json()
    for with_pv5, alone in zip(answer["buses"], pv_alone["buses"], strict=True):
        assert with_pv5["hosting_capacity_kw"] > alone["hosting_capacity_kw"] > 0, (with_pv5, alone)
    # a table of overall load factors alone is the JSON `load_scales` study, the network's generation at full output
    plain = _post_table(client, {"context_id": cid, "buses": [6, 18, 33]}, "time,load\na,0.3\nb,1.0\n")
    assert plain.status_code == 200, plain.text
    scaled = client.post(
        "/v1/hosting-capacity", json={"context_id": cid, "buses": [6, 18, 33], "load_scales": [0.3, 1.0]}
    )
    assert plain.json()["buses"] == scaled.json()["buses"] and plain.json()["max_kw"] == scaled.json()["max_kw"]
    # the capacities are the power flow's (as the JSON study's are, test_capacity_per_bus_matches_...)
    net = gridsim.network("ieee33")
    for entry in answer["buses"]:
        at = list(net.load_buses).index(entry["bus"])
        lit = share > 0
        truth = VoltageModel(net)
        lo, hi = 0.0, 8.0
        while hi - lo > 8.0 / 4096:
            mid = 0.5 * (lo + hi)
            shifted = loads[lit].copy()
            shifted[:, at] -= mid * share[lit]
            lo, hi = (lo, mid) if np.nanmax(truth(shifted)) > 1.05 else (mid, hi)
        assert abs(entry["hosting_capacity_kw"] - lo * 1e3) <= 0.05 * lo * 1e3, (entry, lo)


def test_a_bad_profile_table_is_refused_naming_its_column_or_field(client, scenarios):
    x, y = scenarios
    cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
    spec = {"context_id": cid, "buses": [18], "classes": CLASSES, "pv_profile": "PV5"}
    # a cell that is not a number: its row (1-based, header excluded) and column
    entry = assert_problem(_post_table(client, spec, PROFILE_CSV.replace("1.2,", "lots,")), 422, "file")["errors"][0]
    assert (entry["row"], entry["column"]) == (2, "shops") and "'lots' is not a number" in entry["message"]
    # the new PV's share above 1 (or below 0) in the column it follows
    entry = assert_problem(_post_table(client, spec, PROFILE_CSV.replace(",0.6,0.2\n", ",1.5,0.2\n")), 422, "file")
    entry = entry["errors"][0]
    assert (entry["row"], entry["column"]) == (2, "PV5") and "outside [0, 1]" in entry["message"]
    assert "[0, 1]" in entry["expected"]
    night = PROFILE_CSV.replace("06:00,0.5,0.2", "06:00,0.5,-0.01")
    entry = assert_problem(_post_table(client, spec, night), 422, "file")["errors"][0]
    assert (entry["row"], entry["column"]) == (1, "pv")
    # a per-bus PV column: the new PV follows one share per step at every candidate
    per_bus = "time,load,pv_bus18\na,1.0,0.5\n"
    entry = assert_problem(_post_table(client, spec, per_bus), 422, "file")["errors"][0]
    assert entry["column"] == "pv_bus18" and "per-bus PV column" in entry["message"]
    # no time column, a Parquet name on a CSV, too many steps
    assert assert_problem(_post_table(client, spec, "step,PV5\n1,0.5\n"), 422, "file")["errors"][0]["column"] == "time"
    assert_problem(_post_table(client, spec, PROFILE_CSV, "p.parquet"), 422, "file")
    long_csv = "time,load\n" + "".join(f"{i},1\n" for i in range(201))  # the test server's 200 study rows
    too_long = _post_table(client, spec, long_csv)
    assert "GRIDPFN_MAX_STUDY_ROWS" in assert_problem(too_long, 413, "file")["errors"][0]["expected"]
    # the work (rows x buses x passes) over the limit: named by the file, with the way out
    busy = _post_table(client, {**spec, "buses": [6, 18, 33]}, PROFILE_CSV)
    problem = assert_problem(busy, 413, "file")
    assert "GRIDPFN_MAX_STUDY_ROWS" in str(problem["errors"]) and '"as_job": true' in str(problem["errors"])
    # the spec: pv_profile naming no column, or a reserved one; rows in the spec; a list for pv_profile
    missing = _post_table(client, {**spec, "pv_profile": "PV9"}, PROFILE_CSV)
    assert "no column 'PV9'" in assert_problem(missing, 422, "pv_profile")["detail"]
    assert "PV5" in assert_problem(missing, 422, "pv_profile")["errors"][0]["expected"]
    assert_problem(_post_table(client, {**spec, "pv_profile": "pv"}, PROFILE_CSV), 422, "pv_profile")
    for rows_field in ({"load_scales": [0.5]}, {"loads": rows(x[:1])}):
        both = _post_table(client, {**spec, **rows_field}, PROFILE_CSV)
        assert "given by the `file` part" in assert_problem(both, 422)["detail"]
    assert_problem(_post_table(client, {**spec, "pv_profile": [1.0, 1.0, 1.0]}, PROFILE_CSV), 422, "pv_profile")
    twice = _post_table(client, {**spec, "classes": {"homes": [18], "shops": [18]}}, PROFILE_CSV)
    assert "also in class 'homes'" in assert_problem(twice, 422, "classes.shops")["detail"]
    # the form: a field other than spec, a spec that is not JSON, no file part
    other = client.post("/v1/hosting-capacity", data={"loads": "1"}, files={"file": ("p.csv", PROFILE_CSV)})
    assert "not a form field of a hosting-capacity study" in assert_problem(other, 422, "loads")["detail"]
    assert_problem(client.post("/v1/hosting-capacity", data={"spec": "{"}, files={"file": ("p.csv", PROFILE_CSV)}), 422)


def test_a_profile_table_runs_as_a_job_to_the_same_capacities(memory_server, scenarios):
    """`as_job` in the multipart spec: 202, a job of a row per candidate bus whose capacities and curves are the
    one-request answer's; its CSV result carries the curves as JSON lists."""
    import io
    import json
    import time

    import httpx
    import pandas as pd

    x, y = scenarios
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
        spec = {"context_id": cid, "buses": [6, 18], "classes": CLASSES, "pv_profile": "PV5", "max_kw": 8000.0}
        now = _post_table(client, spec, PROFILE_CSV)
        assert now.status_code == 200, now.text
        queued = _post_table(client, {**spec, "as_job": True, "buses": [6, 18, 25, 33]}, PROFILE_CSV)
        assert queued.status_code == 202, queued.text
        job = queued.json()
        assert queued.headers["location"] == f"/v1/batch-jobs/{job['id']}"
        assert job["source"] == "hosting-capacity" and job["rows_total"] == 4
        deadline = time.monotonic() + 60
        while (state := client.get(f"/v1/batch-jobs/{job['id']}").json()["state"]) not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert state == "done"
        result = pd.read_parquet(pa.BufferReader(client.get(f"/v1/batch-jobs/{job['id']}/result").content))
        csv = client.get(f"/v1/batch-jobs/{job['id']}/result?format=csv")
        assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
        as_text = pd.read_csv(io.StringIO(csv.text), float_precision="round_trip")
        bad = _post_table(client, {**spec, "as_job": True}, PROFILE_CSV.replace("1.2,", "lots,"))
        assert assert_problem(bad, 422, "file")["errors"][0]["column"] == "shops"  # refused before it is queued
    want = {b["bus"]: b for b in now.json()["buses"]}
    assert list(result["bus"]) == [6, 18, 25, 33]
    step = now.json()["resolution_kw"]
    for _, got in result[result["bus"].isin([6, 18])].iterrows():
        expected = want[got["bus"]]
        assert abs(got["hosting_capacity_kw"] - expected["hosting_capacity_kw"]) <= step, (got, expected)
        assert bool(got["at_max_kw"]) == expected["at_max_kw"]
        np.testing.assert_allclose(got["curve_kw"], expected["curve_kw"], rtol=0, atol=2 * step)
    assert list(as_text["bus"]) == list(result["bus"])
    assert list(as_text["hosting_capacity_kw"]) == list(result["hosting_capacity_kw"])
    for text, exact in zip(as_text["curve_risk"], result["curve_risk"], strict=True):
        assert json.loads(text) == list(exact)  # every digit kept


def test_rows_the_feeder_cannot_carry_without_new_pv_are_refused_naming_them(memory_server, scenarios):
    """User trial: a night step whose loads collapse the feeder (x4, no PV) set every bus's capacity to 0 kW
    and risk_without_pv to 1, naming nothing (pandapower has no solution there either:
    tests/models/test_hosting_capacity.py); as JSON rows, as load_scales, as a table's step, and as a job."""
    import httpx

    x, y = scenarios
    net = gridsim.network("ieee33")
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
        scaled = client.post("/v1/hosting-capacity", json={"context_id": cid, "buses": [18], "load_scales": [0.3, 4.0]})
        detail = assert_problem(scaled, 422, "load_scales")["detail"]
        assert "load_scales[1] = 4 (the base loads x 4)" in detail and "even without new PV" in detail
        loads = np.stack([net.base_consumption * 0.6, net.base_consumption * 4.0])
        night = {"context_id": cid, "buses": [18], "loads": rows(loads), "pv_profile": [1.0, 0.0]}
        assert "rows [1]" in assert_problem(client.post("/v1/hosting-capacity", json=night), 422, "loads")["detail"]
        table = "time,load,PV5\n2026-07-01T12:00,0.6,0.9\n2026-07-01T13:00,0.5,1.0\n2026-07-01T19:00,4.0,0\n"
        spec = {"context_id": cid, "buses": [18], "pv_profile": "PV5"}
        entry = assert_problem(_post_table(client, spec, table), 422, "file")["errors"][0]
        assert entry["row"] == 3 and "step '2026-07-01T19:00'" in entry["message"] and entry["expected"]
        day = _post_table(client, {**spec, "buses": [6, 18, 33]}, table.rsplit("2026-07-01T19:00", 1)[0])
        assert day.status_code == 200, day.text
        assert day.json()["risk_without_pv"] < 0.05
        assert all(b["hosting_capacity_kw"] > 1000 for b in day.json()["buses"])
        jobs = getattr(memory_server.app.state, "jobs", None)
        before = set(jobs.root.iterdir()) if jobs else set()
        job = _post_table(client, {**spec, "as_job": True}, table)  # refused before it is queued
        assert assert_problem(job, 422, "file")["errors"][0]["row"] == 3
        assert set(memory_server.app.state.jobs.root.iterdir()) == before


def test_a_table_column_naming_no_load_bus_or_a_class_without_its_column_is_refused(memory_server, scenarios):
    """User trial: load_bus99 / load_bus1 were only listed as ignored, and a class of `classes` with no column in
    the table ran at x1, both with 200."""
    import httpx

    x, y = scenarios
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
        spec = {"context_id": cid, "buses": [18]}
        for column in ("load_bus99", "load_bus1"):
            entry = assert_problem(_post_table(client, spec, f"time,{column}\na,2.0\n"), 422, "file")["errors"][0]
            assert entry["column"] == column and "names no load bus" in entry["message"] and "18" in entry["expected"]
        only_homes = "time,load,homes\na,0.5,0.8\nb,0.6,1.2\n"
        entry = assert_problem(_post_table(client, {**spec, "classes": CLASSES}, only_homes), 422, "file")["errors"][0]
        assert entry["column"] == "shops" and "no column for class 'shops'" in entry["message"]
        both = _post_table(client, {**spec, "classes": CLASSES}, "time,homes,shops\na,0.8,0.3\n")
        assert both.status_code == 200, both.text
