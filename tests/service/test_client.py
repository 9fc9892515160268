"""service.client: every endpoint, sync and async, against the real service; retries against a real
HTTP server that answers 503 with Retry-After or drops connections; a caller's own httpx client."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pandas as pd
import pytest

from service.client import LOAD_FEATURES, AsyncGridPFNClient, GridPFNClient, GridPFNError, _poll_delays
from tests.service.conftest import MODEL


class Flaky(BaseHTTPRequestHandler):
    """Answers each path from a script: a list of ("503" or "429", retry_after) / ("drop",) / ("json", body) steps."""

    def _serve(self) -> None:
        server = self.server
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        with server.lock:
            server.seen.append((self.command, self.path.split("?")[0], time.monotonic()))
            steps = server.script.get(self.path.split("?")[0], [])
            step = steps.pop(0) if len(steps) > 1 else (steps[0] if steps else ("json", {}))
        if step[0] == "drop":  # a connection closed before any answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, headers, body = (
            (int(step[0]), {"Retry-After": str(step[1])}, {"status": int(step[0]), "detail": "busy"})
            if step[0] in ("503", "429")
            else (200, {}, step[1])
        )
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, *_):  # quiet
        pass


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    server.lock, server.seen, server.script = threading.Lock(), [], {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_is_retried_after_the_servers_retry_after(flaky):
    flaky.script["/v1/models"] = [("503", 1), ("503", 0), ("json", {"models": []})]
    with GridPFNClient(flaky.url, retries=3, backoff_s=0.01) as client:
        assert client.models() == {"models": []}
    times = [t for _, path, t in flaky.seen if path == "/v1/models"]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.95  # Retry-After: 1 honoured
    assert times[2] - times[1] < 0.9  # Retry-After: 0


def test_a_429_is_retried_like_a_503(flaky):
    """The exact GP's pool answers 429 gp-busy with Retry-After when its workers are busy."""
    flaky.script["/v1/models"] = [("429", 1), ("json", {"models": []})]
    with GridPFNClient(flaky.url, retries=2, backoff_s=0.01) as client:
        assert client.models() == {"models": []}
    times = [t for _, path, t in flaky.seen if path == "/v1/models"]
    assert len(times) == 2 and times[1] - times[0] >= 0.95


def test_retries_are_bounded_and_the_last_503_is_raised(flaky):
    flaky.script["/v1/models/x"] = [("503", 0)]
    with GridPFNClient(flaky.url, retries=2, backoff_s=0.01) as client:
        with pytest.raises(GridPFNError) as caught:
            client.model("x")
    assert caught.value.status == 503 and len(flaky.seen) == 3  # one try and two retries


def test_retry_after_is_capped(flaky):
    flaky.script["/healthz"] = [("503", 3600), ("json", {"status": "alive"})]
    started = time.monotonic()
    with GridPFNClient(flaky.url, max_retry_wait_s=0.2) as client:
        assert client.health() == {"status": "alive"}
    assert time.monotonic() - started < 5


def test_a_job_submission_is_never_repeated(flaky):
    flaky.script["/v1/batch-jobs"] = [("503", 0), ("json", {"id": "second"})]
    with GridPFNClient(flaky.url, retries=3) as client:
        with pytest.raises(GridPFNError, match="HTTP 503"):
            client.submit_simulated({"n": 10}, MODEL, "c" * 64)
    assert len(flaky.seen) == 1
    flaky.script["/v1/batch-jobs"] = [("drop",), ("json", {"id": "second"})]
    with GridPFNClient(flaky.url, retries=3) as client:
        with pytest.raises(httpx.TransportError):
            client.submit_simulated({"n": 10}, MODEL, "c" * 64)
    assert len(flaky.seen) == 2


