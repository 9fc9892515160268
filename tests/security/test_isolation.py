"""Isolation between API keys (issue 28, finding 7), over real HTTP against a real `gridpfn serve`
process, with the embedded store and with real Redis (plus a real `gridpfn worker`).

Key A makes a context set, an uploaded network (and a context set on it) and a batch job. Key B,
on every route that reads, lists, uses, cancels or deletes one of them, gets the 404 an id that
never existed gets (the same body, the id aside) and no trace of them in lists; afterwards A's
objects are as they were. The admin key sees everything. Ids of owned objects cannot be computed
from their content; with keys off they are the content ids they always were.
"""

from __future__ import annotations

import io
import json
import secrets
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandapower as pp
import pyarrow as pa
import pytest
import redis

import gridsim
from service.engine.context_sets import context_id
from tests.gridsim.feeder_cases import small_feeder
from tests.security.conftest import ADMIN_KEY, JOB_ENV, KEY_A, KEY_B, assert_refused, serve_process
from tests.service.batch_support import WorkerProcess, worker_env
from tests.service.conftest import MODEL, assert_problem

SPEC = {"network": "ieee33", "delta": 0.1, "n": 40, "seed": 11}
NET = gridsim.network("ieee33")
JOB_ROWS = 600  # in JOB_ENV's chunks: a job that stays active for 6 s
ACTIVE = ("queued", "running")


@pytest.fixture(scope="module")
def feeder_json() -> str:
    return pp.to_json(small_feeder())


@pytest.fixture(scope="module", params=["memory", "redis"])
def stack(request, model_dir, tmp_path_factory):
    """(server, jobs dir, redis client or None). The Redis run also answers predicts in FastAPI's routers
    (GRIDPFN_HOT_ROUTES=false), the embedded run in the lean hot-route layer: both paths are covered. The
    embedded run is the hostile corpus's server (tests/security/conftest.py: the same keys, limits and job
    settings; a server process of its own took tens of seconds to start, its sandbox and GP processes more)."""
    if request.param == "memory":
        server = request.getfixturevalue("hostile_server")
        yield server, server.workdir / "jobs", None
        return
    workdir = tmp_path_factory.mktemp("isolation-redis")
    jobs_dir = workdir / "jobs"
    job_env = {"GRIDPFN_JOBS_DIR": str(jobs_dir), **JOB_ENV}
    url = request.getfixturevalue("redis_url")
    queue = f"isolation-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        worker = WorkerProcess(workdir / "worker.log", worker_env(url, model_dir, jobs_dir, queue, **job_env))
        stack.callback(worker.stop)
        job_env.update(GRIDPFN_REDIS_URL=url, GRIDPFN_JOB_QUEUE=queue, GRIDPFN_HOT_ROUTES="false")
        store = redis.Redis.from_url(url)
        stack.callback(store.close)
        server = stack.enter_context(serve_process(model_dir, workdir, **job_env))
        worker.wait_ready()
        yield server, jobs_dir, store


@dataclass
class Owned:
    """Key A's objects."""

    context: dict  # a simulated context set on ieee33 (with its data)
    network: dict  # an uploaded network
    net_context: dict  # a simulated context set on that network
    job: str  # a batch job, still active when made


def _created(response: httpx.Response, status: int = 201) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _context(client: httpx.Client, network: str, n: int, seed: int) -> dict:
    return _created(
        client.post("/v1/context-sets", json={"simulate": {"network": network, "delta": 0.1, "n": n, "seed": seed}})
    )


def _submit_job(client: httpx.Client, cid: str) -> httpx.Response:
    return client.post(
        "/v1/batch-jobs",
        json={
            "model": MODEL,
            "context_id": cid,
            "voltage_band": [0.95, 1.05],
            "simulate": {"network": "ieee33", "delta": 0.1, "n": JOB_ROWS, "seed": 3},
        },
    )


