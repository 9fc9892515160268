"""POST /v1/meter-placement: the buses no meter reads, ranked by how much one meter there would shrink
the largest predictive spread over the given queries (models.meter_placement; flow in
service.engine.placement).

A route of its own rather than a predict option: its answer is a ranking of buses, not a distribution
per query, it costs a posterior update per candidate, and only network-fit has a posterior to update."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import Field
from starlette.responses import Response

from service.engine import placement as engine
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import json_response
from service.http.schemas import ModelVersion, OneContext, Queries, StrictInt

router = APIRouter(prefix="/v1", tags=["planning"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])


class MeterPlacementRequest(OneContext):
    """The context (as for predict: it may leave buses and loads unmetered, null), the queries to predict
    well, and how many ranked buses to answer."""

    model: str = Field(engine.PLACING_MODEL, description="network-fit (the model whose posterior placement updates)")
    version: ModelVersion | None = None
    queries: Queries = Field(
        description="(queries, features) load vectors the next meter should serve; their number times the "
        "context's unmetered buses at most GRIDPFN_MAX_QUERIES (else 413)"
    )
    top: StrictInt = Field(5, ge=1, le=10_000, description="how many ranked buses to answer")


@router.post(
    "/meter-placement",
    responses=problems(401, 404, 413, 422, 503),
    summary="Unmetered buses ranked by the largest predictive spread a meter there would leave",
)
async def meter_placement(rt: RuntimeDep, tenant: TenantDep, body: MeterPlacementRequest) -> Response:
    """`largest_std` is the largest predictive std (p.u.) over every query and bus; `current_largest_std`
    with today's meters. Empty `buses` when the context reads every bus."""
    answer = await engine.placement(rt, body, tenant)
    result = answer.result
    return json_response(
        {
            **answer.source.json(),
            "queries": answer.queries,
            "current_largest_std": result.current,
            "buses": [
                {
                    "bus": answer.buses[int(j)],
                    "output": answer.outputs[int(j)],
                    "largest_std": float(spread),
                    "largest_at": answer.outputs[int(worst)],
                }
                for j, spread, worst in zip(result.candidates, result.largest_spread, result.worst_bus, strict=True)
            ],
            "timing": {"total_ms": answer.seconds * 1e3, "context_cached": answer.context_cached},
        }
    )