def test_a_dropped_connection_is_retried_for_idempotent_calls_sync_and_async(flaky):
    flaky.script["/v1/context-sets/abc"] = [("drop",), ("drop",), ("json", {"id": "abc"})]
    with GridPFNClient(flaky.url, retries=3, backoff_s=0.01) as client:
        assert client.get_context("abc") == {"id": "abc"}
    assert len(flaky.seen) == 3

    async def scenario():
        flaky.script["/v1/context-sets/abc"] = [("503", 0), ("drop",), ("json", {"id": "abc"})]
        async with AsyncGridPFNClient(flaky.url, retries=3, backoff_s=0.01) as client:
            return await client.get_context("abc")

    assert asyncio.run(scenario()) == {"id": "abc"} and len(flaky.seen) == 6


def test_nothing_listening_is_retried_then_raised():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with GridPFNClient(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.05) as client:
            started = time.monotonic()
            with pytest.raises(httpx.ConnectError):
                client.health()
    assert time.monotonic() - started >= 0.05 * (1 + 2) * 0.5  # two backoffs, jitter at least half


def test_wait_polls_with_growing_intervals(flaky):
    flaky.script["/v1/batch-jobs/j"] = [("json", {"state": "running"})] * 4 + [("json", {"state": "done"})]
    seen: list[str] = []
    with GridPFNClient(flaky.url) as client:
        final = client.wait("j", poll_s=0.05, max_poll_s=0.2, on_progress=lambda s: seen.append(s["state"]))
    assert final == {"state": "done"} and seen == ["running"] * 4 + ["done"]
    times = [t for _, _, t in flaky.seen]
    gaps = np.diff(times)
    assert gaps[0] >= 0.045 and gaps[-1] > gaps[0] * 1.8  # 0.05, 0.075, 0.11, 0.17
    delays = _poll_delays(0.5, 5.0)
    assert [round(next(delays), 3) for _ in range(8)] == [0.5, 0.75, 1.125, 1.688, 2.531, 3.797, 5.0, 5.0]

    async def timeout():
        flaky.script["/v1/batch-jobs/k"] = [("json", {"state": "running"})]
        async with AsyncGridPFNClient(flaky.url) as client:
            await client.wait("k", poll_s=0.02, timeout_s=0.2)

    with pytest.raises(TimeoutError, match="job k still running"):
        asyncio.run(timeout())


def test_every_endpoint_sync_through_the_callers_own_httpx_client(memory_server, scenarios):
    x, y = scenarios
    sent: list[str] = []
    http = httpx.Client(timeout=60, event_hooks={"request": [lambda r: sent.append(f"{r.method} {r.url.path}")]})
    with GridPFNClient(memory_server.url, http_client=http) as client:
        assert client.health()["status"] == "alive" and client.ready()["ready"] is True
        assert MODEL in [m["name"] for m in client.models()["models"]] and client.model(MODEL)["name"] == MODEL
        cid = client.create_context(x[:40], y[:40])
        assert client.get_context(cid)["rows"] == 40
        np.testing.assert_array_equal(client.get_context(cid, include_data=True)["x"], x[:40])
        answer = client.predict(x[50:53], MODEL, context_id=cid, quantiles=[0.1, 0.9], voltage_band=[0.95, 1.05])
        assert len(answer) == 3 and "q0.1_vm_pu_bus2" in answer and answer.attrs["model"] == MODEL
        gp = client.gp_predict(x[50:52], context_id=cid)
        assert len(gp) == 2 and gp.attrs["model"] == "exact-gp"
        simulated = client.simulate(x[:2])
        np.testing.assert_allclose(np.asarray(simulated["vm_pu"]), y[:2], atol=1e-6)
        assert "ieee33" in [n["id"] for n in client.networks()]
        feeder = _feeder_json()
        uploaded = client.upload_network(feeder)
        assert client.upload_network(feeder)["id"] == uploaded["id"]  # content-addressed: the same network
        described = client.network(uploaded["id"])
        assert described["id"] == uploaded["id"] and described["features"][0].startswith("p_mw_bus")
        assert uploaded["id"] in [n["id"] for n in client.networks()]
        assert client.delete_context(cid) is None
        with pytest.raises(GridPFNError) as gone:
            client.get_context(cid)
        assert gone.value.status == 404 and gone.value.problem["status"] == 404
    assert not http.is_closed  # the caller's client stays the caller's
    http.close()
    assert "GET /v1/models" in sent and "DELETE /v1/context-sets/" + cid in sent


