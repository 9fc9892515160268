"""The query routes: POST /v1/predict (a model's predictive distribution per query and bus, optionally
beside the exact GP) and POST /v1/gp/predict (the on-demand exact GP alone, its fit cached per context
id). Both take the same options and give the same answer shape, as JSON or Arrow; they are declared
here for /docs and answered by service.http.hot_routes unless that layer is off."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from service.engine import inference
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import require_api_key
from service.http.deps import ARROW_200, ARROW_BODY, get_runtime, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import answer_response
from service.http.schemas import GPPredictRequest, PredictRequest, PredictResponse

router = APIRouter(prefix="/v1", route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])
# what both routes declare: the answer (JSON or Arrow), the problems, and an Arrow request body
QUERY_ROUTE: dict[str, Any] = {
    "response_model": PredictResponse,
    "openapi_extra": ARROW_BODY,
    "responses": {**ARROW_200, **problems(401, 404, 413, 422, 429, 503, 504)},
}


@router.post(
    "/predict", tags=["predict"], summary="Per-bus voltage distribution for each query load vector", **QUERY_ROUTE
)
async def predict(
    body: PredictRequest,
    request: Request,
    rt: Runtime = Depends(get_runtime),
    tenant: Tenant = Depends(require_api_key),
) -> Response:
    """Arrays are shaped (queries, outputs). `compare_gp` adds the exact GP's mean/std and both timings."""
    return answer_response(await inference.predict(rt, body, tenant), request.headers.get("accept"))


@router.post(
    "/gp/predict",
    tags=["exact GP"],
    summary="Exact GP predictive per query and bus (same shapes as /v1/predict)",
    **QUERY_ROUTE,
)
async def gp_predict(
    body: GPPredictRequest,
    request: Request,
    rt: Runtime = Depends(get_runtime),
    tenant: Tenant = Depends(require_api_key),
) -> Response:
    """Contexts over GRIDPFN_GP_MAX_CONTEXT rows are refused (422): use batch jobs for those."""
    return answer_response(await inference.gp_predict(rt, body, tenant), request.headers.get("accept"))
