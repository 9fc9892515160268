"""The query routes: POST /v1/predict (a model's predictive distribution per query and bus, optionally
beside the exact GP) and POST /v1/gp/predict (the on-demand exact GP alone, its fit cached per context
id). Both take the same options and give the same answer shape, as JSON or Arrow; they are declared
here for /docs and answered by service.http.hot_routes unless that layer is off. One handler serves
both: each route's request schema and engine flow come from hot_routes.ROUTES, the one table of them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from service.http.auth import TenantDep, require_api_key
from service.http.deps import ARROW_200, ARROW_BODY, RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.hot_routes import ROUTES
from service.http.responses import answer_response
from service.http.schemas import PredictResponse

PREFIX = "/v1"
router = APIRouter(prefix=PREFIX, route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])
# what both routes declare: the answer (JSON or Arrow), the problems, and an Arrow request body
QUERY_ROUTE: dict[str, Any] = {
    "response_model": PredictResponse,
    "openapi_extra": ARROW_BODY,
    "responses": {**ARROW_200, **problems(401, 404, 413, 422, 429, 503, 504)},
}


def query_route(path: str, name: str, description: str, **declared: Any) -> None:
    """Declare POST `path` (its schema and flow from hot_routes.ROUTES) as FastAPI's route `name`."""
    schema, flow = ROUTES[("POST", path)]

    async def answer(rt: RuntimeDep, tenant: TenantDep, body: Any, request: Request) -> Response:
        return answer_response(await flow(rt, body, tenant), request.headers.get("accept"))

    answer.__annotations__["body"] = schema  # what FastAPI validates the JSON body with
    answer.__name__ = answer.__qualname__ = name  # its operationId: `<name>_<path>_post`
    answer.__doc__ = description
    router.post(path.removeprefix(PREFIX), **QUERY_ROUTE, **declared)(answer)


query_route(
    "/v1/predict",
    "predict",
    "Arrays are shaped (queries, outputs). `compare_gp` adds the exact GP's mean/std and both timings.",
    tags=["predict"],
    summary="Per-bus voltage distribution for each query load vector",
)
query_route(
    "/v1/gp/predict",
    "gp_predict",
    "Contexts over GRIDPFN_GP_MAX_CONTEXT rows are refused (422): use batch jobs for those.",
    tags=["exact GP"],
    summary="Exact GP predictive per query and bus (same shapes as /v1/predict)",
)