def _feeder_json() -> bytes:
    """A small radial feeder as pandapower JSON: Kerber's LV cable feeder."""
    import pandapower as pp
    import pandapower.networks as pn

    return pp.to_json(pn.create_kerber_landnetz_kabel_1()).encode()


def test_every_endpoint_async_matches_the_sync_client(memory_server, scenarios):
    x, y = scenarios

    async def scenario():
        async with AsyncGridPFNClient(memory_server.url, transport=httpx.AsyncHTTPTransport(retries=0)) as client:
            assert (await client.health())["status"] == "alive"
            assert (await client.model(MODEL))["name"] == MODEL
            cid = await client.create_context(x[:40], y[:40])
            answer = await client.predict(x[50:53], MODEL, context_id=cid, quantiles=[0.5])
            gp = await client.gp_predict(x[50:52], context=(x[:40], y[:40]))
            simulated = await client.simulate(x[:1])
            info = await client.get_context(cid)
            await client.delete_context(cid)
            assert (await client.network("ieee33"))["n_buses"] == 33
            return cid, answer, gp, simulated, info

    cid, answer, gp, simulated, info = asyncio.run(scenario())
    with GridPFNClient(memory_server.url) as client:
        pd.testing.assert_frame_equal(
            answer, client.predict(x[50:53], MODEL, context=(x[:40], y[:40]), quantiles=[0.5]), rtol=1e-6
        )
    assert info["id"] == cid and len(gp) == 2 and len(simulated["vm_pu"]) == 1


def test_submit_wait_fetch_sync_and_async_give_the_same_result(memory_server, scenarios, tmp_path):
    """The batch flows (written once, run by both clients): a DataFrame and a file up, the result back as a
    DataFrame and streamed to Parquet and CSV files; a failed stream is the server's problem, raised."""
    x, y = scenarios
    loads = pd.DataFrame(x[60:90], columns=LOAD_FEATURES)
    with GridPFNClient(memory_server.url) as client:
        cid = client.create_context(x[:40], y[:40])
        job = client.submit(loads, MODEL, cid, quantiles=[0.5])
        assert client.wait(job["id"], poll_s=0.05)["state"] == "done"
        frame = client.fetch(job["id"])
        assert client.fetch(job["id"], tmp_path / "sync.parquet") == tmp_path / "sync.parquet"
        with pytest.raises(GridPFNError) as missing:
            client.fetch("0" * 32, tmp_path / "missing.parquet")
    assert missing.value.status == 404 and not (tmp_path / "missing.parquet").exists()
    loads.to_csv(tmp_path / "loads.csv", index=False)

    async def scenario():
        async with AsyncGridPFNClient(memory_server.url) as client:
            job = await client.submit(tmp_path / "loads.csv", MODEL, cid, quantiles=[0.5])
            assert (await client.wait(job["id"], poll_s=0.05))["state"] == "done"
            written = await client.fetch(job["id"], tmp_path / "async.csv")
            with pytest.raises(GridPFNError):
                await client.fetch("0" * 32)
            return await client.fetch(job["id"]), written

    again, written = asyncio.run(scenario())
    assert list(frame.columns[:64]) == LOAD_FEATURES and list(frame.columns[-2:]) == ["extrapolation", "extrapolated"]
    pd.testing.assert_frame_equal(again, frame)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "sync.parquet"), frame)
    numbers = frame.columns.drop("extrapolated")
    np.testing.assert_allclose(pd.read_csv(written)[numbers].to_numpy(), frame[numbers].to_numpy(), rtol=1e-6)


