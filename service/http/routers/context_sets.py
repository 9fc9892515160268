"""Context sets: upload or simulate on a network, content-addressed, kept with a TTL; read and delete by id.

Each set is its tenant's (the caller's key, service.engine.tenants): its id mixes in the tenant, and
another key reading, using or deleting it gets the 404 of an id that never existed.

A set names its network (a built-in or an upload): its widths are checked against it here, its readings
against the network model's power flow (service.engine.readings), and every later predict, GP or batch job on
the set takes the network from it. Its x and y may hold null where a value was not measured
(service.engine.sparse); its description says which buses it reads.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from starlette.responses import Response

from service.constants import SHA256_ID
from service.engine.context_sets import ContextSet
from service.engine.errors import InvalidInput, NotFound, TooLarge
from service.engine.gridsim_calls import simulate_context
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import json_response
from service.http.schemas import ContextSetCreate, ContextSetInfo

router = APIRouter(
    prefix="/v1/context-sets",
    tags=["context sets"],
    route_class=OrjsonRoute,
    dependencies=[Depends(require_api_key)],
    responses=problems(401, 503),
)
IdPath = Path(pattern=SHA256_ID, description="sha256 id returned by POST /v1/context-sets")


def _info(ctx: ContextSet, ttl: int | None, with_data: bool = False) -> dict:
    info = {
        "id": ctx.id,
        "network": ctx.network,
        "rows": ctx.rows,
        "features": int(ctx.x.shape[1]),
        "outputs": int(ctx.y.shape[1]),
        "source": ctx.source,
        "created_at": ctx.created_at,
        "expires_in_s": ttl,
        "missing": ctx.missing,
        **ctx.metering.json(),
        "typical_loads": None if ctx.typical_loads is None else ctx.typical_loads.tolist(),
    }
    if with_data:
        info.update(x=ctx.x, y=ctx.y)
    return info


@router.post(
    "",
    status_code=201,
    response_model=ContextSetInfo,
    summary="Store an uploaded or simulated context set",
    responses=problems(404, 413, 422),
)
async def create(rt: RuntimeDep, tenant: TenantDep, body: ContextSetCreate) -> Response:
    limit = min(rt.settings.max_simulate, rt.settings.max_context_rows)
    if body.simulate is not None:
        if body.simulate.n > limit:
            raise TooLarge(
                "simulate.n",
                f"{body.simulate.n} simulated rows is over the limit of {limit} (the smaller of GRIDPFN_MAX_SIMULATE and "
                "GRIDPFN_MAX_CONTEXT_ROWS; upload larger "
                "contexts as x/y)",
                f"at most {limit}",
            )
        net = await rt.networks.resolve(body.simulate.network, "simulate.network", tenant=tenant)
        x, y, dropped = await rt.executor.run(simulate_context, body.simulate, net)
        if len(x) == 0:
            raise InvalidInput("simulate", "no power flow converged", "a spec whose scenarios converge")
        source = {"kind": "simulated", **body.simulate.model_dump(), "dropped_nonconverged": dropped}
        ctx = ContextSet.build(x, y, source, network=net.name, owner=tenant.tag)
    else:
        net = await rt.networks.resolve(body.network_name, "network", tenant=tenant)
        ctx = rt.checks.context(
            body.x,
            body.y,
            net,
            field="body",
            source={"kind": "uploaded"},
            owner=tenant.tag,
            typical_loads=body.typical_loads,
        )
        await rt.readings.checked(ctx, net, "body")  # every reading near the network model's power flow
    await rt.contexts.put(ctx)
    await rt.networks.keep(net.name)
    response = json_response(_info(ctx, rt.settings.context_ttl_s), status=201)
    response.headers["Location"] = f"/v1/context-sets/{ctx.id}"
    return response


@router.get(
    "/{context_id}",
    response_model=ContextSetInfo,
    summary="A stored context set (arrays with include_data)",
    responses=problems(404, 422),
)
async def read(
    rt: RuntimeDep,
    tenant: TenantDep,
    context_id: str = IdPath,
    include_data: bool = Query(False, description="also return x and y"),
) -> Response:
    ctx = await rt.contexts.stored(context_id, location="path", tenant=tenant)
    ttl = await rt.contexts.ttl(context_id)
    return json_response(_info(ctx, ttl, include_data))


@router.delete("/{context_id}", status_code=204, summary="Delete a context set", responses=problems(404, 422))
async def delete(rt: RuntimeDep, tenant: TenantDep, context_id: str = IdPath) -> Response:
    if not await rt.contexts.delete(context_id, tenant=tenant):
        raise NotFound("context set", context_id, "context_id")
    rt.fits.forget(context_id)
    rt.gp.forget(context_id)
    rt.contexts.forget(context_id)
    return Response(status_code=204)
