"""The API contract: the OpenAPI schema says what the server accepts, checked by schemathesis and by hand.

The schemathesis run uses every check (`--checks all`: no 5xx, answers as documented, schema-valid
requests accepted, schema-violating ones refused, auth enforced, `Allow` on 405, links followed...)
and every phase (examples, coverage, fuzzing, stateful) against a real server with an API key. It
runs the CLI (its pytest plugin does not support the installed pytest 9) with a small
`--max-examples` and a fixed seed so it stays within about a minute.

One allowance, in schemathesis.toml below: on the POST routes whose bodies carry rules JSON Schema
cannot state, a schema-valid body may still be a 422 (positive_data_acceptance). Those rules are:
a row is as long as its network's load or voltage vector (the network is named by another field,
or by the stored context set), an uploaded network id exists (else 404), an inline context's x and
y have the same number of rows, and as many as the chosen model accepts
(its card's context_size) or the GP's limit for a stored context; a batch-job form's text fields
hold numbers in range; an uploaded network file is a pandapower or MATPOWER case. The planning routes
(studies, hosting capacity, meter placement) add two: a bus or customer class they name is one of the
network's (else 422), and their work, a product of fields (scenarios x years x steps; load rows x
candidate buses x search passes), is within GRIDPFN_MAX_STUDY_ROWS (else 413). Every other check holds
on every route without allowance.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.jobs.settings import JobSettings
from service.settings import Settings
from tests.service.conftest import LIMITS, running

log = logging.getLogger(__name__)
KEY = "contract-test-key"
MAX_EXAMPLES = 10
# 413 refuses a schema-violating body as well as 422 does (more rows than the schema's maxItems).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

# (one filter per entry: schemathesis ORs an entry's filters, so include-method = "POST" beside a path regex
# would make the entry apply to every POST route)
[[operations]]
include-path-regex = "^/v1/(predict|gp/predict|context-sets|batch-jobs|networks|simulate)$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

[[operations]]
include-path-regex = "^/v1/(studies|hosting-capacity|meter-placement)$"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "413", "422", "429"]
"""


@pytest.fixture(scope="module")
def keyed_server(model_dir, tmp_path_factory, scenarios):
    server_jobs_dir = tmp_path_factory.mktemp("contract-jobs")
    # simulate.n defaults to 500, so the simulate limits stay at or above it (LIMITS: 500 / 600 rows)
    # and no spread calibration: it re-encodes every inline context 20 times, the bulk of the coverage phase
    limits = {**LIMITS, "max_queries": 50, "calibration": False}
    with running(Settings(model_dir=model_dir, redis_url=None, api_keys=(KEY,), **limits)) as server:
        # batch jobs run inside this server: the coverage phase's largest job (the schema's maximum)
        # must stay small, or it computes for minutes beside the run
        server.app.state.job_settings = JobSettings(job_max_rows=2000, jobs_dir=server_jobs_dir)
        _start_worker_processes(server.url, scenarios)
        yield server


def _start_worker_processes(url: str, scenarios) -> None:
    """The upload sandbox's and the exact GP's processes start on first use: each imports torch and pandapower
    (seconds; over 10 s on a busy 2-core host, past the response time schemathesis allows). Both started here,
    side by side, by one request each, so that no request of the run waits for one."""
    x, y = scenarios
    gp_body = {"context": {"x": x[:20].tolist(), "y": y[:20].tolist()}, "queries": x[:1].tolist()}
    requests = [("/v1/networks", {}, 422), ("/v1/gp/predict", gp_body, 200)]  # (`{}`: read in the sandbox, refused)

    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)

    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(post, [path for path, _, _ in requests], [body for _, body, _ in requests]))
    for (path, _, status), answer in zip(requests, answers):
        assert answer.status_code == status, (path, answer.text)