def test_sparse_contexts_from_numpy_and_pandas_nan_and_none(memory_server, scenarios):
    """NaN (numpy, pandas) and None (lists) in a context go as null; the answer's frame says which buses the
    context read (`metered`, `readings` in its attrs), stored or inline; a refused model raises the 422."""
    x, y = scenarios
    xs, ys = x[:60].copy(), y[:60].copy()
    ys[:, 2] = np.nan  # vm_pu_bus4 never read
    xs[::2, 5] = np.nan
    frame_x = pd.DataFrame(xs, columns=LOAD_FEATURES)
    frame_y = pd.DataFrame(ys, columns=[f"vm_pu_bus{bus}" for bus in range(2, 34)])
    listed_y = [[None if v != v else v for v in row] for row in ys.tolist()]
    with GridPFNClient(memory_server.url) as client:
        cid = client.create_context(frame_x, frame_y)
        assert client.create_context(xs, listed_y) == cid  # the same content however it was given
        assert client.get_context(cid)["metered"][2] is False
        stored = client.predict(x[70:73], "network-fit", context_id=cid, quantiles=[0.05, 0.95])
        inline = client.predict(x[70:73], "network-fit", context=(xs, ys))
        for answer in (stored, inline):
            assert answer.attrs["metered"][2] is False and answer.attrs["readings"][2] == 0
            assert answer.attrs["readings"][3] == 60 and answer.filter(like="mean_").notna().all().all()
        assert np.isfinite(stored.filter(regex="^(mean|std|q)").to_numpy(dtype=float)).all()
        typical = client.create_context(xs, ys, typical_loads=np.nan_to_num(x[0]))
        assert typical != cid and client.get_context(typical)["typical_loads"] == np.nan_to_num(x[0]).tolist()
        job = client.submit(pd.DataFrame(x[80:90], columns=LOAD_FEATURES), "network-fit", cid, quantiles=[0.5])
        assert client.wait(job["id"], poll_s=0.05)["state"] == "done"
        result = client.fetch(job["id"])
        assert result.attrs["metered"] == stored.attrs["metered"] and result.attrs["readings"][2] == 0
        long = client.fetch(job["id"], layout="long")  # a row per input row and bus, the bus's facts on each
        never_read = long[long["bus"] == 4]
        assert len(never_read) == 10 and not never_read["metered"].any() and (never_read["readings"] == 0).all()
        assert long["determined"].between(0, 1).all() and long.attrs["metered"] == result.attrs["metered"]
        assert not client.summary(job["id"]).loc[4, "metered"]
        with pytest.raises(GridPFNError) as refused:
            client.predict(x[70:71], "physics-fit", context_id=cid)
        assert refused.value.status == 422 and "network-fit" in refused.value.problem["errors"][0]["expected"]


def test_an_infinite_value_is_refused_naming_its_cell_before_anything_is_sent(memory_server, scenarios):
    """JSON has no infinity: an infinite load or reading (numpy, pandas or a list), or a typical load that is not
    finite, was a bare ValueError from the JSON encoder naming nothing. It names the cell as the server's 422 does
    (`y[3][4]`; `context.y[...]` inline), and no request is made; NaN stays a value not measured (null)."""
    x, y = (np.asarray(a[:30]).copy() for a in scenarios)
    sent: list[str] = []
    http = httpx.Client(timeout=60, event_hooks={"request": [lambda r: sent.append(r.url.path)]})
    infinite_y = y.copy()
    infinite_y[3, 4] = np.inf
    infinite_x = pd.DataFrame(x.copy(), columns=LOAD_FEATURES)
    infinite_x.iloc[7, 2] = -np.inf
    listed = infinite_y.tolist()
    listed[0][0] = None  # a list with a value not measured takes the other path
    with GridPFNClient(memory_server.url, http_client=http) as client:
        for call, words in (
            (lambda: client.create_context(x, infinite_y), r"^y\[3\]\[4\]: is infinite"),
            (lambda: client.create_context(infinite_x, y), r"^x\[7\]\[2\]: is infinite"),
            (lambda: client.create_context(x, listed), r"^y\[3\]\[4\]: is infinite"),
            (lambda: client.create_context(x, y, typical_loads=[np.nan] * 64), r"^typical_loads\[0\]: is nan"),
            (lambda: client.predict(x[:1], MODEL, context=(x, infinite_y)), r"^context\.y\[3\]\[4\]: is infinite"),
        ):
            with pytest.raises(ValueError, match=words):
                call()
        assert not sent
        y[3, 4] = np.nan  # not read: null, and stored
        assert client.get_context(client.create_context(x, y))["readings"][4] == 29
    http.close()


