"""/openapi.json saying exactly what this server accepts, with examples that run as shown.

Examples (service.http.examples): the served model's name and inline contexts of a size its card accepts,
so each runs on its own on a fresh server; the batch-job example, which by design names a stored context
set, carries the real content-addressed id of the context-set example's simulate spec and says so. The
description names what the server serves (every radial feeder, IEEE 33 among the built-ins), replacing the
app's constructor text. Contract: `model` is an enum of the served models, the configured limits (rows per
request, context rows, simulated rows: each a 413 past it) are the schema's maxima, read from the
app's Settings (so they hold before start-up too), and OpenAPI links chain the routes
that create a resource to those that use, read or delete it (POST /v1/context-sets -> GET/DELETE and a batch
job on it, POST /v1/batch-jobs -> status/result/summary/DELETE, POST /v1/networks -> GET/DELETE, GET
/v1/models -> GET one), so schemathesis' stateful phase can call each with a real id, not only with ids that
answer 404 (tests/service/http/test_contract.py walks the context set -> job -> summary chain itself)."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

from fastapi import FastAPI

from service.http import examples

log = logging.getLogger(__name__)

DESCRIPTION = (
    "Power-flow surrogates for radial distribution feeders (the built-in IEEE 33-bus, Kerber LV and MV Oberrhein "
    "feeders, or your own uploaded as pandapower JSON or a MATPOWER case: GET /v1/networks): per-bus voltage "
    "distributions for load vectors, conditioned on a context set of known load -> voltage examples, from "
    "pretrained DVA-PFNs and network-fit / physics-fit; planning studies, hosting capacity, meter placement and "
    "batch jobs. The examples run on the IEEE 33-bus feeder (`ieee33`), each on its own. Errors are RFC 9457 "
    "problem+json. With GRIDPFN_API_KEYS set, /v1 needs `Authorization: Bearer <key>`."
)


def _example_model(app: FastAPI) -> tuple[str, int]:
    """The model the examples name and the fewest context rows it takes."""
    runtime = getattr(app.state, "runtime", None)
    # the examples are on IEEE 33: a checkpoint for it, else physics-fit (which serves every network)
    registry = runtime.registry if runtime is not None else None
    models = sorted((key, m) for key, m in registry.checkpoints.items() if key[1] == "ieee33") if registry else []
    if models:
        (name, _), loaded = models[0]
        min_rows = int((loaded.card.get("context_size") or {}).get("min", 8))
    elif registry is not None and registry.width_free_cards:
        name, card = sorted(registry.width_free_cards.items())[0]
        min_rows = int(card["context_size"]["min"])
    else:
        name, min_rows = examples.DEFAULT_MODEL, 8
    return name, min_rows


def _add_examples(app: FastAPI, schema: dict[str, Any]) -> None:
    """Each request schema's examples, and the batch job's (its body's schema is not a component)."""
    components = schema["components"]["schemas"]
    model, min_rows = _example_model(app)
    for model_name, model_examples in examples.live(model, min_rows).items():
        if model_name in components:
            components[model_name]["examples"] = model_examples
    batch = schema["paths"]["/v1/batch-jobs"]["post"]["requestBody"]["content"]["application/json"]
    batch.pop("example", None)
    batch["examples"] = {
        "simulated": {
            "summary": "1000 simulated load cases; needs the context set of POST /v1/context-sets' simulate example",
            "description": "A batch job names a stored context set: run POST /v1/context-sets with its first "
            "example, then this (the id here is that set's without API keys; with keys, use the id it answered).",
            "value": examples.batch_job(model),
        }
    }


def _link(operation_id: str, parameter: str, expression: str) -> dict[str, Any]:
    """A link setting one parameter of the target, or with `body.<field>` one field of its JSON body (schemathesis
    merges that field into the body it generates: a batch job on the context set just stored)."""
    if parameter.startswith("body."):
        return {"operationId": operation_id, "requestBody": {parameter.removeprefix("body."): expression}}
    return {"operationId": operation_id, "parameters": {parameter: expression}}


# (path, method, status) of the creating answer -> {link name: (operationId, parameter, runtime expression)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, str]]] = {
    ("/v1/context-sets", "post", "201"): {
        "GetContextSet": ("read_v1_context_sets__context_id__get", "context_id", "$response.body#/id"),
        "DeleteContextSet": ("delete_v1_context_sets__context_id__delete", "context_id", "$response.body#/id"),
        # the batch-job example's context id is the keys-off one: with keys, only this link can submit a real
        # job, whose id the links below then carry to the status, result, summary and delete routes
        "SubmitBatchJob": ("submit_v1_batch_jobs_post", "body.context_id", "$response.body#/id"),
    },
    ("/v1/batch-jobs", "post", "202"): {
        "GetBatchJob": ("status_v1_batch_jobs__job_id__get", "job_id", "$response.body#/id"),
        "GetBatchJobResult": ("result_v1_batch_jobs__job_id__result_get", "job_id", "$response.body#/id"),
        "GetBatchJobSummary": ("summary_v1_batch_jobs__job_id__summary_get", "job_id", "$response.body#/id"),
        "DeleteBatchJob": ("cancel_v1_batch_jobs__job_id__delete", "job_id", "$response.body#/id"),
    },
    ("/v1/networks", "post", "201"): {
        "GetNetwork": ("read_v1_networks__network_id__get", "network_id", "$response.body#/id"),
        "DeleteNetwork": ("delete_v1_networks__network_id__delete", "network_id", "$response.body#/id"),
    },
    ("/v1/models", "get", "200"): {
        "GetModel": ("get_model_v1_models__name__get", "name", "$response.body#/models/0/name")
    },
}


