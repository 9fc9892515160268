"""POST /v1/predict: the PFN's predictive distribution per query and bus (optionally vs the exact GP)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from service.engine import inference
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import require_api_key
from service.http.deps import ARROW_200, ARROW_BODY, get_runtime, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import answer_response
from service.http.schemas import PredictRequest, PredictResponse

router = APIRouter(prefix="/v1", tags=["predict"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])


@router.post("/predict", response_model=PredictResponse, responses={**ARROW_200, **problems(401, 404, 413, 422, 429, 503, 504)},
             openapi_extra=ARROW_BODY, summary="Per-bus voltage distribution for each query load vector")
async def predict(body: PredictRequest, request: Request, rt: Runtime = Depends(get_runtime),
                  tenant: Tenant = Depends(require_api_key)) -> Response:
    """Arrays are shaped (queries, outputs). `compare_gp` adds the exact GP's mean/std and both timings."""
    return answer_response(await inference.predict(rt, body, tenant), request.headers.get("accept"))