@pytest.fixture(scope="module")
def owned(stack, feeder_json) -> Owned:
    server = stack[0]
    with server.client(KEY_A) as a:
        made = _created(a.post("/v1/context-sets", json={"simulate": SPEC}))
        context = _created(a.get(f"/v1/context-sets/{made['id']}", params={"include_data": True}), 200)
        network = _created(a.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"}))
        net_context = _context(a, network["id"], 30, 2)
        job = _created(_submit_job(a, context["id"]), 202)
    return Owned(context, network, net_context, job["id"])


def _queries(n: int = 2) -> list:
    return gridsim.sample_loads(NET, n, 0.1, np.random.default_rng(1)).tolist()


def _arrow_body(fields: dict) -> bytes:
    x = np.asarray(_queries())
    table = pa.table(dict(zip(NET.feature_names, x.T))).replace_schema_metadata({"gridpfn": json.dumps(fields)})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _context_file(network: dict) -> bytes:
    names = network["features"] + network["outputs"]
    return (",".join(names) + "\n" + ",".join(["0.01"] * len(names)) + "\n").encode()


# Every route that reads, uses, cancels or deletes one of A's objects: kind -> [(name, request(client, id))]
CONTEXT_ROUTES = [
    ("read", lambda c, i: c.get(f"/v1/context-sets/{i}")),
    ("read with data", lambda c, i: c.get(f"/v1/context-sets/{i}", params={"include_data": True})),
    ("predict", lambda c, i: c.post("/v1/predict", json={"model": MODEL, "context_id": i, "queries": _queries()})),
    (
        "predict, Arrow body",
        lambda c, i: c.post(
            "/v1/predict",
            content=_arrow_body({"model": MODEL, "context_id": i}),
            headers={"content-type": "application/vnd.apache.arrow.stream"},
        ),
    ),
    (
        "predict with GP",
        lambda c, i: c.post(
            "/v1/predict", json={"model": MODEL, "context_id": i, "queries": _queries(), "compare_gp": True}
        ),
    ),
    ("GP predict", lambda c, i: c.post("/v1/gp/predict", json={"context_id": i, "queries": _queries()})),
    ("batch job, simulate", lambda c, i: _submit_job(c, i)),
    (
        "batch job, file",
        lambda c, i: c.post(
            "/v1/batch-jobs",
            data={"model": MODEL, "context_id": i},
            files={
                "file": ("loads.csv", (",".join(NET.feature_names) + "\n" + ",".join(["0.01"] * 64) + "\n").encode())
            },
        ),
    ),
    ("delete", lambda c, i: c.delete(f"/v1/context-sets/{i}")),
]
NETWORK_ROUTES = [
    ("read", lambda c, n: c.get(f"/v1/networks/{n['id']}")),
    (
        "simulated context set",
        lambda c, n: c.post(
            "/v1/context-sets", json={"simulate": {"network": n["id"], "delta": 0.1, "n": 20, "seed": 1}}
        ),
    ),
    (
        "uploaded context set",
        lambda c, n: c.post(
            "/v1/context-sets",
            json={"network": n["id"], "x": [[0.01] * len(n["features"])] * 2, "y": [[1.0] * len(n["outputs"])] * 2},
        ),
    ),
    (
        "predict, inline context",
        lambda c, n: c.post(
            "/v1/predict",
            json={
                "model": "physics-fit",
                "queries": [[0.01] * len(n["features"])],
                "context": {
                    "network": n["id"],
                    "x": [[0.01] * len(n["features"])] * 20,
                    "y": [[1.0] * len(n["outputs"])] * 20,
                },
            },
        ),
    ),
    (
        "simulate",
        lambda c, n: c.post("/v1/simulate", json={"network": n["id"], "loads": [[0.01] * len(n["features"])]}),
    ),
    ("model card", lambda c, n: c.get("/v1/models/physics-fit", params={"network": n["id"]})),
    ("delete", lambda c, n: c.delete(f"/v1/networks/{n['id']}")),
    (
        "UI context upload",
        lambda c, n: c.post(
            "/ui/api/context-sets", data={"network": n["id"]}, files={"file": ("context.csv", _context_file(n))}
        ),
    ),
]
JOB_ROUTES = [
    ("status", lambda c, j: c.get(f"/v1/batch-jobs/{j}")),
    ("result", lambda c, j: c.get(f"/v1/batch-jobs/{j}/result")),
    ("result as CSV", lambda c, j: c.get(f"/v1/batch-jobs/{j}/result", params={"format": "csv"})),
    ("risk histogram", lambda c, j: c.get(f"/ui/api/batch-jobs/{j}/risk-histogram")),
    ("cancel or delete", lambda c, j: c.delete(f"/v1/batch-jobs/{j}")),
]


def assert_never_existed(
    what: str, real: httpx.Response, unknown: httpx.Response, real_id: str, unknown_id: str
) -> None:
    """B's answer for A's object: the problem+json 404 of an id that never existed, byte for byte but the id."""
    try:
        assert_refused(real)
        assert_problem(real, 404)
        assert_problem(unknown, 404)
        assert real.content.replace(real_id.encode(), b"<id>") == unknown.content.replace(unknown_id.encode(), b"<id>")
        assert all(e.get("field") and e.get("expected") for e in real.json()["errors"]), real.text
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}") from None


