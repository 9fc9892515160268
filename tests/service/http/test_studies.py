"""POST /v1/studies over real HTTP: a planner's question in one request, answered as a per-bus table
that agrees with the power flow, and a time series' expected hours outside the band."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gridsim
from gridsim.api import VoltageModel
from gridsim.scenarios import DER, Classes, Scenario, TimeSeries, expand
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
    # numbers are numbers: text and booleans are refused, not coerced (`true` would be 100 % growth a year)
    for scenario, field in (
        ({"load_scale": "1.4"}, "scenarios[0].load_scale"),
        ({"growth_rate": True, "years": [1]}, "scenarios[0].growth_rate"),
        ({"der": [{"bus": 18, "kw": "250"}]}, "scenarios[0].der[0].kw"),
    ):
        assert_problem(client.post("/v1/studies", json={"context": context, "scenarios": [scenario]}), 422, field)
    coerced = client.post("/v1/hosting-capacity", json={"context": context, "load_scales": [1], "alpha": "0.05"})
    assert_problem(coerced, 422, "alpha")


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


def test_customer_classes_as_bus_lists_scale_their_buses_alone(memory_server, scenarios):
    """A built-in has no classes: the request defines them as bus lists; `class_scaling` moves those buses."""
    x, y = scenarios
    shops = [18, 19, 20, 21, 22]
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "classes": {"shops": shops, "homes": [2, 3, 4]},
        "scenarios": [{"name": "shops +60 %", "class_scaling": {"shops": 1.6}}],
        "detail": "long",
    }
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        answer = client.post("/v1/studies", json=body).json()
        assert answer["classes"] == ["shops", "homes"] and answer["unused_profiles"] == []
        net = gridsim.network("ieee33")
        plan = Scenario("s", class_scaling={"shops": 1.6})
        loads = expand(net, [plan], classes=Classes.of_buses(net, {"shops": shops, "homes": [2, 3, 4]})).rows
        changed = {net.load_buses[i % net.n_load] for i in np.flatnonzero(~np.isclose(loads[0], net.base_x))}
        assert changed == set(shops)
        truth = VoltageModel(net)(loads)[0]
        np.testing.assert_allclose(answer["long"]["mean"], truth, atol=2e-4)
        unknown = {**body, "scenarios": [{"class_scaling": {"offices": 2.0}}]}
        problem = assert_problem(client.post("/v1/studies", json=unknown), 422, "scenarios[0].class_scaling")
        assert "no customer class 'offices'" in problem["detail"] and "shops" in problem["errors"][0]["expected"]
        twice = {**body, "classes": {"shops": [18], "homes": [18]}}
        assert (
            "also in class 'shops'"
            in assert_problem(client.post("/v1/studies", json=twice), 422, "classes.homes")["detail"]
        )


def _classed_upload(client: httpx.Client) -> str:
    """small_feeder with SimBench-style `profile` classes (H0-A, G1-A loads; a PV5 sgen), uploaded."""
    import pandapower as pp

    from tests.gridsim.feeder_cases import small_feeder

    net = small_feeder()
    net.load["profile"] = ["H0-A", "G1-A", "H0-A"]
    net.sgen["profile"] = ["PV5"]
    made = client.post("/v1/networks", content=pp.to_json(net), headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    assert [c["name"] for c in made.json()["classes"]] == ["G1-A", "H0-A", "PV5"]
    return made.json()["id"]


def test_a_simbench_style_profile_table_uploads_with_the_study(memory_server):
    """multipart: the study as JSON (`spec`), then a CSV of a time column and SimBench profile columns; only the
    columns the network's classes use are read, the others listed; the answer follows the power flow."""
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        nid = _classed_upload(client)
        cid = client.post(
            "/v1/context-sets", json={"simulate": {"network": nid, "delta": 0.3, "n": 60, "seed": 0}}
        ).json()["id"]
        times = ["01.01.2016 00:00", "01.01.2016 00:15", "01.01.2016 00:30"]
        h0_p, h0_q, pv5 = [0.5, 1.2, 2.0], [0.4, 1.0, 1.5], [0.0, 0.5, 1.0]
        csv = "time,H0-A_qload,H0-A_pload,PV5,WP4\n" + "".join(
            f"{t},{q},{p},{g},0.3\n" for t, p, q, g in zip(times, h0_p, h0_q, pv5, strict=True)
        )
        spec = {"context_id": cid, "scenarios": [{"name": "grown", "load_scale": 1.1}], "step_hours": 0.25}
        sent = client.post(
            "/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("profiles.csv", csv.encode(), "text/csv")}
        )
        assert sent.status_code == 200, sent.text
        answer = sent.json()
        assert answer["rows"] == 3 and answer["ignored_columns"] == ["WP4"] and answer["unused_profiles"] == []
        assert answer["long"]["timestamp"][0] == times[0]
        net = _resolved(nid)
        profiles = {"H0-A_pload": np.array(h0_p), "H0-A_qload": np.array(h0_q), "PV5": np.array(pv5)}
        series = TimeSeries(tuple(times), np.ones(3), np.ones(3), 0.25, profiles)
        truth = VoltageModel(net)(expand(net, [Scenario("grown", load_scale=1.1)], series).rows)
        np.testing.assert_allclose(np.reshape(answer["long"]["mean"], truth.shape), truth, atol=1e-4)
        assert all(s["hours_outside"] is not None for s in answer["summary"])
        # a bad cell is named by row and column; no time column, too many rows, a spec carrying a series: refused
        bad = csv.replace("1.2,", "lots,")
        refused = client.post(
            "/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("p.csv", bad.encode(), "text/csv")}
        )
        entry = assert_problem(refused, 422, "file")["errors"][0]
        assert (entry["row"], entry["column"]) == (2, "H0-A_pload") and "'lots' is not a number" in entry["message"]
        no_time = client.post(
            "/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("p.csv", b"step,PV5\n1,2\n")}
        )
        assert assert_problem(no_time, 422, "file")["errors"][0]["column"] == "time"
        long_csv = "time,PV5\n" + "".join(f"{i},1\n" for i in range(201))  # the test server's 200 study rows
        too_long = client.post("/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("p.csv", long_csv)})
        assert "GRIDPFN_MAX_STUDY_ROWS" in assert_problem(too_long, 413, "file")["errors"][0]["expected"]
        # a table bigger than the form fields' limit, sent at once: uvicorn may hand the route the spec and much
        # of the file as one chunk, and only the bytes before the file part count against the fields' limit
        wide = "time,PV5," + ",".join(f"X{i}" for i in range(300)) + "\n"
        wide += "".join(f"{i},0.5," + ",".join(["0.123456789"] * 300) + "\n" for i in range(150))
        assert len(wide) > 400_000
        big = client.post("/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("p.csv", wide.encode())})
        assert big.status_code == 200 and big.json()["rows"] == 150, big.text
        twice = {**spec, "time_series": {"timestamps": ["a"]}}
        both = client.post("/v1/studies", data={"spec": json.dumps(twice)}, files={"file": ("p.csv", csv.encode())})
        assert "given by the `file` part" in assert_problem(both, 422)["detail"]


def _resolved(nid: str):
    """The uploaded network as the server builds it (its stored JSON is the normalised net's)."""
    import pandapower as pp

    from gridsim.feeders import from_pandapower_json
    from tests.gridsim.feeder_cases import small_feeder

    net = small_feeder()
    net.load["profile"] = ["H0-A", "G1-A", "H0-A"]
    net.sgen["profile"] = ["PV5"]
    network = from_pandapower_json(pp.to_json(net))
    assert network.name == nid
    return network


def test_a_study_runs_as_a_batch_job_to_the_same_summary(memory_server, scenarios):
    """`as_job`: 202 and a batch job whose summary (hours per scenario and year, the worst row's labels) and long
    result (labelled rows) are the study's own answer."""
    x, y = scenarios
    steps = [f"2026-07-01T{10 + i // 4:02d}:{15 * (i % 4):02d}" for i in range(6)]
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "scenarios": [
            {"name": "growth", "load_scale": 1.2, "growth_rate": 0.05, "years": [0, 5]},
            {"name": "pv", "der": [{"bus": b, "kw": 300} for b in PV_BUSES]},
        ],
        "time_series": {"timestamps": steps, "load": [1.0, 1.1, 1.2, 1.3, 0.6, 0.4], "pv": [0, 0.3, 0.6, 1, 1, 1]},
        "detail": "long",
    }
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        now = client.post("/v1/studies", json=body)
        assert now.status_code == 200, now.text
        queued = client.post("/v1/studies", json={**body, "as_job": True})
        assert queued.status_code == 202, queued.text
        job = queued.json()
        assert queued.headers["location"] == f"/v1/batch-jobs/{job['id']}"
        assert job["source"] == "study" and job["rows_total"] == 18 and job["hours_per_row"] == 0.25
        assert job["labels"] == ["scenario", "year", "timestamp"]
        deadline = time.monotonic() + 60
        while (state := client.get(f"/v1/batch-jobs/{job['id']}").json()["state"]) not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert state == "done"
        summary = client.get(f"/v1/batch-jobs/{job['id']}/summary").json()
        long = pd.read_parquet(pa.BufferReader(client.get(f"/v1/batch-jobs/{job['id']}/result?layout=long").content))
    want = now.json()
    assert summary["hours_per_row"] == 0.25 and summary["rows"] == want["rows"] == 18
    for got, expected in zip(summary["summary"], want["summary"], strict=True):
        assert got["bus"] == expected["bus"]
        for key in ("max_p_outside", "mean_p_outside", "hours_outside", "hours_outside_std"):
            assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), (key, got, expected)
        if expected["max_p_outside"] > 1e-6:  # a bus never at risk has no worst row to agree on
            for key in ("scenario", "year", "timestamp"):
                assert got[f"worst_{key}"] == expected[f"worst_{key}"], (key, got, expected)
    assert list(long["scenario"]) == want["long"]["scenario"] and list(long["year"]) == want["long"]["year"]
    assert list(long["timestamp"]) == want["long"]["timestamp"] and list(long["bus"]) == want["long"]["bus"]
    np.testing.assert_allclose(long["mean"], want["long"]["mean"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(long["p_outside"], want["long"]["p_outside"], rtol=1e-5, atol=1e-7)


def test_a_study_job_names_its_bad_scenario_and_leaves_nothing_behind(memory_server, scenarios):
    x, y = scenarios
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "scenarios": [{"name": "fine"}, {"name": "bad", "der": [{"bus": 1, "kw": 100}]}],
        "as_job": True,
    }
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        before = (
            set(memory_server.app.state.jobs.root.iterdir())
            if getattr(memory_server.app.state, "jobs", None)
            else set()
        )
        response = client.post("/v1/studies", json=body)
        problem = assert_problem(response, 422, "scenarios[1].der[0].bus")
        assert "bus 1 is not a load bus" in problem["detail"]
        assert set(memory_server.app.state.jobs.root.iterdir()) == before  # no job directory left behind


def _wait(client: httpx.Client, job_id: str) -> dict:
    deadline = time.monotonic() + 60
    while (job := client.get(f"/v1/batch-jobs/{job_id}").json())["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return job


def test_a_study_job_names_rows_without_a_power_flow_by_scenario_year_and_step(memory_server, scenarios):
    """User trial: a collapsing scenario as a job was accepted (202), then failed with "rows [1]" (1-based beside
    the result's 0-based `row`), no scenario named. Now a scenario-year whose heaviest row has no power flow is a
    422 before the 202, worded as the study's own; a row the job's check finds later is named the same way."""
    x, y = scenarios
    context = {"x": rows(x), "y": rows(y)}
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        collapse = {"context": context, "scenarios": [{"name": "collapse", "load_scale": 20}, {"name": "ok"}]}
        now = assert_problem(client.post("/v1/studies", json=collapse), 422, "scenarios")["detail"]
        job = assert_problem(client.post("/v1/studies", json={**collapse, "as_job": True}), 422, "scenarios")
        assert "scenario 'collapse', year 0" in now and job["detail"] == now
        net = gridsim.network("ieee33")
        far = np.zeros(net.n_load)
        far[[net.load_buses.index(b) for b in range(13, 19)]] = 8.0  # less load in all than step a, far out
        series = {"timestamps": ["a", "b"], "load": [[3.0] * net.n_load, far.tolist()]}
        body = {"context": context, "scenarios": [{"name": "far"}], "time_series": series, "as_job": True}
        queued = client.post("/v1/studies", json=body)
        assert queued.status_code == 202, queued.text
        failed = _wait(client, queued.json()["id"])
    assert failed["state"] == "failed", failed
    entry = failed["errors"][0]
    assert entry["field"] == "scenarios" and "scenario 'far', year 0, step b" in entry["message"], failed
    assert "the result's `row` [1]" in entry["message"], failed


def test_scaling_generation_a_network_does_not_have_is_refused(client, scenarios):
    x, y = scenarios
    body = {"context": {"x": rows(x), "y": rows(y)}, "scenarios": [{"generation_scale": 50}]}
    detail = assert_problem(client.post("/v1/studies", json=body), 422, "scenarios[0].generation_scale")["detail"]
    assert "no generation of its own" in detail


def test_a_factor_has_one_range_whatever_carries_it_and_table_mistakes_are_named(memory_server, scenarios):
    """User trial: `load` = -1 in a table was accepted (JSON refuses it); load_bus99 was only ignored; a class of
    `classes` without a profile ran at x1; an empty Parquet table was "type null is not numeric"."""
    import io

    import pyarrow.parquet as pq

    x, y = scenarios
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        cid = client.post("/v1/context-sets", json={"x": rows(x), "y": rows(y)}).json()["id"]
        spec = {"context_id": cid, "scenarios": [{}], "detail": "summary"}

        def table(text: str | bytes, name: str = "p.csv", extra: dict | None = None):
            sent = {**spec, **(extra or {})}
            return client.post("/v1/studies", data={"spec": json.dumps(sent)}, files={"file": (name, text)})

        entry = assert_problem(table("time,load\na,1.0\nb,-1\n"), 422, "file")["errors"][0]
        assert (entry["row"], entry["column"]) == (2, "load") and "[0, 100]" in entry["expected"]
        as_json = {"context_id": cid, "scenarios": [{}], "time_series": {"timestamps": ["a"], "load": [-1.0]}}
        assert "[0.0, 100.0]" in assert_problem(client.post("/v1/studies", json=as_json), 422)["errors"][0]["expected"]
        entry = assert_problem(table("time,load_bus99\na,2\n"), 422, "file")["errors"][0]
        assert entry["column"] == "load_bus99" and "names no load bus" in entry["message"]
        classes = {"homes": [2, 3], "shops": [18, 19]}
        entry = assert_problem(table("time,homes\na,2\n", extra={"classes": classes}), 422, "file")["errors"][0]
        assert entry["column"] == "shops" and "'shops_pload'" in entry["expected"]
        ts = {"timestamps": ["a"], "profiles": {"homes": [2.0]}}
        missing = {"context_id": cid, "scenarios": [{}], "classes": classes, "time_series": ts}
        problem = assert_problem(client.post("/v1/studies", json=missing), 422, "time_series.profiles")
        assert "no profile for class 'shops'" in problem["detail"]
        empty = io.BytesIO()
        pq.write_table(pa.table({"time": pa.array([], pa.null()), "load": pa.array([], pa.float64())}), empty)
        entry = assert_problem(table(empty.getvalue(), "p.parquet"), 422, "file")["errors"][0]
        assert entry["message"] == "the table has no data rows"


def test_every_refusal_says_what_was_expected(client, scenarios):
    """User trial: a bus_load_scale key "abc" (named as scenarios[0]), ragged `load` rows, a spec holding
    time_series answered "expected": null; a body that is no object answered pydantic's "model_attributes"."""
    x, y = scenarios
    context = {"x": rows(x), "y": rows(y)}
    key = assert_problem(
        client.post("/v1/studies", json={"context": context, "scenarios": [{"bus_load_scale": {"abc": 2}}]}),
        422,
        "scenarios[0].bus_load_scale",
    )
    ragged = {"timestamps": ["a", "b"], "load": [[1.0] * 32, [1.0] * 31]}
    uneven = assert_problem(
        client.post("/v1/studies", json={"context": context, "scenarios": [{}], "time_series": ragged}), 422
    )
    cid = client.post("/v1/context-sets", json=context).json()["id"]
    spec = {"context_id": cid, "scenarios": [{}], "time_series": {"timestamps": ["a"]}}
    in_spec = client.post("/v1/studies", data={"spec": json.dumps(spec)}, files={"file": ("p.csv", b"time\na\n")})
    for body in (key, uneven, assert_problem(in_spec, 422)):
        assert all(e["expected"] for e in body["errors"]), body
    for not_an_object in ([1, 2], "text", 3):
        problem = assert_problem(client.post("/v1/studies", json=not_an_object), 422)
        assert problem["errors"][0]["expected"] == "a JSON object", problem


def test_a_study_jobs_csv_result_quotes_text_a_spreadsheet_would_run(memory_server, scenarios):
    """User trial: a scenario named =HYPERLINK(...) and step labels "=1+1", "@SUM(1)" were written verbatim in the
    CSV result (wide and long): a formula in the planner's spreadsheet. Text cells starting one get a quote;
    numbers (negative loads) stay numbers; Parquet keeps the text as sent."""
    import io

    x, y = scenarios
    name = '=HYPERLINK("http://example.com","x")'
    body = {
        "context": {"x": rows(x), "y": rows(y)},
        "scenarios": [{"name": name, "der": [{"bus": 18, "kw": 400}]}],
        "time_series": {"timestamps": ["=1+1", "@SUM(1)"]},
        "as_job": True,
    }
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        queued = client.post("/v1/studies", json=body)
        assert queued.status_code == 202, queued.text
        job_id = queued.json()["id"]
        assert _wait(client, job_id)["state"] == "done"
        wide = client.get(f"/v1/batch-jobs/{job_id}/result?format=csv").text
        long = client.get(f"/v1/batch-jobs/{job_id}/result?format=csv&layout=long").text
        parquet = pd.read_parquet(pa.BufferReader(client.get(f"/v1/batch-jobs/{job_id}/result").content))
    for text in (wide, long):
        frame = pd.read_csv(io.StringIO(text))
        assert set(frame["scenario"]) == {"'" + name}
        assert list(dict.fromkeys(frame["timestamp"])) == ["'=1+1", "'@SUM(1)"]
        assert "\n=" not in text and ",=" not in text and ",@" not in text
    wide_frame = pd.read_csv(io.StringIO(wide))
    assert wide_frame["p_mw_bus18"].dtype.kind == "f" and (wide_frame["p_mw_bus18"] < 0).all()  # 90 kW - 400 kW
    assert set(parquet["scenario"]) == {name} and list(parquet["timestamp"]) == ["=1+1", "@SUM(1)"]
