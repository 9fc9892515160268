"""Every network end to end over real HTTP: context sets on each built-in and on an uploaded
pandapower feeder, predictions with physics-fit, with a (tiny, untrained) checkpoint trained for
that network and with one of any feeder, the exact GP, /v1/simulate, batch jobs (embedded, and in a real `gridpfn worker`
through real Redis), the client, and the 422s: a width that does not fit its network, a model that
does not serve it. Tiny data: ~60-point contexts, a few queries."""

from __future__ import annotations

import uuid

import httpx
import numpy as np
import pandapower as pp
import pytest

import gridsim
from models import physics_fit
from models.testing import build_tiny_registry
from service.client import GridPFNClient
from service.settings import Settings
from tests.gridsim.feeder_cases import small_feeder
from tests.service.batch_support import WorkerProcess, done, fetch_frame, job_server, wait_for, worker_env
from tests.service.conftest import LIMITS, MODEL, assert_problem, running

BUILT_INS = ("ieee33", "kerber_landnetz_kabel_1", "mv_oberrhein_sub0")
ANY = "tiny-any"  # a checkpoint of any feeder (models.testing.TINY_ANY_CONFIG)
N_CONTEXT = 60  # within the GP's test limit (LIMITS gp_max_context) and physics-fit's minimum (16)


@pytest.fixture(scope="module")
def every_network_dir(tmp_path_factory):
    """tiny-dva with a checkpoint for each built-in network, and tiny-any's one for every feeder."""
    return build_tiny_registry(tmp_path_factory.mktemp("registry-nets"), networks=BUILT_INS, any_network=(ANY,))


@pytest.fixture(scope="module")
def memory_network_server(every_network_dir):
    with running(Settings(model_dir=every_network_dir, redis_url=None, **LIMITS)) as server:
        yield server


@pytest.fixture(scope="module")
def redis_network_server(every_network_dir, redis_url, tmp_path_factory):
    """In Redis mode, with a job queue and jobs dir of this module's own: its batch jobs wait for a worker process,
    which test_uploaded_feeder_batch_job_in_a_worker_process starts on them (and no other test's worker takes)."""
    jobs_dir = tmp_path_factory.mktemp("jobs-network-aware")
    with job_server(every_network_dir, jobs_dir, redis_url, job_queue=f"test-net-{uuid.uuid4().hex[:8]}") as server:
        yield server


@pytest.fixture(scope="module", params=["memory", "redis"])
def api(request):
    server = request.getfixturevalue(f"{request.param}_network_server")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def feeder_json() -> str:
    return pp.to_json(small_feeder())


def _context(api: httpx.Client, network: str, n: int = N_CONTEXT, seed: int = 0) -> dict:
    made = api.post("/v1/context-sets", json={"simulate": {"network": network, "delta": 0.2, "n": n, "seed": seed}})
    assert made.status_code == 201, made.text
    return made.json()


def _truth(api: httpx.Client, network: str, loads: np.ndarray) -> np.ndarray:
    solved = api.post("/v1/simulate", json={"network": network, "loads": loads.tolist()})
    assert solved.status_code == 200, solved.text
    return np.asarray(solved.json()["vm_pu"])