@pytest.fixture
def api(keyed_server):
    with httpx.Client(base_url=keyed_server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


def test_schemathesis_all_checks_all_phases(keyed_server, tmp_path):
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    cli = Path(sys.executable).with_name("schemathesis")
    command = [
        str(cli),
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{keyed_server.url}/openapi.json",
        "-H",
        f"Authorization: Bearer {KEY}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "1",
        "--request-timeout",
        "60",
        "--workers",
        "1",
        "--no-color",
    ]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="", HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path))
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)
    report = result.stdout[-12000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    summary = result.stdout[result.stdout.rfind("SUMMARY") :]
    log.info("schemathesis summary:\n%s", summary)  # pytest -o log_cli=true shows it
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, report
    counts = re.search(r"(\d+) generated, (\d+) passed", summary)
    assert counts and counts.group(1) == counts.group(2) and "failure" not in summary, report


def test_unknown_fields_refused_by_both_layers(api, model_dir, scenarios):
    """The lean ASGI layer and FastAPI's routing answer the same 422 naming the unknown field."""
    x, y = scenarios
    context = {"x": x[:20].tolist(), "y": y[:20].tolist()}
    body = {"model": "tiny-dva", "context": context, "queries": x[:1].tolist(), "colour": "red"}
    hot = api.post("/v1/predict", json=body)
    with running(Settings(model_dir=model_dir, redis_url=None, api_keys=(KEY,), hot_routes=False, **LIMITS)) as plain:
        routed = httpx.post(
            f"{plain.url}/v1/predict", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
        )
        routed_gp = httpx.post(
            f"{plain.url}/v1/gp/predict",
            json={**body, "model": None},
            timeout=60,
            headers={"Authorization": f"Bearer {KEY}"},
        )
    for answer in (hot, routed):
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["field"] == "colour", answer.text
        assert "unknown fields are refused" in answer.json()["errors"][0]["expected"]
    assert hot.json() == routed.json()
    assert routed_gp.status_code == 422 and {e["field"] for e in routed_gp.json()["errors"]} == {"colour", "model"}
    nested = api.post("/v1/context-sets", json={"simulate": {"n": 20, "seed": 1, "sead": 2}})
    assert nested.status_code == 422 and nested.json()["errors"][0]["field"] == "simulate.sead", nested.text


@pytest.mark.parametrize("seed", ["1", True, 1.5, None])
def test_simulate_seed_is_strictly_an_integer(api, seed):
    answer = api.post("/v1/context-sets", json={"simulate": {"n": 20, "seed": seed}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "simulate.seed"
    assert api.post("/v1/context-sets", json={"simulate": {"n": 20, "seed": 7}}).status_code == 201


def test_network_is_a_built_in_or_an_upload_id(api, keyed_server):
    from gridsim.network import KNOWN_NETWORKS

    schema = httpx.get(f"{keyed_server.url}/openapi.json").json()["components"]["schemas"]
    pattern = schema["SimulateSpec"]["properties"]["network"]["pattern"]
    assert all(re.match(pattern, name) for name in KNOWN_NETWORKS) and re.match(pattern, "ab" * 32)
    assert not re.match(pattern, "ieee34")
    answer = api.post("/v1/simulate", json={"network": "ieee34", "loads": [[0.1] * 64]})
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "network"
    assert "ieee33" in answer.json()["errors"][0]["expected"]
    for name in ("PredictRequest", "SimulateRequest", "ContextSetCreate", "ContextData", "SimulateSpec"):
        assert schema[name]["additionalProperties"] is False, name


@pytest.mark.parametrize(
    "path",
    [
        "/v1/batch-jobs/0123456789abcdef0123456789abcdef",
        "/v1/context-sets/" + "0" * 64,
        "/v1/models",
        "/v1/predict",
        "/healthz",
    ],
)
def test_405_names_every_method_the_path_serves(api, keyed_server, path):
    schema = httpx.get(f"{keyed_server.url}/openapi.json").json()["paths"]
    template = next(
        p for p in schema if p.split("/")[:3] == path.split("/")[:3] and len(p.split("/")) == len(path.split("/"))
    )
    declared = {m.upper() for m in schema[template]}
    answer = api.request("OPTIONS", path)
    assert answer.status_code == 405, answer.text
    allowed = {m.strip() for m in answer.headers["allow"].split(",")}
    assert allowed - {"HEAD"} == declared, (allowed, declared)


def test_links_chain_creators_to_readers(keyed_server):
    paths = httpx.get(f"{keyed_server.url}/openapi.json").json()["paths"]
    operation_ids = {op["operationId"] for ops in paths.values() for op in ops.values()}
    links = {
        ("/v1/context-sets", "post", "201"): 3,
        ("/v1/batch-jobs", "post", "202"): 4,
        ("/v1/models", "get", "200"): 1,
        ("/v1/networks", "post", "201"): 2,
    }
    for (path, method, status), count in links.items():
        found = paths[path][method]["responses"][status]["links"]
        assert len(found) == count, (path, found)
        assert all(link["operationId"] in operation_ids for link in found.values()), found
    path_of = {op["operationId"]: path for path, ops in paths.items() for op in ops.values()}
    job_links = paths["/v1/batch-jobs"]["post"]["responses"]["202"]["links"]
    assert path_of[job_links["GetBatchJobSummary"]["operationId"]] == "/v1/batch-jobs/{job_id}/summary"
    assert job_links["GetBatchJobSummary"]["parameters"] == {"job_id": "$response.body#/id"}
    network_links = paths["/v1/networks"]["post"]["responses"]["201"]["links"]
    delete = next(ops["delete"] for path, ops in paths.items() if path == "/v1/networks/{network_id}")
    assert network_links["DeleteNetwork"]["operationId"] == delete["operationId"]


def _follow(link: dict, answer: dict, paths: dict) -> tuple[str, str, dict]:
    """(method, path, JSON body fields) of the operation a link names, its runtime expressions
    (`$response.body#/<field>`) evaluated on the answer the link hangs from."""
    method, template = next(
        (method, path)
        for path, ops in paths.items()
        for method, op in ops.items()
        if op["operationId"] == link["operationId"]
    )
    value = lambda expression: answer[expression.removeprefix("$response.body#/")]  # noqa: E731
    for name, expression in link.get("parameters", {}).items():
        template = template.replace("{" + name + "}", value(expression))
    return method.upper(), template, {name: value(e) for name, e in link.get("requestBody", {}).items()}


def test_links_lead_from_a_context_set_to_a_jobs_summary(api, keyed_server):
    """The chain the stateful phase can walk, walked here with real ids: a stored context set -> a batch job on it
    (SubmitBatchJob) -> its status (GetBatchJob) until done -> its per-bus summary (GetBatchJobSummary)."""
    paths = api.get("/openapi.json").json()["paths"]
    made = api.post("/v1/context-sets", json={"simulate": {"n": 60, "delta": 0.1, "seed": 4}})
    assert made.status_code == 201, made.text
    context_links = paths["/v1/context-sets"]["post"]["responses"]["201"]["links"]
    method, path, fields = _follow(context_links["SubmitBatchJob"], made.json(), paths)
    job_spec = {"model": "tiny-dva", "simulate": {"n": 20, "delta": 0.1, "seed": 1}, "voltage_band": [0.95, 1.05]}
    job = api.request(method, path, json={**job_spec, **fields})
    assert (method, path, job.status_code) == ("POST", "/v1/batch-jobs", 202), job.text
    job_links = paths["/v1/batch-jobs"]["post"]["responses"]["202"]["links"]
    method, path, _ = _follow(job_links["GetBatchJob"], job.json(), paths)
    deadline = time.monotonic() + 60
    while (status := api.request(method, path).json())["state"] != "done":
        assert status["state"] in ("queued", "running") and time.monotonic() < deadline, status
        time.sleep(0.1)
    method, path, _ = _follow(job_links["GetBatchJobSummary"], job.json(), paths)
    summary = api.request(method, path)
    assert (method, path, summary.status_code) == ("GET", f"/v1/batch-jobs/{job.json()['id']}/summary", 200)
    assert len(summary.json()["summary"]) == 32 and summary.json()["rows"] == 20


def _schema_limit(schema: dict, component: str, field: str) -> int:
    """The maxItems (maximum for an integer) the schema declares on a component's field (its array branch)."""
    prop = schema[component]["properties"][field]
    if "maximum" in prop:
        return prop["maximum"]
    return next(branch["maxItems"] for branch in prop.get("anyOf", [prop]) if branch.get("type") == "array")


def test_every_limit_answering_413_is_the_schemas_maximum(api, keyed_server, scenarios):
    """Past each configured limit the server answers 413; the schema declares that limit as maxItems or
    maximum, so a schema-valid body is never a 413 (schemathesis' positive data acceptance)."""
    x, y = scenarios
    schema = httpx.get(f"{keyed_server.url}/openapi.json").json()["components"]["schemas"]
    settings, jobs = keyed_server.app.state.settings, keyed_server.app.state.job_settings
    tall = lambda a, n: np.repeat(a[:1], n, axis=0).tolist()  # noqa: E731
    # (component, field, the limit, path, a body of `n` rows or n, the field the 413 names)
    limits = [
        (
            "PredictRequest",
            "queries",
            settings.max_queries,
            "/v1/predict",
            lambda n: {
                "model": "tiny-dva",
                "context": {"x": x[:20].tolist(), "y": y[:20].tolist()},
                "queries": tall(x, n),
            },
            "queries",
        ),
        (
            "GPPredictRequest",
            "queries",
            min(settings.max_queries, settings.gp_max_queries),
            "/v1/gp/predict",
            lambda n: {"context": {"x": x[:20].tolist(), "y": y[:20].tolist()}, "queries": tall(x, n)},
            "queries",
        ),
        (
            "ContextData",
            "x",
            settings.max_context_rows,
            "/v1/predict",
            lambda n: {"model": "tiny-dva", "context": {"x": tall(x, n), "y": tall(y, n)}, "queries": x[:1].tolist()},
            "context.x",
        ),
        (
            "ContextSetCreate",
            "x",
            settings.max_context_rows,
            "/v1/context-sets",
            lambda n: {"x": tall(x, n), "y": tall(y, n)},
            "body.x",
        ),
        ("SimulateRequest", "loads", settings.max_simulate, "/v1/simulate", lambda n: {"loads": tall(x, n)}, "loads"),
        (
            "MeterPlacementRequest",
            "queries",
            settings.max_queries,
            "/v1/meter-placement",
            lambda n: {"context": {"x": x[:20].tolist(), "y": y[:20].tolist()}, "queries": tall(x, n)},
            "queries",
        ),
        (
            "SimulateSpec",
            "n",
            min(settings.max_simulate, settings.max_context_rows),
            "/v1/context-sets",
            lambda n: {"simulate": {"n": n}},
            "simulate.n",
        ),
        (
            "BatchSimulateSpec",
            "n",
            jobs.job_max_rows,
            "/v1/batch-jobs",
            lambda n: {"model": "tiny-dva", "context_id": "0" * 64, "simulate": {"n": n}},
            "simulate.n",
        ),
    ]
    for component, field, limit, path, body, named in limits:
        assert _schema_limit(schema, component, field) == limit, (component, field)
        over = api.post(path, json=body(limit + 1))
        assert over.status_code == 413 and over.json()["errors"][0]["field"] == named, (component, over.text)


def test_the_schemas_limits_come_from_settings_before_start_up(model_dir):
    """The maxima are the app's Settings from its creation, not only once the models are loaded."""
    from service.http.app import create_app

    app = create_app(
        Settings(
            model_dir=model_dir,
            redis_url=None,
            max_queries=70,
            gp_max_queries=30,
            max_context_rows=90,
            max_simulate=40,
            max_network_bytes=5000,
        )
    )
    app.openapi()  # built once before: the limits in words are not said twice
    full = app.openapi()
    schema = full["components"]["schemas"]
    assert (
        _schema_limit(schema, "PredictRequest", "queries"),
        _schema_limit(schema, "GPPredictRequest", "queries"),
        _schema_limit(schema, "ContextData", "y"),
        _schema_limit(schema, "ContextSetCreate", "y"),
        _schema_limit(schema, "SimulateSpec", "n"),
        _schema_limit(schema, "SimulateRequest", "loads"),
    ) == (70, 30, 90, 90, 40, 40)
    # compare_gp holds the queries to the GP's own limit
    assert schema["PredictRequest"]["then"] == {"properties": {"queries": {"maxItems": 30}}}
    assert app.openapi_schema is None  # built again once the served models are known (their enum)
    # a file's limits, which JSON Schema cannot state on its content, in words
    upload = full["paths"]["/v1/networks"]["post"]["requestBody"]["description"]
    assert upload.count("at most 5000 bytes (GRIDPFN_MAX_NETWORK_BYTES)") == 1, upload
    batch_file = full["paths"]["/v1/batch-jobs"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert batch_file["schema"]["properties"]["file"]["description"].count("(GRIDPFN_JOB_MAX_ROWS)") == 1