def test_the_planners_question_is_a_few_lines_with_the_client(server):
    """Issue 31's planner: loads +40 %, 250 kW of PV at 5 buses: which buses risk leaving 0.95-1.05 p.u.?
    The lines between the markers are all a planner writes; the checks after them hold the answer to the truth."""
    # --- what the planner writes -----------------------------------------------------------------
    with GridPFNClient(server.url) as client:
        cid = client.create_context(simulate={"network": "ieee33", "delta": 0.1, "n": 300, "seed": 1})
        plan = {
            "name": "+40 % with PV",
            "load_scale": 1.4,
            "der": [{"bus": b, "kw": 250} for b in (14, 18, 25, 30, 33)],
        }
        study = client.study([plan], context_id=cid, voltage_band=[0.95, 1.05])
        at_risk = study.summary[study.summary["max_p_outside"] > 0.5]
        capacity = client.hosting_capacity(context_id=cid, buses=[3, 18], load_scales=[0.3])
    # --- checks ----------------------------------------------------------------------------------
    import gridsim
    from gridsim.api import VoltageModel
    from gridsim.scenarios import DER, Scenario, expand

    net = gridsim.network("ieee33")
    row = expand(net, [Scenario("q", load_scale=1.4, der=tuple(DER(b, 250.0) for b in (14, 18, 25, 30, 33)))]).rows
    truth = pd.Series(VoltageModel(net)(row)[0], index=list(net.output_buses))
    clearly_out, clearly_in = truth[(truth < 0.945)].index, truth[(truth > 0.955) & (truth < 1.045)].index
    assert len(clearly_out) and set(clearly_out) <= set(at_risk.index) and not set(clearly_in) & set(at_risk.index)
    assert list(study.long.columns[:4]) == ["scenario", "year", "bus", "bus_name"] and len(study.long) == 32
    assert study.info["model"] == "network-fit" and study.info["network"] == "ieee33"
    assert list(capacity.index) == [3, 18] and (capacity["hosting_capacity_kw"] > 0).all()
    assert capacity.loc[18, "hosting_capacity_kw"] < capacity.loc[3, "hosting_capacity_kw"]  # far end vs the head


def test_an_uploaded_case33bw_takes_ieee33_columns_and_a_profile_table(memory_server):
    """Issue 31 item 5: pandapower's case33bw uploaded numbers its buses as the built-in ieee33, so the client's
    IEEE-33 column names fit it; item 1: a study's time series as a DataFrame (a datetime index, a column per
    class the request defines by buses), sent as Parquet."""
    import pandapower as pp
    import pandapower.networks as pn

    import gridsim
    from gridsim.api import VoltageModel
    from gridsim.scenarios import Classes, Scenario, TimeSeries, expand

    homes, shops = list(range(2, 18)), list(range(18, 34))
    steps = pd.date_range("2026-07-01 10:00", periods=4, freq="15min")
    profiles = pd.DataFrame({"homes": [0.6, 0.8, 1.0, 1.2], "shops": [1.4, 1.2, 1.0, 0.9]}, index=steps)
    with GridPFNClient(memory_server.url) as client:
        uploaded = client.upload_network(pp.to_json(pn.case33bw()).encode())
        assert uploaded["features"] == LOAD_FEATURES and uploaded["numbering"].startswith("as the built-in ieee33")
        cid = client.create_context(simulate={"network": uploaded["id"], "delta": 0.2, "n": 200, "seed": 3})
        nominal = pd.DataFrame([gridsim.network("ieee33").base_x], columns=LOAD_FEATURES)
        answer = client.predict(nominal, model="physics-fit", context_id=cid)
        study = client.study(
            [{"name": "summer"}], context_id=cid, classes={"homes": homes, "shops": shops}, profiles=profiles
        )
    assert answer.shape[0] == 1 and "mean_vm_pu_bus18" in answer.columns
    assert study.info["rows"] == 4 and study.info["classes"] == ["homes", "shops"]
    assert study.long["timestamp"].iloc[0] == "2026-07-01T10:00:00"
    net = gridsim.network("ieee33")
    series = TimeSeries(
        tuple(steps.strftime("%Y-%m-%dT%H:%M:%S")),
        np.ones(4),
        np.ones(4),
        profiles={name: profiles[name].to_numpy() for name in profiles},
    )
    rows = expand(net, [Scenario("summer")], series, Classes.of_buses(net, {"homes": homes, "shops": shops})).rows
    truth = VoltageModel(net)(rows)
    np.testing.assert_allclose(study.long["mean"].to_numpy().reshape(truth.shape), truth, atol=2e-4)