def _listed(client: httpx.Client) -> set[str]:
    return {n["id"] for n in _created(client.get("/v1/networks"), 200)["networks"]}


def test_another_key_finds_nothing_of_the_owners(stack, owned):
    server = stack[0]
    unknown_network = {**owned.network, "id": secrets.token_hex(32)}
    with server.client(KEY_B) as b, server.client(KEY_A) as a:
        for name, request in CONTEXT_ROUTES:
            for cid in (owned.context["id"], owned.net_context["id"]):
                unknown = secrets.token_hex(32)
                assert_never_existed(f"context set, {name}", request(b, cid), request(b, unknown), cid, unknown)
        for name, request in NETWORK_ROUTES:
            assert_never_existed(
                f"network, {name}",
                request(b, owned.network),
                request(b, unknown_network),
                owned.network["id"],
                unknown_network["id"],
            )
        assert owned.network["id"] in _listed(a) and owned.network["id"] not in _listed(b)
        # and none of it touched A's objects
        again = _created(a.get(f"/v1/context-sets/{owned.context['id']}", params={"include_data": True}), 200)
        assert again["x"] == owned.context["x"] and again["y"] == owned.context["y"]
        assert _created(a.get(f"/v1/context-sets/{owned.net_context['id']}"), 200)["network"] == owned.network["id"]
        assert _created(a.get(f"/v1/networks/{owned.network['id']}"), 200)["features"] == owned.network["features"]
        answer = a.post("/v1/predict", json={"model": MODEL, "context_id": owned.context["id"], "queries": _queries()})
        assert answer.status_code == 200, answer.text


def test_another_key_cannot_see_cancel_fetch_or_delete_a_job(stack, owned):
    server = stack[0]
    with server.client(KEY_B) as b, server.client(KEY_A) as a:
        before = _created(a.get(f"/v1/batch-jobs/{owned.job}"), 200)
        assert before["state"] in ACTIVE, before  # B's attempts below meet a job still in flight
        for name, request in JOB_ROUTES:
            unknown = secrets.token_hex(16)
            assert_never_existed(f"job, {name}", request(b, owned.job), request(b, unknown), owned.job, unknown)
        after = _created(a.get(f"/v1/batch-jobs/{owned.job}"), 200)
        assert after["state"] in ACTIVE + ("done",), after  # not cancelled
        deadline = time.monotonic() + 60
        while after["state"] != "done":
            assert after["state"] in ACTIVE and time.monotonic() < deadline, after
            time.sleep(0.1)
            after = _created(a.get(f"/v1/batch-jobs/{owned.job}"), 200)
        for name, request in JOB_ROUTES:  # and once it is done
            unknown = secrets.token_hex(16)
            assert_never_existed(f"job, {name}", request(b, owned.job), request(b, unknown), owned.job, unknown)
        result = a.get(f"/v1/batch-jobs/{owned.job}/result", params={"format": "csv"})
        assert result.status_code == 200 and result.text.count("\n") == JOB_ROWS + 1
        assert a.get(f"/ui/api/batch-jobs/{owned.job}/risk-histogram").json()["rows"] == JOB_ROWS


