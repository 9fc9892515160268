"""Context sets: upload or simulate, content-addressed, kept with a TTL; read and delete by id."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from starlette.responses import Response

from service.auth import require_api_key
from service.context_sets import ContextSet
from service.fast_json import OrjsonRoute
from service.deps import get_runtime, problems
from service.errors import invalid, not_found, too_large, unavailable
from service.gridsim_calls import simulate_context
from service.inference import json_response
from service.runtime import Runtime
from service.schemas import ContextSetCreate, ContextSetInfo
from service.store import StoreUnavailable

router = APIRouter(prefix="/v1/context-sets", tags=["context sets"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)],
                   responses=problems(401, 503))
IdPath = Path(pattern=r"^[0-9a-f]{64}$", description="sha256 id returned by POST /v1/context-sets")


def _info(ctx: ContextSet, ttl: int | None, with_data: bool = False) -> dict:
    info = {"id": ctx.id, "rows": ctx.rows, "features": int(ctx.x.shape[1]), "outputs": int(ctx.y.shape[1]),
            "source": ctx.source, "created_at": ctx.created_at, "expires_in_s": ttl}
    if with_data:
        info.update(x=ctx.x, y=ctx.y)
    return info


def _store_down(exc: StoreUnavailable):
    return unavailable("store-unavailable", "Context store unavailable", f"{exc}; retry shortly", 5)


@router.post("", status_code=201, response_model=ContextSetInfo, summary="Store an uploaded or simulated context set",
             responses=problems(413, 422))
async def create(body: ContextSetCreate, rt: Runtime = Depends(get_runtime)) -> Response:
    limit = min(rt.settings.max_simulate, rt.settings.max_context_rows)
    if body.simulate is not None:
        if body.simulate.n > limit:
            raise too_large("simulate.n", f"{body.simulate.n} simulated rows is over the limit", f"at most {limit}")
        x, y, dropped = await rt.run(simulate_context, body.simulate)
        if len(x) == 0:
            raise invalid("simulate", "no power flow converged", "a spec whose scenarios converge")
        ctx = ContextSet.build(x, y, {"kind": "simulated", **body.simulate.model_dump(), "dropped_nonconverged": dropped})
    else:
        ctx = rt.inline_context(body.x, body.y, field="body")
        ctx = ContextSet.build(ctx.x, ctx.y, {"kind": "uploaded"})
    try:
        await rt.contexts.put(ctx)
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    response = json_response(_info(ctx, rt.settings.context_ttl_s), status=201)
    response.headers["Location"] = f"/v1/context-sets/{ctx.id}"
    return response


@router.get("/{context_id}", response_model=ContextSetInfo, summary="A stored context set (arrays with include_data)",
            responses=problems(404, 422))
async def read(context_id: str = IdPath, include_data: bool = Query(False, description="also return x and y"),
               rt: Runtime = Depends(get_runtime)) -> Response:
    ctx = await rt.stored_context(context_id, location="path")
    try:
        ttl = await rt.contexts.ttl(context_id)
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    return json_response(_info(ctx, ttl, include_data))


@router.delete("/{context_id}", status_code=204, summary="Delete a context set", responses=problems(404, 422))
async def delete(context_id: str = IdPath, rt: Runtime = Depends(get_runtime)) -> Response:
    try:
        existed = await rt.contexts.delete(context_id)
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    if not existed:
        raise not_found("context set", context_id, "context_id")
    rt.encoded_cache.discard_where(lambda key: key[-1] == context_id)
    rt.gp_cache.discard(context_id)
    rt.recent_contexts.pop(context_id, None)
    return Response(status_code=204)