def test_a_study_with_a_profile_table_runs_as_a_job_from_the_client(memory_server):
    """`as_job` through the client with the time series as a DataFrame (multipart): the job's summary and long
    result are the study's own answer, the worst rows named by timestamp."""
    steps = pd.date_range("2026-07-01 10:00", periods=8, freq="15min")
    profiles = pd.DataFrame({"load": np.linspace(0.6, 1.5, 8), "pv": np.linspace(1.0, 0.0, 8)}, index=steps)
    plans = [{"name": "now"}, {"name": "later", "load_scale": 1.2, "years": [0, 4], "growth_rate": 0.03}]
    with GridPFNClient(memory_server.url) as client:
        cid = client.create_context(simulate={"network": "ieee33", "delta": 0.2, "n": 200, "seed": 4})
        now = client.study(plans, context_id=cid, profiles=profiles, detail="summary")
        job = client.study(plans, context_id=cid, profiles=profiles, as_job=True)
        assert client.wait(job["id"], poll_s=0.05, timeout_s=60)["state"] == "done"
        summary = client.summary(job["id"])
        long = client.fetch(job["id"], layout="long")
    assert job["source"] == "study" and job["rows_total"] == 24 and summary.attrs["hours_per_row"] == 0.25
    assert list(summary.index) == list(now.summary.index)
    for key in ("max_p_outside", "mean_p_outside", "hours_outside"):
        np.testing.assert_allclose(summary[key], now.summary[key], rtol=1e-6, atol=1e-9)
    risky = now.summary["max_p_outside"] > 1e-6
    assert risky.any()
    assert (summary.loc[risky, "worst_timestamp"] == now.summary.loc[risky, "worst_timestamp"]).all()
    assert long["timestamp"].iloc[0] == "2026-07-01T10:00:00" and set(long["scenario"]) == {"now", "later"}


def test_hosting_capacity_runs_as_a_job_a_group_of_buses_per_chunk(model_dir, tmp_path):
    """`as_job`: every candidate bus in the job's result, as the one-request answer gives it (the same search per
    bus, so the same capacity to the last step), a few buses per chunk; the long layout and summary are refused
    (the result is per bus already)."""
    from tests.service.batch_support import job_server

    scales, buses = [0.2, 0.8], list(range(2, 34))
    # chunks of 100 model rows: 2 rows x 25 search passes a bus, so 2 buses a chunk
    with job_server(model_dir, tmp_path, None, job_chunk_rows=100) as server, GridPFNClient(server.url) as client:
        cid = client.create_context(simulate={"network": "ieee33", "delta": 0.2, "n": 200, "seed": 6})
        with pytest.raises(GridPFNError) as too_much:  # 32 buses are over the test server's one-request limit
            client.hosting_capacity(context_id=cid, load_scales=scales)
        assert too_much.value.status == 413 and '"as_job": true' in str(too_much.value.problem)
        parts = [
            client.hosting_capacity(context_id=cid, load_scales=scales, buses=buses[i : i + 4]) for i in range(0, 32, 4)
        ]
        now = pd.concat(parts)
        now.attrs.update(parts[0].attrs)
        job = client.hosting_capacity(context_id=cid, load_scales=scales, as_job=True)
        assert job["source"] == "hosting-capacity" and job["rows_total"] == 32 and job["chunks_total"] == 16
        assert client.wait(job["id"], poll_s=0.05, timeout_s=120)["state"] == "done"
        result = client.fetch(job["id"]).set_index("bus")
        with pytest.raises(GridPFNError) as refused:
            client.fetch(job["id"], layout="long")
    assert refused.value.status == 422 and "per candidate bus" in str(refused.value)
    assert list(result.index) == list(now.index)
    step = now.attrs["resolution_kw"]
    np.testing.assert_allclose(result["hosting_capacity_kw"], now["hosting_capacity_kw"], rtol=0, atol=step)
    assert (result["at_max_kw"] == now["at_max_kw"]).all()
    np.testing.assert_allclose(np.stack(result["curve_kw"]), np.stack(now["curve_kw"]), rtol=0, atol=2 * step)
    assert (result["bus_name"] == now["name"]).all()


