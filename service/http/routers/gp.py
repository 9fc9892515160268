"""POST /v1/gp/predict: the on-demand exact GP alone (fit cached per context id)."""
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
from service.http.schemas import GPPredictRequest, PredictResponse

router = APIRouter(prefix="/v1/gp", tags=["exact GP"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])


@router.post("/predict", response_model=PredictResponse, responses={**ARROW_200, **problems(401, 404, 413, 422, 429, 503, 504)},
             openapi_extra=ARROW_BODY, summary="Exact GP predictive per query and bus (same shapes as /v1/predict)")
async def gp_predict(body: GPPredictRequest, request: Request, rt: Runtime = Depends(get_runtime),
                     tenant: Tenant = Depends(require_api_key)) -> Response:
    """Contexts over GRIDPFN_GP_MAX_CONTEXT rows are refused (422): use batch jobs for those."""
    return answer_response(await inference.gp_predict(rt, body, tenant), request.headers.get("accept"))
