"""The query routes (POST /v1/predict, /v1/gp/predict) answered without FastAPI's per-request machinery.

Why: a single-query predict spent more of the event loop's time in FastAPI's routing,
dependency solving, exception and response plumbing than in the model — several times its
share (bench/results/service-notes.md) — and the event loop is what caps single-query requests/s. This ASGI layer
answers the same requests from the same pieces: the bearer check of `service.http.auth`, the JSON
decoding of the FastAPI routes (`service.http.fast_json.loads`) and the request schema's validation of what it
decoded, as FastAPI does it (so a list's length is counted before its items are validated: service.http.limits),
`service.engine.inference` for the work, `service.http.responses` for the answer and the problem shape of
`service.http.problems` for every failure. The routes stay
declared in FastAPI, which documents them (/docs, /openapi.json) and answers them when this
layer is off (`GRIDPFN_HOT_ROUTES=false`); tests check both give the same answers and errors.
Requests whose queries come as Arrow (service.http.arrow_request) are answered here either way:
FastAPI has no parser for them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from service.engine import inference
from service.engine.answers import QueryAnswer
from service.engine.errors import EngineError, InputRejected
from service.engine.tenants import Tenant
from service.http import arrow_request, fast_json
from service.http.auth import check_authorization_header
from service.http.middleware import READ_BODY
from service.http.problems import ProblemError, problem_of, problem_response, unexpected_response, validation_problem
from service.http.responses import answer_response
from service.http.schemas import GPPredictRequest, PredictRequest

Flow = Callable[[Any, Any, Tenant], Awaitable[QueryAnswer]]  # (runtime, request, caller) -> the typed answer

# (method, path) -> (request schema, the engine's flow); every route here also exists in FastAPI
ROUTES: dict[tuple[str, str], tuple[type[BaseModel], Flow]] = {
    ("POST", "/v1/predict"): (PredictRequest, inference.predict),
    ("POST", "/v1/gp/predict"): (GPPredictRequest, inference.gp_predict),
}


def _json_or_absent(content_type: str | None) -> bool:
    """Bodies FastAPI would parse as JSON: no content type, or application/json or a +json type."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _headers(scope: Scope) -> tuple[str | None, str | None, str | None]:
    """The request's Content-Type, Authorization and Accept, in one pass over its headers: each the first of
    its name, as Starlette's `Headers.get` gives it (ASGI header names are lower case)."""
    content_type = authorization = accept = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value.decode("latin-1") if content_type is None else content_type
        elif name == b"authorization":
            authorization = value.decode("latin-1") if authorization is None else authorization
        elif name == b"accept":
            accept = value.decode("latin-1") if accept is None else accept
    return content_type, authorization, accept


# FastAPI's error for a request without a body (fastapi.dependencies.utils)
_NO_BODY = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}


def _validated(schema: type[BaseModel], body: bytes) -> BaseModel:
    """The JSON body as `schema`, or the 422 FastAPI's route gives for it: decoded and validated as it does."""
    if not body:
        raise validation_problem([_NO_BODY])
    try:
        data = fast_json.loads(body)
    except json.JSONDecodeError as exc:
        raise validation_problem([fast_json.decode_error(exc)]) from None
    try:
        return schema.model_validate(data, from_attributes=True)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_url=False), "body") from None


class HotRoutes:
    """ASGI middleware: the ROUTES table is answered here, everything else passes through."""

    def __init__(self, app: ASGIApp, fastapi_app: Any, json: bool = True) -> None:
        self.app, self.fastapi_app, self.json = app, fastapi_app, json
        # what FastAPI's routing leaves in scope["route"]: metrics label requests by its path template
        self.route_of = {key: SimpleNamespace(path=key[1]) for key in ROUTES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = (scope.get("method"), scope.get("path"))
        if scope["type"] != "http" or key not in ROUTES:
            await self.app(scope, receive, send)
            return
        content_type, authorization, accept = _headers(scope)
        arrow = arrow_request.is_arrow(content_type)
        if not (arrow or (self.json and _json_or_absent(content_type))):
            await self.app(scope, receive, send)  # other content types get FastAPI's own answer
            return
        scope["route"] = self.route_of[key]
        try:
            response = await self._answer(key, scope, receive, arrow, authorization, accept)
        except ProblemError as problem:
            response = problem_response(problem)
        except EngineError as refused:
            response = problem_response(problem_of(refused))
        except Exception as exc:  # noqa: BLE001 - the same 500 problem FastAPI's handler gives
            response = unexpected_response(key[0], key[1], exc)
        await response(scope, receive, send)

    async def _answer(
        self,
        key: tuple[str, str],
        scope: Scope,
        receive: Receive,
        arrow: bool,
        authorization: str | None,
        accept: str | None,
    ) -> Response:
        runtime = self.fastapi_app.state.runtime
        tenant = check_authorization_header(authorization, runtime.settings.api_keys, runtime.settings.admin_api_key)
        schema, flow = ROUTES[key]
        body = scope.get(READ_BODY)  # read by the body limit (service.http.middleware), else read here
        if body is None:
            body = await Request(scope, receive).body()
        if arrow:
            request = arrow_request.parse(schema, body, runtime.settings.max_queries)
        else:
            request = _validated(schema, body)
        try:
            answered = await flow(runtime, request, tenant)
        except InputRejected as exc:
            moved = arrow_request.in_table_rows(exc) if arrow else None
            if moved is None:
                raise
            raise InputRejected(moved) from moved
        return answer_response(answered, accept)