def _add_links(schema: dict[str, Any]) -> None:
    for (path, method, status), links in LINKS.items():
        answer = schema["paths"][path][method]["responses"].setdefault(status, {"description": "created"})
        answer["links"] = {name: _link(*target) for name, target in links.items()}


def _max_items(prop: dict[str, Any], limit: int) -> None:
    """maxItems on a property's array (on its array branch when it is optional: anyOf array / null)."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "array":
            branch["maxItems"] = limit


def _set_limits(app: FastAPI, schema: dict[str, Any]) -> None:
    """Every configured limit a body can pass as the schema's maximum, from the app's Settings (a body
    over one is a 413, so the schema must say it), and the served models as an enum once they are loaded."""
    settings, components = app.state.settings, schema["components"]["schemas"]
    runtime = getattr(app.state, "runtime", None)
    bodies = {path: schema["paths"][path]["post"]["requestBody"] for path in ("/v1/batch-jobs", "/v1/networks")}
    names = runtime.registry.names() if runtime is not None else []
    if names:
        components["PredictRequest"]["properties"]["model"]["enum"] = names
    _max_items(components["PredictRequest"]["properties"]["queries"], settings.max_queries)
    if settings.gp_max_queries < settings.max_queries:  # compare_gp holds the queries to the GP's limit too
        components["PredictRequest"]["if"] = {"properties": {"compare_gp": {"const": True}}, "required": ["compare_gp"]}
        components["PredictRequest"]["then"] = {"properties": {"queries": {"maxItems": settings.gp_max_queries}}}
    _max_items(
        components["GPPredictRequest"]["properties"]["queries"], min(settings.max_queries, settings.gp_max_queries)
    )
    _max_items(components["SimulateRequest"]["properties"]["loads"], settings.max_simulate)
    # its rows times the context's unmetered buses are held to the same limit: that the schema cannot say (the field's
    # description does)
    _max_items(components["MeterPlacementRequest"]["properties"]["queries"], settings.max_queries)
    for component in ("ContextData", "ContextSetCreate"):  # an inline context's rows, an uploaded context set's
        for field in ("x", "y"):
            _max_items(components[component]["properties"][field], settings.max_context_rows)
    # SimulateSpec is the context-set spec: the simulated rows become a stored context
    components["SimulateSpec"]["properties"]["n"]["maximum"] = min(settings.max_simulate, settings.max_context_rows)
    # a batch job simulates up to its own (larger) row limit: its own copy of SimulateSpec
    from service.jobs.settings import JobSettings

    job_settings = getattr(app.state, "job_settings", None) or JobSettings()
    batch_spec = copy.deepcopy(components["SimulateSpec"])
    batch_spec["properties"]["n"]["maximum"] = job_settings.job_max_rows
    components["BatchSimulateSpec"] = batch_spec
    batch_body = bodies["/v1/batch-jobs"]["content"]["application/json"]["schema"]
    batch_body["properties"]["simulate"] = {"$ref": "#/components/schemas/BatchSimulateSpec"}
    batch_form = bodies["/v1/batch-jobs"]["content"]["multipart/form-data"]["schema"]
    for body in (batch_body, batch_form):
        if names:
            body["properties"]["model"]["enum"] = names
    # files, whose content JSON Schema cannot bound: their limits in words
    batch_form["properties"]["file"]["description"] += (
        f" At most {job_settings.job_max_rows} rows (GRIDPFN_JOB_MAX_ROWS); more, or a larger file, is a 413."
    )
    bodies["/v1/networks"]["description"] += (
        f"; at most {settings.max_network_bytes} bytes (GRIDPFN_MAX_NETWORK_BYTES), more is a 413"
    )
    # the GP fits inline contexts up to its own (smaller) limit: its own copy of ContextData
    gp_context = copy.deepcopy(components["ContextData"])
    for field in ("x", "y"):
        _max_items(gp_context["properties"][field], min(settings.max_context_rows, settings.gp_max_context))
    components["GPContextData"] = gp_context
    gp_request = components["GPPredictRequest"]["properties"]
    gp_request["context"] = json.loads(
        json.dumps(gp_request["context"]).replace(
            "#/components/schemas/ContextData", "#/components/schemas/GPContextData"
        )
    )


def install(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema["info"]["description"] = DESCRIPTION
            try:
                _add_examples(app, schema)
            except Exception:  # the docs still work, without examples
                log.exception("could not build the live examples")
            _add_links(schema)
            _set_limits(app, schema)
            if getattr(app.state, "runtime", None) is None:  # before start-up: built again once the models are known
                app.openapi_schema = None
                return schema
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
