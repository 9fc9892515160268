"""POST /v1/simulate: ground-truth AC power flow for given load vectors on a built-in or uploaded
network, to check any answer."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Depends
from starlette.responses import Response

from service.engine.checks import load_rows
from service.engine.errors import TooLarge
from service.engine.gridsim_calls import solve
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import json_response
from service.http.schemas import SimulateRequest, SimulateResponse

router = APIRouter(prefix="/v1", tags=["simulate"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])


@router.post(
    "/simulate",
    response_model=SimulateResponse,
    responses=problems(401, 404, 413, 422, 503),
    summary="AC power flow |V| p.u. per bus for each load vector",
)
async def simulate(rt: RuntimeDep, tenant: TenantDep, body: SimulateRequest) -> Response:
    limit = rt.settings.max_simulate
    if len(body.loads) > limit:
        raise TooLarge(
            "loads",
            f"{len(body.loads)} load vectors is over the limit",
            f"at most {limit} (GRIDPFN_MAX_SIMULATE); more: POST /v1/batch-jobs",
        )
    net = await rt.networks.resolve(body.network, tenant=tenant)
    loads = load_rows(body.loads, net, "loads")
    names, vm_pu, converged = await rt.executor.run(solve, loads, net)
    rows = [
        row if ok and np.isfinite(row).all() else None
        for row, ok in zip(np.asarray(vm_pu, dtype=np.float64).tolist(), converged.tolist())
    ]
    return json_response(
        {"network": net.name, "outputs": names, "vm_pu": rows, "converged": [row is not None for row in rows]}
    )
