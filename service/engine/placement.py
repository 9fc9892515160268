"""POST /v1/meter-placement's flow: the context and queries checked as for predict, network-fit fitted
on the context (the same cached encoding predict uses), models.meter_placement run in a pool worker.

Each candidate (a bus the context reads in no row) costs one pass of the branch posterior over the
queries, so candidates x queries is bounded by GRIDPFN_MAX_QUERIES (the limit of one predict request)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from models.meter_placement import MeterPlacement, rank_meters
from service.engine import sparse
from service.engine.answers import Source
from service.engine.errors import InvalidInput, TooLarge
from service.engine.inference import model_and_context
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

PLACING_MODEL = "network-fit"  # the served model whose posterior placement updates


@dataclass(frozen=True)
class PlacementAnswer:
    source: Source
    outputs: tuple[str, ...]
    buses: list[int]  # every output bus's number, output order
    result: MeterPlacement
    queries: int
    seconds: float
    context_cached: bool


async def placement(rt: Runtime, req: Any, tenant: Tenant) -> PlacementAnswer:
    """The answer to a MeterPlacementRequest from `tenant`."""
    t0 = time.perf_counter()
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    if loaded.name != PLACING_MODEL or not hasattr(loaded.method, "branch_inputs"):
        raise InvalidInput(
            "model",
            f"meter placement updates network-fit's posterior; {loaded.name} has none to update",
            f'model: "{PLACING_MODEL}"',
        )
    queries = rt.checks.queries(req.queries, net)
    candidates = int((ctx.metering.readings == 0).sum())
    limit = rt.settings.max_queries
    if len(queries) * max(candidates, 1) > limit:
        raise TooLarge(
            "queries",
            f"{len(queries)} queries x {candidates} unmetered buses is over the limit",
            f"queries x unmetered buses at most {limit} (GRIDPFN_MAX_QUERIES): fewer queries",
        )
    encoded, hit, _ = await rt.fits.prepared(loaded, ctx, net)
    result = await rt.executor.run(
        rank_meters,
        loaded.method,
        encoded.value,
        ctx.x,
        queries,
        sparse.pseudo_loads(ctx.typical_loads, net, ctx.x),  # as the fit took them
        req.top,
    )
    return PlacementAnswer(
        source=Source.of(loaded, net, ctx),
        outputs=tuple(net.output_names),
        buses=[int(b) for b in net.output_buses],
        result=result,
        queries=len(queries),
        seconds=time.perf_counter() - t0,
        context_cached=hit,
    )