def test_hosting_capacity_over_a_profile_table_from_the_client(memory_server):
    """`profiles`: the rows as a DataFrame (a datetime index, factor columns; sent as Parquet in the multipart
    form), the new PV following `pv` x the column `pv_profile` names; the same capacities as the rows and share
    sent as JSON, at once and as a batch job."""
    import gridsim
    from gridsim.scenarios import Scenario, TimeSeries, expand

    steps = pd.date_range("2026-07-01 08:00", periods=3, freq="4h")
    day = pd.DataFrame(
        {"load": [0.5, 0.7, 1.1], "pv": [0.4, 1.0, 0.3], "PV5": [0.5, 0.8, 0.2], "WP4": [0.1, 0.2, 0.3]}, index=steps
    )
    net = gridsim.network("ieee33")
    series = TimeSeries(
        tuple(steps.strftime("%Y-%m-%dT%H:%M:%S")), day["load"].to_numpy(), day["pv"].to_numpy(), 0.25, {}
    )
    loads = expand(net, [Scenario("hosting capacity")], series).rows
    share = day["pv"].to_numpy() * day["PV5"].to_numpy()
    with GridPFNClient(memory_server.url) as client:
        cid = client.create_context(simulate={"network": "ieee33", "delta": 0.2, "n": 200, "seed": 7})
        table = client.hosting_capacity(context_id=cid, buses=[6, 18], profiles=day, pv_profile="PV5")
        rows = client.hosting_capacity(context_id=cid, buses=[6, 18], loads=loads, pv_profile=share)
        job = client.hosting_capacity(context_id=cid, buses=[6, 18], profiles=day, pv_profile="PV5", as_job=True)
        assert client.wait(job["id"], poll_s=0.05, timeout_s=60)["state"] == "done"
        result = client.fetch(job["id"]).set_index("bus")
        with pytest.raises(ValueError, match="not both"):
            client.hosting_capacity(context_id=cid, profiles=day, load_scales=[0.5])
        with pytest.raises(ValueError, match="names one of its columns"):
            client.hosting_capacity(context_id=cid, profiles=day, pv_profile=[1.0, 1.0, 1.0])
        with pytest.raises(ValueError, match="go with a profiles table"):
            client.hosting_capacity(context_id=cid, pv_profile="PV5")
        with pytest.raises(GridPFNError) as refused:  # the server's word on a bad table: the column named
            client.hosting_capacity(
                context_id=cid, buses=[18], profiles=day.assign(PV5=[0.5, 1.8, 0.2]), pv_profile="PV5"
            )
    assert refused.value.status == 422 and refused.value.problem["errors"][0]["column"] == "PV5"
    assert table.attrs["rows"] == 3 and table.attrs["ignored_columns"] == ["WP4"]
    assert list(table.index) == [6, 18] and (table["hosting_capacity_kw"] > 0).all()
    pd.testing.assert_frame_equal(table, rows)
    assert job["source"] == "hosting-capacity" and job["rows_total"] == 2
    step = table.attrs["resolution_kw"]
    np.testing.assert_allclose(result["hosting_capacity_kw"], table["hosting_capacity_kw"], rtol=0, atol=step)