@pytest.mark.parametrize("network", BUILT_INS)
def test_each_built_in_network_end_to_end(api, network):
    net = gridsim.network(network)
    info = _context(api, network)
    assert info["network"] == network and info["features"] == net.n_features and info["outputs"] == net.n_outputs
    assert api.get(f"/v1/context-sets/{info['id']}").json()["source"]["network"] == network
    queries = gridsim.sample_loads(net, 3, 0.1, np.random.default_rng(7))
    truth = _truth(api, network, queries)
    for model in ("network-fit", "physics-fit", MODEL):
        answer = api.post(
            "/v1/predict",
            json={
                "model": model,
                "context_id": info["id"],
                "queries": queries.tolist(),
                "quantiles": [0.05, 0.95],
                "voltage_band": [0.95, 1.05],
            },
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["network"] == network and body["outputs"] == list(net.output_names)
        mean = np.asarray(body["mean"])
        assert mean.shape == (3, net.n_outputs) and np.isfinite(mean).all()
        assert np.asarray(body["p_outside_band"]).shape == (3, net.n_outputs)
        if model == "physics-fit":  # the closed form on 60 simulated points: close to the power flow
            assert np.abs(mean - truth).max() < 5e-3, (network, np.abs(mean - truth).max())
        if model == "network-fit":  # the network's own power flow, the context agreeing with it
            assert np.abs(mean - truth).max() < 1e-8, (network, np.abs(mean - truth).max())
    gp = api.post("/v1/gp/predict", json={"context_id": info["id"], "queries": queries.tolist()})
    assert gp.status_code == 200, gp.text
    assert gp.json()["outputs"] == list(net.output_names) and np.asarray(gp.json()["mean"]).shape == (3, net.n_outputs)


def test_models_and_networks_say_who_serves_what(api):
    models = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    assert models[MODEL]["versions"] == {network: "0.0.1" for network in BUILT_INS}
    assert models["physics-fit"]["networks"] == physics_fit.ANY_NETWORK
    assert models["physics-fit"]["context_size"] == {"min": 16, "max": LIMITS["max_context_rows"]}
    card = api.get(f"/v1/models/{MODEL}", params={"network": "kerber_landnetz_kabel_1"}).json()
    assert card["network"] == "kerber_landnetz_kabel_1" and len(card["features"]) == 16 and len(card["outputs"]) == 17
    fit_card = api.get("/v1/models/physics-fit", params={"network": "mv_oberrhein_sub0"}).json()
    assert len(fit_card["features"]) == 128 and len(fit_card["outputs"]) == 69
    listed = {n["id"]: n for n in api.get("/v1/networks").json()["networks"]}
    assert all(listed[network]["models"] == ["network-fit", "physics-fit", ANY, MODEL] for network in BUILT_INS)
    assert models["network-fit"]["networks"] == physics_fit.ANY_NETWORK
    assert models[ANY]["network"] == "*" and models[ANY]["versions"] == {"*": "0.0.1"}
    any_card = api.get(f"/v1/models/{ANY}", params={"network": "mv_oberrhein_sub0"}).json()
    assert any_card["network"] == "mv_oberrhein_sub0" and len(any_card["outputs"]) == 69


def test_uploaded_feeder_end_to_end(api, feeder_json):
    made = api.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"})
    assert made.status_code == 201, made.text
    nid, net = made.json()["id"], gridsim.feeders.from_pandapower_json(feeder_json)
    assert made.json()["models"] == ["network-fit", "physics-fit", ANY]
    assert api.get(f"/v1/networks/{nid}").json()["models"] == ["network-fit", "physics-fit", ANY]
    info = _context(api, nid)
    assert info["network"] == nid and info["features"] == net.n_features == 4
    queries = gridsim.sample_loads(net, 2, 0.1, np.random.default_rng(3))
    answer = api.post(
        "/v1/predict", json={"model": "physics-fit", "context_id": info["id"], "queries": queries.tolist()}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"] == list(net.output_names) == made.json()["outputs"]
    assert np.abs(np.asarray(answer.json()["mean"]) - _truth(api, nid, queries)).max() < 1e-4
    by_network = api.post(
        "/v1/predict", json={"model": "network-fit", "context_id": info["id"], "queries": queries.tolist()}
    )
    assert by_network.status_code == 200, by_network.text
    assert np.abs(np.asarray(by_network.json()["mean"]) - _truth(api, nid, queries)).max() < 1e-8
    # the checkpoint of any feeder serves the upload: its physics base carries the mean
    by_any = api.post("/v1/predict", json={"model": ANY, "context_id": info["id"], "queries": queries.tolist()})
    assert by_any.status_code == 200, by_any.text
    assert by_any.json()["model"] == ANY and by_any.json()["outputs"] == list(net.output_names)
    assert np.abs(np.asarray(by_any.json()["mean"]) - _truth(api, nid, queries)).max() < 1e-4
    # a model trained for other networks is a 422 naming the model, the network and who serves it
    refused = assert_problem(
        api.post("/v1/predict", json={"model": MODEL, "context_id": info["id"], "queries": queries.tolist()}),
        422,
        "model",
    )
    for words in (MODEL, nid, "ieee33", "kerber_landnetz_kabel_1", "physics-fit"):
        assert words in refused["detail"], refused
    if api.get("/readyz").json()["store"] == "redis":
        return  # batch jobs then wait for a worker process: test_uploaded_feeder_batch_job_in_a_worker_process
    # a batch job on it, simulated loads with the ground truth (run by the embedded executor)
    job = api.post(
        "/v1/batch-jobs",
        json={
            "simulate": {"network": nid, "delta": 0.2, "n": 40, "seed": 1},
            "model": "physics-fit",
            "context_id": info["id"],
            "with_ground_truth": True,
        },
    )
    assert job.status_code == 202, job.text
    assert job.json()["network"] == nid
    wait_for(api, job.json()["id"], done)
    frame = fetch_frame(api, job.json()["id"])
    assert list(frame.columns[:4]) == list(net.feature_names) and len(frame) == 40
    errors = frame[[f"err_{name}" for name in net.output_names]].to_numpy()
    assert np.abs(errors).max() < 1e-4


def test_inline_context_names_its_network(api):
    net = gridsim.network("kerber_landnetz_kabel_1")
    sim = gridsim.simulate(30, 0.2, 4, network=net)
    body = {
        "model": "physics-fit",
        "context": {"x": sim.x[:28].tolist(), "y": sim.vm_pu[:28].tolist(), "network": net.name},
        "queries": sim.x[28:].tolist(),
    }
    answer = api.post("/v1/predict", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["network"] == net.name and np.asarray(answer.json()["mean"]).shape == (2, 17)
    # the same rows claimed to be IEEE 33: both widths named
    wrong = assert_problem(
        api.post("/v1/predict", json={**body, "context": {**body["context"], "network": "ieee33"}}), 422, "context.x"
    )
    assert "x has 16 columns; network ieee33 has 64 load inputs" in wrong["errors"][0]["message"]


def test_widths_that_do_not_fit_the_network_name_both(api):
    ieee = gridsim.simulate(20, 0.1, 0)
    refused = assert_problem(
        api.post(
            "/v1/context-sets",
            json={"x": ieee.x.tolist(), "y": ieee.vm_pu.tolist(), "network": "kerber_landnetz_kabel_1"},
        ),
        422,
        "body.x",
    )
    assert "x has 64 columns; network kerber_landnetz_kabel_1 has 16 load inputs" in refused["detail"]
    info = _context(api, "kerber_landnetz_kabel_1", n=20)
    for path, extra in (("/v1/predict", {"model": "physics-fit"}), ("/v1/gp/predict", {})):
        answer = assert_problem(
            api.post(path, json={**extra, "context_id": info["id"], "queries": ieee.x[:2].tolist()}), 422, "queries"
        )
        assert "queries has 64 columns; network kerber_landnetz_kabel_1 has 16 load inputs" in answer["detail"]
    simulated = assert_problem(
        api.post("/v1/simulate", json={"network": "mv_oberrhein_sub0", "loads": ieee.x[:1].tolist()}), 422, "loads"
    )
    assert "network mv_oberrhein_sub0 has 128 load inputs" in simulated["detail"]
    unknown = assert_problem(api.post("/v1/simulate", json={"network": "ieee34", "loads": [[0.1]]}), 422, "network")
    assert "ieee33" in unknown["errors"][0]["expected"]
    missing = api.post("/v1/context-sets", json={"simulate": {"network": "0" * 64, "n": 20}})
    assert_problem(missing, 404, "simulate.network")
    job = api.post(
        "/v1/batch-jobs",
        json={"simulate": {"network": "ieee33", "n": 10}, "model": "physics-fit", "context_id": info["id"]},
    )
    assert "is not the context set's network" in assert_problem(job, 422, "simulate.network")["detail"]


def test_client_names_columns_by_the_context_network(api, feeder_json):
    with GridPFNClient(str(api.base_url)) as client:
        nid = client.upload_network(feeder_json.encode())["id"]
        cid = client.create_context(simulate={"delta": 0.2, "n": 40, "seed": 2}, network=nid)
        net = gridsim.feeders.from_pandapower_json(feeder_json)
        loads = gridsim.sample_loads(net, 3, 0.1, np.random.default_rng(1))
        frame = client.predict(loads, model="physics-fit", context_id=cid)  # array columns: the network's names
        assert frame.shape[0] == 3 and f"mean_{net.output_names[0]}" in frame.columns
        assert frame.attrs["network"] == nid
        sim = gridsim.simulate(25, 0.2, 5, network="kerber_landnetz_kabel_1")
        inline = client.predict(
            sim.x[20:], model=MODEL, context=(sim.x[:20], sim.vm_pu[:20]), network="kerber_landnetz_kabel_1"
        )  # the checkpoint for kerber
        assert inline.attrs["network"] == "kerber_landnetz_kabel_1" and inline.shape[0] == 5
        assert "mean_vm_pu_bus1" in inline.columns
        assert client.simulate(loads, network=nid)["outputs"] == list(net.output_names)


def test_uploaded_feeder_batch_job_in_a_worker_process(
    every_network_dir, redis_network_server, redis_url, redis_server, tmp_path
):
    """A `gridpfn worker` process rebuilds the uploaded network from the job's directory. The feeder (one no other
    test uploads: this module's server has not read it) is uploaded through the session's server on the same
    Redis, as another replica would; the job goes to this module's Redis-mode server, whose queue and jobs dir
    are its own (no second server to start and warm). The worker's start (seconds of imports) and the upload,
    whose sandbox may start for it, overlap."""
    feeder = small_feeder()
    feeder.load.loc[0, "p_mw"] = 0.45
    settings = redis_network_server.app.state.job_settings
    env = worker_env(redis_url, every_network_dir, settings.jobs_dir, settings.job_queue)
    worker = WorkerProcess(tmp_path / "worker.log", env)
    try:
        uploaded = httpx.post(f"{redis_server.url}/v1/networks", content=pp.to_json(feeder), timeout=60)
        assert uploaded.status_code == 201, uploaded.text
        nid = uploaded.json()["id"]
        worker.wait_ready()
        with httpx.Client(base_url=redis_network_server.url, timeout=60) as client:
            cid = _context(client, nid, n=40)["id"]
            job = client.post(
                "/v1/batch-jobs",
                json={
                    "simulate": {"network": nid, "delta": 0.2, "n": 30, "seed": 3},
                    "model": "physics-fit",
                    "context_id": cid,
                    "with_ground_truth": True,
                },
            )
            assert job.status_code == 202, job.text
            final = wait_for(client, job.json()["id"], done)
            assert final["state"] == "done", (final, worker.text())
            frame = fetch_frame(client, job.json()["id"])
            assert len(frame) == 30 and frame["converged"].all()
            errors = frame[[c for c in frame.columns if c.startswith("err_")]].to_numpy()
            assert errors.shape[1] == 4 and np.abs(errors).max() < 1e-4
    finally:
        worker.stop()