def test_the_admin_key_sees_everything(stack, owned):
    server = stack[0]
    with server.client(ADMIN_KEY) as admin:
        seen = _created(admin.get(f"/v1/context-sets/{owned.context['id']}", params={"include_data": True}), 200)
        assert seen["x"] == owned.context["x"]
        assert owned.network["id"] in _listed(admin)
        assert _created(admin.get(f"/v1/networks/{owned.network['id']}"), 200)["id"] == owned.network["id"]
        assert _created(admin.get(f"/v1/context-sets/{owned.net_context['id']}"), 200)["rows"] > 0
        assert (
            admin.post(
                "/v1/predict", json={"model": MODEL, "context_id": owned.context["id"], "queries": _queries()}
            ).status_code
            == 200
        )
        assert _created(admin.get(f"/v1/batch-jobs/{owned.job}"), 200)["id"] == owned.job
    with server.client(KEY_B) as b:  # what the admin makes is the admin's
        with server.client(ADMIN_KEY) as admin:
            mine = _context(admin, "ieee33", 20, 5)["id"]
        assert_problem(b.get(f"/v1/context-sets/{mine}"), 404)


def test_owned_ids_cannot_be_computed_from_the_content(stack, owned, feeder_json):
    """A context set or network's id mixes in its owner: B making the same one gets another id (and both are
    kept), A making it again gets its own id again (shared caches), and neither is the content id."""
    server = stack[0]
    result = gridsim.simulate(SPEC["n"], SPEC["delta"], SPEC["seed"])
    computable = context_id(result.x[result.converged], result.vm_pu[result.converged])
    with server.client(KEY_A) as a, server.client(KEY_B) as b:
        assert _created(a.post("/v1/context-sets", json={"simulate": SPEC}))["id"] == owned.context["id"]
        theirs = _created(b.post("/v1/context-sets", json={"simulate": SPEC}))["id"]
        assert len({owned.context["id"], theirs, computable}) == 3
        assert_problem(b.get(f"/v1/context-sets/{computable}"), 404)
        again = _created(a.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"}))
        other = _created(b.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"}))
        assert again["id"] == owned.network["id"] != other["id"]
        assert other["id"] in _listed(b) and other["id"] not in _listed(a)
        assert_problem(a.get(f"/v1/context-sets/{theirs}"), 404)


def test_keys_are_never_stored(stack, owned):
    """The store and the job files hold tenant tags, never a key."""
    _, jobs_dir, store = stack
    secrets_ = [k.encode() for k in (KEY_A, KEY_B, ADMIN_KEY)]
    blobs = [p.read_bytes() for p in Path(jobs_dir).rglob("*") if p.is_file()]
    assert blobs, "no job files to look at"
    if store is not None:
        for key in store.scan_iter(match="*"):
            kind = store.type(key)
            if kind == b"string":
                blobs.append(store.get(key))
            elif kind == b"hash":
                blobs.extend(b"".join(pair) for pair in store.hgetall(key).items())
            blobs.append(key)
    assert not [b for b in blobs if any(s in b for s in secrets_)]


def test_without_keys_ids_are_the_content_ids(memory_server, feeder_json):
    """Keys off (the local default): one shared space, ids as before tenants."""
    from service.engine.networks import snapshot_upload

    result = gridsim.simulate(SPEC["n"], SPEC["delta"], SPEC["seed"])
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        made = _created(client.post("/v1/context-sets", json={"simulate": SPEC}))
        assert made["id"] == context_id(result.x[result.converged], result.vm_pu[result.converged])
        network = _created(
            client.post("/v1/networks", content=feeder_json, headers={"content-type": "application/json"})
        )
        assert network["id"] == snapshot_upload(feeder_json.encode(), None)[0]["id"]
        assert network["id"] in _listed(client)
